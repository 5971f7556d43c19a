"""The dependency direction of ``docs/architecture.md`` ("Layers and dependency direction"), checked on
the source: every module of ``mgrpo/``, ``harness/``, ``benchmarks/`` and ``baselines/`` is parsed
(AST only, nothing is imported), its imports at any depth are collected (module level, inside
functions, under ``if TYPE_CHECKING:``), and each must point down the layer table. Also: no import
cycles between modules, imports inside functions only of the allow-listed heavy third-party
packages, and a first-party import inside a function only with a ``# lazy: <reason>`` comment on its
(first) line.

The layer table and the lazy-import allowlist are read from ``docs/architecture.md`` (between the
``layers:begin``/``layers:end`` and ``lazy-imports:begin``/``lazy-imports:end`` markers): that page
is the one place the layering is written. A failure lists every offending ``file:line`` and the edge.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("mgrpo", "harness", "benchmarks", "baselines")


# ----------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Component:
    """One row of the layer table."""

    layer: int
    name: str
    files: tuple[str, ...]
    only: tuple[str, ...] = ()
    never: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.name}, layer {self.layer}"


def _section(text: str, marker: str) -> str:
    m = re.search(rf"<!-- {marker}:begin[^>]*-->(.*?)<!-- {marker}:end -->", text, re.S)
    if m is None:
        raise ValueError(f"{DOC.relative_to(ROOT)}: no '<!-- {marker}:begin -->' ... '<!-- {marker}:end -->' block")
    return m.group(1)


def _cells(cell: str) -> tuple[str, ...]:
    return tuple(re.findall(r"`([^`]+)`", cell))


def read_layer_table(text: str) -> list[Component]:
    """The rows of the table between the ``layers`` markers (header and separator skipped)."""
    rows: list[Component] = []
    for n, line in enumerate(_section(text, "layers").strip().splitlines()):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if n < 2:  # header, separator
            continue
        if len(cells) != 5 or not cells[0].isdigit():
            raise ValueError(f"layer table row {line!r}: want '| layer | component | files | may import only | "
                             "never imports |' with an integer layer")
        rows.append(Component(int(cells[0]), cells[1], _cells(cells[2]), _cells(cells[3]), _cells(cells[4])))
    if not rows:
        raise ValueError("the layer table is empty")
    return rows


def read_lazy_allowlist(text: str) -> frozenset[str]:
    return frozenset(_cells(_section(text, "lazy-imports")))


def matches(path: str, pattern: str) -> bool:
    """``dir/``: everything under it; ``a/b.py``: that file; ``*``: a wildcard that also matches ``/``."""
    if pattern.endswith("/"):
        return path.startswith(pattern)
    return fnmatch.fnmatchcase(path, pattern) or ("*" in pattern and fnmatch.fnmatchcase(path, pattern + "/*"))


# ----------------------------------------------------------------------------------- the code


@dataclass(frozen=True)
class Import:
    """One imported name, resolved to the module it loads."""

    path: str  # importing file, relative to the root
    line: int
    target: str  # dotted module name (first party: resolved to a module or package that exists)
    first_party: bool
    in_function: bool
    type_checking: bool
    resolved: bool = True  # False: a first-party name that is no module of the tree
    lazy_reason: str | None = None  # the text of a ``# lazy: <reason>`` comment on the import's first line


@dataclass
class Tree:
    root: Path
    modules: dict[str, str] = field(default_factory=dict)  # dotted name -> relative path
    imports: list[Import] = field(default_factory=list)
    tops: frozenset[str] = frozenset()  # the first-party top-level names

    def path_of(self, module: str) -> str:
        return self.modules[module]

    def __repr__(self) -> str:  # short in pytest's failure output
        return f"Tree({self.root}, {len(self.modules)} modules, {len(self.imports)} imports)"


def module_name(rel: Path) -> tuple[str, bool]:
    parts = list(rel.with_suffix("").parts)
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _is_type_checking(test: ast.expr) -> bool:
    return any(isinstance(n, (ast.Name, ast.Attribute)) and (getattr(n, "id", None) == "TYPE_CHECKING"
               or getattr(n, "attr", None) == "TYPE_CHECKING") for n in ast.walk(test))


def scan(root: Path, packages: tuple[str, ...] = PACKAGES) -> Tree:
    tree = Tree(root)
    files: list[tuple[str, bool, Path]] = []
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            rel = p.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            name, is_pkg = module_name(rel)
            tree.modules[name] = rel.as_posix()
            files.append((name, is_pkg, p))
    tree.tops = frozenset(m.split(".")[0] for m in tree.modules)
    for name, is_pkg, p in files:
        rel = p.relative_to(root).as_posix()
        text = p.read_text(encoding="utf-8")
        source = ast.parse(text, filename=rel)
        _collect(tree, name, is_pkg, rel, source, in_function=False, type_checking=False,
                 reasons=lazy_reasons(text))
    return tree


LAZY_COMMENT = re.compile(r"#\s*lazy:\s*(\S.*?)\s*$")


def lazy_reasons(text: str) -> dict[int, str]:
    """Line -> the reason of a ``# lazy: <reason>`` comment on that line (a real comment, not a string)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and (m := LAZY_COMMENT.match(tok.string)):
            out[tok.start[0]] = m.group(1)
    return out


