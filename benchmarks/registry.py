"""Benchmark registry: benchmarks are small classes registered by name (docs/benchmarks.md).

``@register_benchmark`` adds a :class:`~benchmarks.base.Benchmark` subclass under its ``name``;
``get_benchmark(name, **options)`` builds one; ``list_benchmarks()`` lists the names. The
built-in modules (``gaia``, ``xbench``, ``webwalkerqa``, and ``local``: the ``local_gaia`` /
``local_xbench`` / ``local_webwalkerqa`` twins over the offline world of docs/world.md) are imported on first
use, so importing the registry stays cheap. A new benchmark is one small class in its own module,
decorated with ``@register_benchmark``, plus its module name in :data:`BUILTIN_MODULES`.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

from benchmarks.base import Benchmark

#: Modules whose import registers the built-in benchmarks.
BUILTIN_MODULES: tuple[str, ...] = ("benchmarks.gaia", "benchmarks.xbench", "benchmarks.webwalkerqa",
                                    "benchmarks.local")

_REGISTRY: dict[str, type[Benchmark]] = {}
_builtins_loaded = False

B = TypeVar("B", bound=type[Benchmark])


class UnknownBenchmark(LookupError):
    """No benchmark is registered under that name (the message lists the registered ones)."""


def register_benchmark(cls: B) -> B:
    """Class decorator: register ``cls`` under ``cls.name``; checks name and version."""
    if not (isinstance(cls, type) and issubclass(cls, Benchmark)):
        raise TypeError(f"@register_benchmark needs a Benchmark subclass, got {cls!r}")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{cls.__qualname__}.name must be an identifier-like str, got {name!r}")
    if not isinstance(cls.version, str) or not cls.version:
        raise ValueError(f"{cls.__qualname__}.version must be a non-empty str, got {cls.version!r}")
    existing = _REGISTRY.get(name)
    if existing is not None and existing is not cls and (
            existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"benchmark name {name!r} is already registered by "
                         f"{existing.__module__}.{existing.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        _builtins_loaded = True


def list_benchmarks() -> list[str]:
    """Names of all registered benchmarks, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def benchmark_class(name: str) -> type[Benchmark]:
    """The class registered under ``name``; :class:`UnknownBenchmark` lists the known names."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise UnknownBenchmark(f"unknown benchmark {name!r}; registered: {known}") from None


def get_benchmark(name: str, **options: Any) -> Benchmark:
    """Build the benchmark registered under ``name`` with its options (see each class)."""
    return benchmark_class(name)(**options)
