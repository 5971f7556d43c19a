"""No import cycles through the benchmarks, the offline world or the trainer registry (issue 15).

An import inside a function hides a cycle from Python but not from a reader; so the graph here is
built from the source (``ast``), with the imports inside functions counted like those at the top.
Registry modules loaded by name (``importlib.import_module`` in ``benchmarks.registry``) are not
imports of the source and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("benchmarks", "harness", "baselines", "mgrpo")
CHECKED = ("benchmarks", "harness.world", "baselines")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the repository modules it imports anywhere in its source."""
    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets |= {known(f"{node.module}.{a.name}") if f"{node.module}.{a.name}" in modules
                            else known(node.module) for a in node.names}
        graph[name] = {t for t in targets if t and t != name}
    return graph


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import path from ``start`` back to itself, if any."""
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for nxt in sorted(graph[path[-1]]):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                paths.append(path + [nxt])
    return None


def test_no_import_cycles():
    graph = _imports(_modules())
    checked = [m for m in graph if m.startswith(CHECKED)]
    assert {"benchmarks.base", "benchmarks.judges", "harness.world.generator", "harness.world.render",
            "harness.world.expert", "harness.world.tasks"} <= set(checked)
    assert "benchmarks.judges" in graph["benchmarks.base"]  # the graph sees the imports it should
    cycles = [c for m in checked if (c := _cycle_through(graph, m))]
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