def _first_party(tree: Tree, dotted: str) -> bool:
    return dotted.split(".")[0] in tree.tops


def _collect(tree: Tree, mod: str, is_pkg: bool, rel: str, node: ast.AST, *, in_function: bool,
             type_checking: bool, reasons: dict[int, str]) -> None:
    """Every import under ``node``, remembering whether it sits in a function or a TYPE_CHECKING block."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            for target in _targets(tree, mod, is_pkg, child):
                fp = _first_party(tree, target)
                tree.imports.append(Import(rel, child.lineno, target, fp, in_function, type_checking,
                                           resolved=(not fp) or target in tree.modules,
                                           lazy_reason=reasons.get(child.lineno)))
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for branch, tc in ((child.body, True), (child.orelse, type_checking)):
                body = ast.Module(body=branch, type_ignores=[])
                _collect(tree, mod, is_pkg, rel, body, in_function=in_function, type_checking=tc, reasons=reasons)
        else:
            fn = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            _collect(tree, mod, is_pkg, rel, child, in_function=fn, type_checking=type_checking, reasons=reasons)


def _targets(tree: Tree, mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    out = []
    for alias in node.names:
        sub = f"{prefix}.{alias.name}"
        out.append(sub if sub in tree.modules else prefix)
    return out


# ----------------------------------------------------------------------------------- the rules


def component_map(tree: Tree, table: list[Component]) -> tuple[dict[str, Component], list[str]]:
    """Module -> its component, and the problems (a module in no row, or in two)."""
    where: dict[str, Component] = {}
    problems = []
    for mod, path in sorted(tree.modules.items()):
        rows = [c for c in table if any(matches(path, pat) for pat in c.files)]
        if len(rows) != 1:
            names = ", ".join(c.name for c in rows) or "no component"
            problems.append(f"{path}: matches {names}; add it to exactly one row of the layer table")
            continue
        where[mod] = rows[0]
    return where, problems


def layer_violations(tree: Tree, table: list[Component]) -> list[str]:
    where, out = component_map(tree, table)
    for imp in tree.imports:
        if not imp.first_party:
            continue
        src_mod = module_name(Path(imp.path))[0]
        src = where.get(src_mod)
        if not imp.resolved:
            out.append(f"{imp.path}:{imp.line}: imports {imp.target}, which is no module of the tree")
            continue
        dst = where.get(imp.target)
        if src is None or dst is None or src is dst:
            continue
        dst_path = tree.path_of(imp.target)
        where_ = " under TYPE_CHECKING" if imp.type_checking else " inside a function" if imp.in_function else ""
        edge = f"{imp.path}:{imp.line}: {src_mod} ({src}) imports {imp.target} ({dst}){where_}"
        if dst.layer > src.layer:
            out.append(f"{edge}: upward")
        elif dst.layer == src.layer:
            out.append(f"{edge}: between sibling components of one layer")
        elif src.only and not any(matches(dst_path, pat) for pat in src.only):
            out.append(f"{edge}: {src.name} may import only {', '.join(src.only)}")
        elif any(matches(dst_path, pat) for pat in src.never if "/" in pat or pat.endswith(".py")):
            out.append(f"{edge}: {src.name} never imports it")
    return list(dict.fromkeys(out))  # one line per file, line and edge


def graph(tree: Tree) -> dict[str, dict[str, Import]]:
    """First-party module graph (every import, any depth), with one example import per edge."""
    g: dict[str, dict[str, Import]] = {m: {} for m in tree.modules}
    for imp in tree.imports:
        if imp.first_party and imp.resolved:
            src = module_name(Path(imp.path))[0]
            if imp.target != src:
                g[src].setdefault(imp.target, imp)
    return g


def forbidden_third_party(tree: Tree, table: list[Component]) -> list[str]:
    """``never imports`` bare names: not imported by the component, nor by anything it reaches."""
    where, _ = component_map(tree, table)
    g = graph(tree)
    third: dict[str, list[Import]] = {}
    for imp in tree.imports:
        if not imp.first_party:
            third.setdefault(module_name(Path(imp.path))[0], []).append(imp)
    out = []
    for mod in sorted(tree.modules):
        comp = where.get(mod)
        banned = {p for p in (comp.never if comp else ()) if "/" not in p and not p.endswith(".py")}
        if not banned:
            continue
        # breadth-first over what mod reaches, remembering how
        via: dict[str, str | None] = {mod: None}
        queue = [mod]
        while queue:
            cur = queue.pop(0)
            for imp in third.get(cur, []):
                top = imp.target.split(".")[0]
                if top in banned:
                    chain = []
                    node: str | None = cur
                    while node is not None:
                        chain.append(node)
                        node = via[node]
                    path = " -> ".join(reversed(chain))
                    out.append(f"{imp.path}:{imp.line}: imports {imp.target}; {comp.name} never imports {top} "
                               f"(reached from {tree.path_of(mod)} via {path})")
            for nxt in g[cur]:
                if nxt not in via:
                    via[nxt] = cur
                    queue.append(nxt)
    return sorted(set(out))


def cycles(tree: Tree) -> list[str]:
    """One concrete cycle per strongly connected component of the module graph (Tarjan)."""
    g = graph(tree)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    sccs: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(comp)

    for v in sorted(g):
        if v not in index:
            strong(v)
    out = []
    for comp in sccs:
        members = set(comp)
        start = min(comp)
        # shortest path back to start inside the component
        prev: dict[str, str] = {}
        queue = [start]
        seen = {start}
        found = None
        while queue and found is None:
            cur = queue.pop(0)
            for nxt in sorted(g[cur]):
                if nxt == start:
                    found = cur
                    break
                if nxt in members and nxt not in seen:
                    seen.add(nxt)
                    prev[nxt] = cur
                    queue.append(nxt)
        chain = [start]
        node = found
        back = []
        while node is not None and node != start:
            back.append(node)
            node = prev.get(node)
        chain += list(reversed(back)) + [start]
        steps = [f"{tree.path_of(a)}:{g[a][b].line} ({a} -> {b})" for a, b in zip(chain, chain[1:])]
        out.append(f"cycle of {len(members)} modules: " + "; ".join(steps))
    return out


def lazy_violations(tree: Tree, allow: frozenset[str]) -> list[str]:
    out = []
    for imp in tree.imports:
        if imp.in_function and not imp.first_party and imp.target.split(".")[0] not in allow:
            out.append(f"{imp.path}:{imp.line}: imports {imp.target} inside a function; import it at the top of "
                       "the module (only the optional heavy packages of docs/architecture.md may be imported lazily)")
    return out


def unexplained_lazy_first_party(tree: Tree, pending: frozenset[str] = frozenset()) -> list[str]:
    """First-party imports inside a function without a ``# lazy: <reason>`` comment (files in ``pending``,
    patterns as in the layer table, are skipped); one line per import statement."""
    found: dict[tuple[str, int], list[str]] = {}
    for imp in tree.imports:
        if imp.in_function and imp.first_party and not imp.lazy_reason \
                and not any(matches(imp.path, pat) for pat in pending):
            found.setdefault((imp.path, imp.line), []).append(imp.target)
    return [f"{path}:{line}: imports {', '.join(dict.fromkeys(targets))} inside a function; import it at the top of "
            "the module, or give the reason it must wait on the import line: '# lazy: <reason>'"
            for (path, line), targets in sorted(found.items())]


def _report(kind: str, problems: list[str]) -> str:
    return (f"{len(problems)} {kind} (docs/architecture.md, 'Layers and dependency direction'):\n  "
            + "\n  ".join(problems))


# ----------------------------------------------------------------------------------- tests




@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def table(doc: str) -> list[Component]:
    return read_layer_table(doc)


@pytest.fixture(scope="module")
def tree() -> Tree:
    return scan(ROOT)


def test_layer_table_is_well_formed(table: list[Component], tree: Tree, doc: str) -> None:
    names = [c.name for c in table]
    assert len(names) == len(set(names)), f"duplicate component names in the layer table: {names}"
    paths = list(tree.modules.values())
    stale = [f"{c.name}: {pat}" for c in table for pat in c.files if not any(matches(p, pat) for p in paths)]
    assert not stale, f"layer table patterns that match no module (stale rows?): {stale}"
    assert read_lazy_allowlist(doc), "the lazy-import allowlist of docs/architecture.md is empty"


def test_every_module_has_exactly_one_component(table: list[Component], tree: Tree) -> None:
    _, problems = component_map(tree, table)
    assert not problems, _report("modules without exactly one component", problems)


def test_imports_point_down_the_layers(table: list[Component], tree: Tree) -> None:
    problems = layer_violations(tree, table)
    assert not problems, _report("imports against the layering", problems)


def test_components_never_reach_forbidden_packages(table: list[Component], tree: Tree) -> None:
    problems = forbidden_third_party(tree, table)
    assert not problems, _report("forbidden third-party imports", problems)


def test_no_import_cycles(tree: Tree) -> None:
    problems = cycles(tree)
    assert not problems, _report("import cycles", problems)


def test_lazy_imports_are_only_heavy_optional_packages(tree: Tree, doc: str) -> None:
    problems = lazy_violations(tree, read_lazy_allowlist(doc))
    assert not problems, _report("imports inside functions that are not allow-listed", problems)


def test_first_party_imports_inside_functions_say_why(tree: Tree) -> None:
    problems = unexplained_lazy_first_party(tree)
    assert not problems, _report("first-party imports inside functions without a '# lazy:' reason", problems)


# ------------------------------------------------------------------- the checker catches what it should


SYNTHETIC_TABLE = """
<!-- layers:begin -->
| layer | component | files | may import only | never imports |
|---|---|---|---|---|
| 0 | low | `low/` | | |
| 0 | side | `side/` | | |
| 1 | mid | `mid/` | `low/a.py` | `torch` |
| 2 | top | `top*` | | `low/b.py` |
<!-- layers:end -->
<!-- lazy-imports:begin -->
`torch`
<!-- lazy-imports:end -->
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


