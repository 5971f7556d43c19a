"""Typed configuration: dataclasses, YAML loading, early validation (docs/architecture.md §Layout).

One convention for every config class of the project (as in TRL's ``GRPOConfig`` / ``TrlParser``):
a ``@dataclass`` with a type hint and a help text per field, ``field(metadata={"help": ...})``,
written with :func:`help_field` (``mgrpo/``, which imports nothing from ``harness/``, writes the
same ``field(metadata={"help": ...})`` as TRL); validation in ``validate()`` (or ``__post_init__``
for classes built directly in code) with messages that say what to change. A YAML file given with
``--config`` fills the dataclasses; ``key.sub=value`` overrides from the command line win over the
file. Unknown keys, wrong types and inconsistent values fail at load time with a message that names
the file, the key and what to change, never half-way through a run.

Presets inherit (:func:`load_yaml`): a file may start with ``base: <path relative to it>`` and hold
only its differences from that base; nested mappings merge key by key, lists and scalars replace,
bases may chain. Every caller of :func:`load_yaml` (``load_config``, the launcher, the warm start)
gets the resolved mapping, and what a run saves is the resolved dataclass (no ``base`` key).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

import yaml

T = TypeVar("T")
#: A number in exponent form without a dot (1e-6, 8E+3): YAML 1.1 leaves it a string.
_YAML11_FLOAT = re.compile(r"[-+]?[0-9]+(\.[0-9]*)?[eE][-+]?[0-9]+")


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or inconsistent."""


def help_field(default: Any = dataclasses.MISSING, help: str = "", **kwargs: Any) -> Any:  # noqa: A002
    """``dataclasses.field`` with a help text (shown by ``describe`` and in docs)."""
    if isinstance(default, (list, dict, set)):
        value = default
        kwargs["default_factory"] = lambda: type(value)(value)
        return dataclasses.field(metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping for section {tp.__name__}, got {type(value).__name__}")
        return from_dict(tp, value, where)
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _YAML11_FLOAT.fullmatch(value.strip()):
            # YAML 1.1 (PyYAML) reads 8e-3 and 1e-6 as strings: it wants a dot (8.0e-3); accept both spellings.
            return float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from a nested mapping; unknown keys are an error."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} for {cls.__name__}; known keys: {sorted(names)}"
        )
    kwargs = {k: _coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return obj


def to_dict(obj: Any) -> dict[str, Any]:
    """The resolved config as plain data (saved with every run)."""
    return dataclasses.asdict(obj)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides (values parsed as YAML scalars) to a nested mapping."""
    out = dict(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key.path=value")
        key, raw = item.split("=", 1)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            child = dict(child) if isinstance(child, dict) else {}
            node[part] = child
            node = child
        node[parts[-1]] = yaml.safe_load(raw)
    return out


#: The top-level key of a preset that names the preset it inherits from (see :func:`load_yaml`).
BASE_KEY = "base"


def _read_mapping(p: Path) -> dict[str, Any]:
    """One YAML file's top-level mapping, as written (no inheritance), with errors that name the file."""
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections")
    return data


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: mappings merge key by key (recursively), anything else (a list, a scalar,
    ``null``) replaces the base's value. Neither argument is changed."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, resolving preset inheritance, with errors that name the file.

    A file may name another with a top-level ``base: <path>`` (relative to the file's own folder) and
    then holds only its differences: the base is loaded first (it may name a base of its own) and the
    file's keys are merged on top (:func:`merge`: nested mappings key by key, lists and scalars
    replace). The result has no ``base`` key, so what a run saves (``to_dict`` of the dataclass) is the
    fully resolved config. A missing base or a cycle is a :class:`ConfigError` naming the files."""
    return _load_chain(Path(path), ())


def _load_chain(p: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    key = p.resolve()
    if key in [c.resolve() for c in chain]:
        names = " -> ".join(str(c) for c in (*chain, p))
        raise ConfigError(f"{chain[0]}: the base chain has a cycle: {names}; remove one of these base: keys")
    data = _read_mapping(p)
    if BASE_KEY not in data:
        return data
    data = dict(data)
    base = data.pop(BASE_KEY)
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{p}: base: expected the path of one preset file, relative to {p.parent} "
                          f"(e.g. base: _base.yaml), got {base!r}")
    base_path = p.parent / base
    if not base_path.is_file():
        raise ConfigError(f"{p}: base {base!r} not found (looked for {base_path}; the path is relative to the "
                          "folder of the file that names it)")
    return merge(_load_chain(base_path, (*chain, p)), data)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Load ``cls`` from a YAML file (optional) plus command-line overrides."""
    data = load_yaml(path) if path is not None else {}
    data = apply_overrides(data, overrides or [])
    return from_dict(cls, data, where=str(path) if path is not None else "config")


def describe(cls: type) -> str:
    """Markdown table of a config dataclass's fields (name, type, default, help)."""
    rows = ["| key | type | default | help |", "|---|---|---|---|"]
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "required"  # type: ignore[misc]
        )
        tp = getattr(hints[f.name], "__name__", str(hints[f.name]))
        rows.append(f"| `{f.name}` | {tp} | `{default!r}` | {f.metadata.get('help', '')} |")
    return "\n".join(rows)
