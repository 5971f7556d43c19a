"""The trainer registry: ``TRAINERS[name]`` says which roles a trainer needs and what trains (docs/architecture.md §What the harness is, docs/training.md, docs/architecture.md §Layout).

The three trainers of arXiv 2511.13288 (docs/architecture.md §What the harness is) differ only in *which roles run* and *which
of them has an optimizer*; the roles themselves (``harness.role``) and the M-GRPO math
(``mgrpo/``) are shared. So a trainer here is a small declarative :class:`TrainerSpec`, registered
by name with the :func:`register_trainer` decorator, and everything that varies by trainer
(which processes ``python -m harness train`` starts, whether the planner delegates or uses the
tools itself, whether the sub-agent role builds an ``MGRPOTrainer``) reads these fields, never
``if trainer == ...`` chains.

| name           | roles            | planner agent  | sub-agent trains |
|----------------|------------------|----------------|------------------|
| ``single_agent`` | planner        | ``single_agent`` (search/visit itself) | - |
| ``frozen_sub``   | planner, sub   | ``planner`` (delegate over HTTP) | no (service only) |
| ``mgrpo``        | planner, sub   | ``planner`` (delegate over HTTP) | yes (d·K aligned groups) |

Decision: the ``mgrpo`` entry lives here too (docs/architecture.md §Layout names ``baselines/`` for the two
baselines): one registry, one mechanism; ``mgrpo/`` stays free of harness concepts such as roles.
This module imports nothing from ``harness/`` or ``mgrpo/`` (a leaf, cheap to import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["CONFIGS_DIR", "DEFAULT_PRESET", "ROLE_NAMES", "TRAINERS", "TrainerSpec", "get_trainer",
           "register_trainer"]

#: The role processes a trainer can need (docs/training.md); also the run-directory sub-folders (docs/report.md).
ROLE_NAMES = ("planner", "sub")
#: The run configs, relative to the repository root: ``<CONFIGS_DIR>/<preset>/<trainer>.yaml``.
CONFIGS_DIR = "baselines/configs"
#: The preset a command names when none is chosen (the embedded tiny default, docs/models.md).
DEFAULT_PRESET = "tiny"


@dataclass(frozen=True)
class TrainerSpec:
    """What one trainer runs (docs/architecture.md §What the harness is table).

    Attributes:
        name: the registry name (``--trainer``).
        description: one line for ``--help`` and docs.
        roles: the role processes it needs, in start order (``"sub"`` first when present, since the
            planner calls its service).
        planner_agent: the agent the planner role runs: ``"planner"`` (tool ``delegate``, needs the
            sub role's service) or ``"single_agent"`` (tools ``search``/``visit``, no sub role).
        sub_trains: whether the sub role has an optimizer (``mgrpo``) or only serves (``frozen_sub``).
    """

    name: str
    description: str
    roles: tuple[str, ...]
    planner_agent: str
    sub_trains: bool

    @property
    def delegates(self) -> bool:
        """True when the planner calls the sub-agent service (``planner_agent == "planner"``)."""
        return self.planner_agent == "planner"

    @property
    def has_sub(self) -> bool:
        return "sub" in self.roles

    def config_path(self, preset: str = DEFAULT_PRESET) -> str:
        """This trainer's run config in ``preset``, relative to the repository root (e.g.
        ``baselines/configs/tiny/mgrpo.yaml``): what ``python -m harness train --config`` takes."""
        return f"{CONFIGS_DIR}/{preset}/{self.name}.yaml"

    def validate(self) -> None:
        unknown = [r for r in self.roles if r not in ROLE_NAMES]
        if unknown or "planner" not in self.roles:
            raise ValueError(f"trainer {self.name!r}: roles {self.roles} must include 'planner' and only {ROLE_NAMES}")
        if self.planner_agent not in ("planner", "single_agent"):
            raise ValueError(f"trainer {self.name!r}: planner_agent must be 'planner' or 'single_agent'")
        if self.delegates != self.has_sub:
            raise ValueError(f"trainer {self.name!r}: a delegating planner needs the 'sub' role and vice versa")
        if self.sub_trains and not self.has_sub:
            raise ValueError(f"trainer {self.name!r}: sub_trains=True needs the 'sub' role")


#: Registered trainers by name (filled by :func:`register_trainer`).
TRAINERS: dict[str, TrainerSpec] = {}


def register_trainer(name: str, *, description: str, roles: tuple[str, ...], planner_agent: str,
                     sub_trains: bool) -> Callable[[type], type]:
    """Class decorator: register a trainer under ``name``; the class documents it (its docstring).

    The decorated class is kept as the entry's documentation anchor and gets ``spec`` (the
    :class:`TrainerSpec`); registering a name twice is an error.
    """

    def wrap(cls: type) -> type:
        if name in TRAINERS:
            raise ValueError(f"trainer {name!r} is registered twice")
        spec = TrainerSpec(name=name, description=description, roles=tuple(roles),
                           planner_agent=planner_agent, sub_trains=sub_trains)
        spec.validate()
        TRAINERS[name] = spec
        cls.spec = spec  # type: ignore[attr-defined]
        return cls

    return wrap


def get_trainer(name: str) -> TrainerSpec:
    """The spec of trainer ``name``; a ``KeyError`` naming the registered ones otherwise."""
    try:
        return TRAINERS[name]
    except KeyError:
        raise KeyError(f"unknown trainer {name!r}; registered trainers: {sorted(TRAINERS)}") from None


@register_trainer("single_agent", description="one LLM with search/visit itself; GRPO over the K rollouts of a query",
                  roles=("planner",), planner_agent="single_agent", sub_trains=False)
class SingleAgent:
    """Baseline: no delegation. The planner role runs the single agent (planner prompt, tools
    ``search``/``visit``) and trains it with group advantages over K rollouts (docs/architecture.md §What the harness is)."""


@register_trainer("frozen_sub", description="trains the planner; the sub-agent LLM stays fixed (served, not trained)",
                  roles=("sub", "planner"), planner_agent="planner", sub_trains=False)
class FrozenSub:
    """Baseline: the planner trains over K rollouts; the sub role only serves subtasks with its
    fixed weights (policy version stays 0)."""


@register_trainer("mgrpo", description="M-GRPO: planner over K, sub-agent over the d*K aligned sub-trajectories",
                  roles=("sub", "planner"), planner_agent="planner", sub_trains=True)
class MGRPO:
    """M-GRPO (arXiv 2511.13288): both agents train, each with its own optimizer; the sub role
    aligns each query's sub-trajectories to d per rollout (docs/paper.md) and trains on d*K groups."""