def test_checker_reports_each_kind_of_violation_with_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": "import json\n\ndef f():\n    from mid import leaf  # upward\n    import yaml  # not allow-listed\n",
        "low/b.py": "from low import c\n",
        "low/c.py": "from . import b  # cycle b <-> c\n",
        "side/__init__.py": "from low import a  # sibling\n",
        "mid/__init__.py": "",
        "mid/leaf.py": "",
        "mid/m.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from low import b  # not in 'only'\n"
                    "from low import a\nfrom low.gone import x\n",
        "mid/n.py": "from mid import m\n\ndef g():\n    import torch\n",
        "top/__init__.py": "from low import b\nfrom mid import n\n",
    })
    table = read_layer_table(SYNTHETIC_TABLE)
    tree = scan(tmp_path, ("low", "side", "mid", "top"))
    layers = "\n".join(layer_violations(tree, table))
    assert "low/a.py:4: low.a (low, layer 0) imports mid.leaf (mid, layer 1) inside a function: upward" in layers
    assert "side/__init__.py:1:" in layers and "sibling" in layers
    assert "mid/m.py:3:" in layers and "under TYPE_CHECKING: mid may import only low/a.py" in layers
    assert "mid/m.py:5: imports low.gone, which is no module of the tree" in layers
    assert "top/__init__.py:1:" in layers and "never imports it" in layers
    assert "mid/m.py:4" not in layers  # low.a is allowed
    assert len(layer_violations(tree, table)) == 5
    found = cycles(tree)
    assert len(found) == 1 and "low/b.py:1 (low.b -> low.c)" in found[0] and "low/c.py:1 (low.c -> low.b)" in found[0]
    lazy = lazy_violations(tree, read_lazy_allowlist(SYNTHETIC_TABLE))
    assert lazy == [lazy[0]] and lazy[0].startswith("low/a.py:5: imports yaml inside a function")
    banned = forbidden_third_party(tree, table)
    assert len(banned) == 1 and banned[0].startswith("mid/n.py:4: imports torch; mid never imports torch")
    _, unplaced = component_map(scan(tmp_path, ("low", "side", "mid", "top")),
                                [c for c in table if c.name != "top"])
    assert unplaced == ["top/__init__.py: matches no component; add it to exactly one row of the layer table"]
    unexplained = unexplained_lazy_first_party(tree)
    assert [u.split(" inside")[0] for u in unexplained] == ["low/a.py:4: imports mid.leaf"]
    assert unexplained_lazy_first_party(tree, frozenset({"low/"})) == []


def test_a_lazy_reason_comment_explains_a_first_party_import_inside_a_function(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/heavy.py": "",
        "pkg/light.py": "from pkg import heavy\n\n"
                        "def f():\n    from pkg import heavy  # lazy: heavy imports torch\n\n"
                        "def g():\n    from pkg.heavy import (  # lazy: ditto, on the first line\n        x,\n    )\n\n"
                        "def h():\n    from pkg.heavy import (\n        y,  # lazy: not on the first line\n    )\n\n"
                        "def i():\n    from . import heavy  # lazy:\n\n"
                        "def j():\n    from pkg import heavy  # a comment, no reason\n    s = '# lazy: a string'\n",
    })
    tree = scan(tmp_path, ("pkg",))
    assert [u.split(": imports")[0] for u in unexplained_lazy_first_party(tree)] == [
        "pkg/light.py:12", "pkg/light.py:17", "pkg/light.py:20"]
    assert {i.line: i.lazy_reason for i in tree.imports if i.in_function}[4] == "heavy imports torch"


def test_relative_and_package_imports_resolve(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "from .x import y\nfrom .. import z\nfrom ..z import W\n",
        "pkg/sub/x.py": "",
        "pkg/z.py": "",
    })
    tree = scan(tmp_path, ("pkg",))
    got = sorted((i.path, i.target, i.resolved) for i in tree.imports)
    assert got == [("pkg/sub/__init__.py", "pkg.sub.x", True), ("pkg/sub/__init__.py", "pkg.z", True),
                   ("pkg/sub/__init__.py", "pkg.z", True)]


def test_code_and_docs_cite_the_repository_docs_not_the_founding_design():
    """Issue 15: users never see the founding design document, so nothing in the repository cites it."""
    import re
    import subprocess

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    pattern = re.compile(r"DESIGN(\.md)?\s*§")
    found = [f"{name}:{i}" for name in files if name.endswith((".py", ".md", ".yaml", ".toml", ".sh"))
             and (ROOT / name).is_file()
             for i, line in enumerate((ROOT / name).read_text(errors="replace").splitlines(), 1)
             if pattern.search(line)]
    assert not found, f"cite docs/... instead of the founding design: {found[:10]}"
