"""Local tasks in the three benchmarks' own schemas, generated from the world graph (docs/world.md).

* **GAIA-style** (``gaia``): ``task_id, Question, Level, Final answer, file_name, file_path,
  Annotator Metadata{Steps, Number of steps, How long did this take?, Tools, Number of
  tools}``, all values strings as in the official loader. Level = number of hops (subtasks,
  a file counts as one): 1, 2, 3. Exact-match answers: names, numbers, a comma-separated
  list; ``gaia.attachment`` tasks come with a small CSV (``files/<task_id>.csv``).
* **WebWalkerQA-style** (``webwalkerqa``): ``question, answer, root_url, info{domain, lang,
  source_website, golden_path, type, difficulty_level}``; facts on an organisation's site,
  ``single_source`` (one page) or ``multi_source`` (two pages combined); difficulty by the
  deepest page: depth 1 easy, 2 medium, 3-4 hard (as in the real data).
* **XBench-DeepSearch-style** (``xbench``): ``id, prompt, answer, reference_steps``:
  multi-constraint identification of a person (birthplace, birth decade, employer's industry,
  sometimes occupation), unique in the world; the birthplace alone never identifies them
  (like the real questions, some are over-constrained).

Every task carries ``gold`` (a key none of the schemas uses): ``template``, ``answer``,
``answer_entities`` (entity ids), ``pages``, ``facts`` and the decomposition the scripted
expert uses (``subtasks`` in the phrasings of :mod:`harness.world.subtasks`, ``final``,
optional ``pre``/``derive``). Train and test share no answer entity: each entity is drawn
into the test split with ``test_fraction``; a task goes to the split holding all its answer
entities (mixed tasks are dropped). Every emitted task was solved by the scripted expert at
noise 0 through :class:`WorldToolbox` (``TaskConfig.verify``).

URLs inside tasks start with ``TaskConfig.base_url`` (default ``http://world.local``, no
server needed to generate); :func:`rebase` moves a task to a live server's ``base_url``.
Deliberate deviations: WebWalkerQA answers are short exact values (the real ones are
sentences); ``lang`` is always ``en``; XBench ``id`` values are ints unique across splits.

The schemas themselves (:data:`BENCHMARKS`, the field lists, :func:`benchmark_of`,
:func:`task_prompt`) are defined in :mod:`harness.world.schemas`, below this module and the
expert that verifies its tasks, and re-exported here.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import json
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from harness.config import help_field
from harness.records import RecordError, iter_jsonl
from harness.world.expert import run_expert_episode
from harness.world.generator import Entity, World
from harness.world.render import NEWS_OLDER, site_prefix, wiki_path
from harness.world.schemas import (  # re-exported: the schemas are part of this module's API
    BENCHMARKS, GAIA_FIELDS, GAIA_META, WEBWALKER_FIELDS, WEBWALKER_INFO, XBENCH_FIELDS, benchmark_of, task_prompt,
)
from harness.world.subtasks import (
    LOOKUP_NP, LOOKUP_PHRASE, LOOKUP_QUESTION, WALK_PHRASE, WALK_QUESTION, article, filter_text, lookup_text,
    natives_text, walk_text,
)
from harness.world.subtasks import cap_first as _cap
from harness.world.search import SearchIndex
from harness.world.toolbox import DEFAULT_BASE_URL, WorldToolbox

SPLITS = ("train", "test")


@dataclass(frozen=True)
class TaskConfig:
    """How many tasks to generate and how."""

    n_train: int = help_field(200, "Tasks per benchmark in the train split (fewer if the world has fewer).")
    n_test: int = help_field(50, "Tasks per benchmark in the test split (fewer if the world has fewer).")
    test_fraction: float = help_field(0.25, "Probability that an entity is a test answer entity.")
    base_url: str = help_field(
        DEFAULT_BASE_URL, "Base URL written into tasks (``root_url``, ``source_website``, subtasks).")
    verify: bool = help_field(True, "Emit only tasks the scripted expert solves at noise 0 (docs/world.md).")
    template_start: int = help_field(
        0, "Where the round robin over templates (in name order) starts, modulo their number. With few tasks per "
        "benchmark the first templates in name order take every place; the warm start's demonstration worlds each "
        "start further on, so that together they cover every template (docs/training.md, \"Build b3\").")

    def __post_init__(self) -> None:
        for name in ("n_train", "n_test", "template_start"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"TaskConfig.{name}: expected an int >= 0, got {v!r}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"TaskConfig.test_fraction: expected a number in (0, 1), got {self.test_fraction!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"TaskConfig.base_url: expected an http(s) URL, got {self.base_url!r}")


@dataclass
class TaskSet:
    """Generated tasks: ``tasks[(benchmark, split)]`` and how many the expert failed (dropped)."""

    tasks: dict[tuple[str, str], list[dict[str, Any]]]
    rejected: dict[str, int] = field(default_factory=dict)

    def all(self) -> list[dict[str, Any]]:
        return [t for key in sorted(self.tasks) for t in self.tasks[key]]


class TaskFileError(ValueError):
    """A task file line is not a valid task; the message names the file, line and field."""


# ----------------------------------------------------------------------------- phrasing
_Q = LOOKUP_QUESTION  # the one-hop question of each relation (the subtask language parses it back)
_NP = LOOKUP_NP  # the noun phrase of each relation in a chain question (the subtask language parses "Find <it>.")
_CHAINS: dict[int, tuple[tuple[str, ...], ...]] = {
    1: (("person", "birth_year"), ("person", "birth_city"), ("person", "employer"), ("person", "role"),
        ("org", "founded_year"), ("org", "headquarters"), ("org", "ceo"), ("org", "employees"), ("org", "industry"),
        ("city", "population"), ("city", "country"), ("product", "maker"), ("product", "launch_year"),
        ("event", "host_city"), ("event", "year"), ("event", "organiser")),
    2: (("person", "employer", "headquarters"), ("person", "employer", "founded_year"),
        ("person", "birth_city", "country"), ("person", "birth_city", "population"), ("org", "ceo", "birth_year"),
        ("org", "headquarters", "population"), ("product", "maker", "ceo"), ("product", "maker", "headquarters"),
        ("event", "organiser", "ceo"), ("event", "host_city", "country")),
    3: (("product", "maker", "ceo", "birth_city"), ("event", "organiser", "headquarters", "country"),
        ("person", "employer", "ceo", "birth_year"), ("event", "organiser", "ceo", "birth_city")),
}
_WW_Q = WALK_QUESTION  # the one-hop site question of each relation (the subtask language parses it back)


# ----------------------------------------------------------------------------- gold pieces
def _lookup(world: World, ent: Entity, rel: str, subject_text: str) -> dict[str, Any]:
    f = world.fact(ent.id, rel)
    return {"kind": "lookup", "task": lookup_text(rel, subject_text), "phrase": LOOKUP_PHRASE[rel],
            "subject": ent.name, "relation": rel, "answer": f.value, "list": rel == "products",
            "pages": [wiki_path(ent)], "facts": [[ent.name, rel, f.value]]}


def _site_page(world: World, org: Entity, ent: Entity, rel: str) -> tuple[str, int, str]:
    """(path, depth, golden_path) of the site page stating (ent, rel)."""
    pre = site_prefix(org)
    if ent.kind == "org":
        path, labels = f"{pre}/about.html", ["About"]
    elif ent.kind == "person":
        path, labels = f"{pre}/team/{ent.slug}.html", ["Team", ent.name]
    elif ent.kind == "product":
        path, labels = f"{pre}/products/{ent.slug}.html", ["Products", ent.name]
        if rel in ("price", "warranty"):
            path, labels = f"{pre}/products/{ent.slug}/specs.html", labels + ["Specifications"]
        if rel == "warranty":
            path, labels = f"{pre}/products/{ent.slug}/support.html", labels + ["Support"]
    else:  # event article in the site's news
        path = f"{pre}/news/{ent.slug}.html"
        li = world.pages[path].depth - 2
        labels = ["News"] + [NEWS_OLDER] * li + [world.pages[path].title]
    return path, world.pages[path].depth, "root->" + "->".join(labels)


def _walk(world: World, org: Entity, ent: Entity, rel: str, base: str) -> dict[str, Any]:
    f = world.fact(ent.id, rel)
    path, depth, gpath = _site_page(world, org, ent, rel)
    assert (ent.id, rel) in world.pages[path].facts, (path, rel)
    root = base + site_prefix(org) + "/index.html"
    return {"kind": "walk", "task": walk_text(rel, ent.name, root), "phrase": WALK_PHRASE[rel], "subject": ent.name,
            "relation": rel, "answer": f.value, "pages": [path], "facts": [[ent.name, rel, f.value]],
            "depth": depth, "golden_path": gpath}


def _gold(template: str, answer: str, answer_entities: Iterable[str], subtasks: list[dict[str, Any]],
          final: dict[str, Any], base: str, **extra: Any) -> dict[str, Any]:
    pages, facts = [], []
    for s in subtasks:
        pages += [p for p in s["pages"] if p not in pages]
        facts += s["facts"]
    return {"template": template, "answer": answer, "answer_entities": sorted(set(answer_entities)), "pages": pages,
            "facts": facts, "subtasks": subtasks, "final": final, "base_url": base, **extra}


def _chain(world: World, start: Entity, rels: tuple[str, ...]) -> tuple[list[dict[str, Any]], Entity, str]:
    subs, ent = [], start
    for i, rel in enumerate(rels):
        subs.append(_lookup(world, ent, rel, ent.name if i == 0 else f"{{r{i - 1}}}"))
        f = world.fact(ent.id, rel)
        if i + 1 < len(rels):
            ent = world.entities[f.value_id]  # type: ignore[index]
    return subs, ent, world.fact(ent.id, rels[-1]).value


def _meta(steps: list[str], tools: list[str]) -> dict[str, str]:
    return {"Steps": "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)), "Number of steps": str(len(steps)),
            "How long did this take?": f"{2 * len(steps)} minutes",
            "Tools": "\n".join(f"{i}. {t}" for i, t in enumerate(tools, 1)) or "None", "Number of tools": str(len(tools))}


def _steps(subs: list[dict[str, Any]]) -> list[str]:
    return [f"Search for {s['subject']} and read the {s['phrase']} on its encyclopedia page." for s in subs]


# ----------------------------------------------------------------------------- GAIA
def _gaia_candidates(world: World, base: str, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    tools = ["Web browser", "Search engine"]
    for level, chains in _CHAINS.items():
        for chain in chains:
            kind, rels = chain[0], chain[1:]
            template = "gaia." + ".".join(chain)
            for start in world.of_kind(kind):
                subs, last, answer = _chain(world, start, rels)
                x = start.name
                for r in rels[:-1]:
                    x = _NP[r].format(x=x)
                f = world.fact(last.id, rels[-1])
                ents = [last.id] + ([f.value_id] if f.value_id else [])
                gold = _gold(template, answer, ents, subs, {"op": "last"}, base)
                out.setdefault(template, []).append(_gaia_row(_cap(_Q[rels[-1]].format(x=x)), str(level), answer,
                                                              _meta(_steps(subs), tools), gold))
    for org in world.of_kind("org"):  # list answer
        sub = _lookup(world, org, "products", org.name)
        answer = ", ".join(sorted(x.strip() for x in sub["answer"].split(",")))
        gold = _gold("gaia.list.products", answer, [org.id], [sub], {"op": "sorted_list"}, base)
        q = f"List the products of {org.name} in alphabetical order, separated by commas."
        out.setdefault("gaia.list.products", []).append(_gaia_row(q, "1", answer, _meta(_steps([sub]) + ["Sort the names."], tools), gold))
    for p in world.of_kind("product"):  # arithmetic, 3 lookups
        org = world.entities[p.attrs["maker"]]
        subs = [_lookup(world, p, "launch_year", p.name), _lookup(world, p, "maker", p.name),
                _lookup(world, org, "founded_year", "{r1}")]
        answer = str(p.attrs["launch_year"] - org.attrs["founded_year"])
        gold = _gold("gaia.years_after", answer, [p.id, org.id], subs, {"op": "sub", "a": 0, "b": 2}, base)
        q = f"How many years after its maker was founded was {p.name} launched?"
        out.setdefault("gaia.years_after", []).append(
            _gaia_row(q, "3", answer, _meta(_steps(subs) + ["Subtract the years."], tools + ["Calculator"]), gold))
    products = world.of_kind("product")
    for i, p in enumerate(products):  # attachment: CSV -> product -> maker -> CEO
        others = rng.sample([q for q in products if q.id != p.id], min(3, len(products) - 1))
        units = rng.sample(range(10, 900), len(others) + 1)
        units.sort(reverse=True)
        rows = [(p.name, units[0])] + [(o.name, u) for o, u in zip(others, units[1:])]
        rng.shuffle(rows)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["product", "units"])
        w.writerows(rows)
        org = world.entities[p.attrs["maker"]]
        ceo = world.entities[org.attrs["ceo"]]
        subs = [_lookup(world, p, "maker", "{f}"), _lookup(world, org, "ceo", "{r0}")]
        gold = _gold("gaia.attachment", ceo.name, [org.id, ceo.id], subs, {"op": "last"}, base,
                     pre={"op": "csv_argmax", "key": "product", "value": "units"},
                     attachment={"content": buf.getvalue()})
        q = ("The attached file lists units sold per product. Who is the chief executive of the company "
             "that makes the best-selling product?")
        steps = ["Open the attached file and find the product with the most units."] + _steps(subs)
        out.setdefault("gaia.attachment", []).append(
            _gaia_row(q, "3", ceo.name, _meta(steps, ["CSV reader"] + tools), gold))
    return out


def _gaia_row(question: str, level: str, answer: str, meta: dict[str, str], gold: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": "", "Question": question, "Level": level, "Final answer": answer, "file_name": "",
            "file_path": "", "Annotator Metadata": meta, "gold": gold}


# ----------------------------------------------------------------------------- WebWalkerQA
def _difficulty(depth: int) -> str:
    return "easy" if depth <= 1 else "medium" if depth == 2 else "hard"


def _ww_row(world: World, org: Entity, question: str, answer: str, subs: list[dict[str, Any]], gold: dict[str, Any],
            base: str) -> dict[str, Any]:
    depth = max(s["depth"] for s in subs)
    info = {"domain": "organization", "lang": "en",
            "source_website": [base + p for p in dict.fromkeys(p for s in subs for p in s["pages"])],
            "golden_path": [s["golden_path"] for s in subs],
            "type": "single_source" if len(subs) == 1 else "multi_source", "difficulty_level": _difficulty(depth)}
    return {"question": question, "answer": answer, "root_url": base + site_prefix(org) + "/index.html", "info": info,
            "gold": gold}


def _ww_candidates(world: World, base: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}

    def single(org: Entity, ent: Entity, rel: str) -> None:
        sub = _walk(world, org, ent, rel, base)
        f = world.fact(ent.id, rel)
        gold = _gold(f"webwalkerqa.{rel}", sub["answer"], [ent.id] + ([f.value_id] if f.value_id else []), [sub],
                     {"op": "last"}, base)
        q = _WW_Q[rel].format(org=org.name, x=ent.name)
        out.setdefault(gold["template"], []).append(_ww_row(world, org, q, sub["answer"], [sub], gold, base))

    for org in world.of_kind("org"):
        for rel in ("founded_year", "headquarters", "industry", "ceo", "employees"):
            single(org, org, rel)
        staff = sorted((p for p in world.of_kind("person") if p.attrs["employer"] == org.id), key=lambda p: p.name)
        prods = [world.entities[x] for x in org.attrs["products"]]
        events = [e for e in world.of_kind("event") if e.attrs["organiser"] == org.id]
        for p in staff:
            single(org, p, "joined_year")
            single(org, p, "role")
        for p in prods:
            for rel in ("launch_year", "category", "price", "warranty"):
                single(org, p, rel)
        for e in events:
            single(org, e, "attendance")
        # multi-source: consecutive pairs
        for a, b in zip(prods, prods[1:]):
            if a.attrs["price"] != b.attrs["price"]:
                subs = [_walk(world, org, a, "price", base), _walk(world, org, b, "price", base)]
                ans = a.name if a.attrs["price"] < b.attrs["price"] else b.name
                gold = _gold("webwalkerqa.compare_price", ans, [a.id, b.id], subs,
                             {"op": "pick", "cmp": "min", "names": [a.name, b.name]}, base)
                q = f"Which is cheaper on {org.name}'s website, the {a.name} or the {b.name}?"
                out.setdefault(gold["template"], []).append(_ww_row(world, org, q, ans, subs, gold, base))
        for a, b in zip(staff, staff[1:]):
            if a.attrs["joined_year"] != b.attrs["joined_year"]:
                subs = [_walk(world, org, a, "joined_year", base), _walk(world, org, b, "joined_year", base)]
                ans = a.name if a.attrs["joined_year"] < b.attrs["joined_year"] else b.name
                gold = _gold("webwalkerqa.compare_joined", ans, [a.id, b.id], subs,
                             {"op": "pick", "cmp": "min", "names": [a.name, b.name]}, base)
                q = f"Who joined {org.name} earlier, {a.name} or {b.name}, according to the company's website?"
                out.setdefault(gold["template"], []).append(_ww_row(world, org, q, ans, subs, gold, base))
        for a, b in zip(events, events[1:]):
            subs = [_walk(world, org, a, "attendance", base), _walk(world, org, b, "attendance", base)]
            ans = str(a.attrs["attendance"] + b.attrs["attendance"])
            gold = _gold("webwalkerqa.sum_attendance", ans, [a.id, b.id], subs, {"op": "sum"}, base)
            q = f"What was the combined attendance of the {a.name} and the {b.name}, according to {org.name}'s news pages?"
            out.setdefault(gold["template"], []).append(_ww_row(world, org, q, ans, subs, gold, base))
        counts = []  # multi-source, both pages at depth 1 (easy): team size + product count
        for rel, page, n in (("team_size", "team", len(staff)), ("product_count", "products", len(prods))):
            path = f"{site_prefix(org)}/{page}.html"
            counts.append({"kind": "walk", "task": walk_text(rel, org.name, base + site_prefix(org) + "/index.html"),
                           "phrase": WALK_PHRASE[rel], "subject": org.name, "relation": rel, "answer": str(n),
                           "pages": [path], "facts": [[org.name, rel, str(n)]], "depth": world.pages[path].depth,
                           "golden_path": f"root->{page.capitalize()}"})
        ans = str(len(staff) + len(prods))
        gold = _gold("webwalkerqa.team_plus_products", ans, [org.id], counts, {"op": "sum"}, base)
        q = f"How many team members and products does {org.name} list on its website, in total?"
        out.setdefault(gold["template"], []).append(_ww_row(world, org, q, ans, counts, gold, base))
        for p in prods:
            subs = [_walk(world, org, org, "founded_year", base), _walk(world, org, p, "launch_year", base)]
            ans = str(p.attrs["launch_year"] - org.attrs["founded_year"])
            gold = _gold("webwalkerqa.years_to_launch", ans, [p.id], subs, {"op": "sub", "a": 1, "b": 0}, base)
            q = f"How many years after {org.name} was founded did it launch the {p.name}, according to its website?"
            out.setdefault(gold["template"], []).append(_ww_row(world, org, q, ans, subs, gold, base))
    return out


# ----------------------------------------------------------------------------- XBench-DeepSearch
def _xb_candidates(world: World, base: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    people = world.of_kind("person")
    ind = {p.id: world.entities[p.attrs["employer"]].attrs["industry"] for p in people}
    for p in people:
        city = world.entities[p.attrs["birth_city"]]
        lo = p.attrs["birth_year"] // 10 * 10
        natives = sorted((q for q in people if q.attrs["birth_city"] == city.id), key=lambda q: q.name)
        cands = [q for q in natives if lo <= q.attrs["birth_year"] <= lo + 9]
        if len(natives) < 2:  # the city alone must not identify the person
            continue
        by_ind = [q for q in cands if ind[q.id] == ind[p.id]]
        by_role = [q for q in by_ind if q.attrs["role"] == p.attrs["role"]]
        if len(by_ind) == 1:
            final_set, use_role = by_ind, False
        elif len(by_role) == 1:
            final_set, use_role = by_role, True
        else:
            continue
        assert final_set == [p]
        natives_ans = "; ".join(f"{q.name} ({q.attrs['birth_year']})" for q in natives)
        subs = [{"kind": "natives", "task": natives_text(city.name), "phrase": "", "subject": city.name,
                 "answer": natives_ans, "pages": [wiki_path(city)],
                 "facts": [[q.name, "birth_city", city.name] for q in natives]},
                {"kind": "filter", "task": filter_text("industry", ind[p.id], "{cands}"), "phrase": "industry",
                 "subject": "", "answer": "; ".join(q.name for q in by_ind), "candidates": [q.name for q in cands],
                 "pages": [wiki_path(q) for q in cands], "facts": [[q.name, "employer", world.entities[q.attrs["employer"]].name] for q in cands]}]
        role_clause = ""
        if use_role:
            subs.append({"kind": "filter", "task": filter_text("role", p.attrs["role"], "{r1}"), "phrase": "role",
                         "subject": "", "answer": p.name, "candidates": [q.name for q in by_ind],
                         "pages": [wiki_path(q) for q in by_ind], "facts": [[q.name, "role", q.attrs["role"]] for q in by_ind]})
            role_clause = f" as {article(p.attrs['role'])} {p.attrs['role']}"
        template = "xbench.person3" if not use_role else "xbench.person4"
        gold = _gold(template, p.name, [p.id], subs, {"op": "last"}, base,
                     derive={"op": "born_between", "src": 0, "lo": lo, "hi": lo + 9})
        prompt = (f"Which person born in {city.name} in the {lo}s works for {article(ind[p.id])} {ind[p.id]} company"
                  f"{role_clause}? Answer with the full name.")
        steps = [f"List the people born in {city.name} and keep those born in the {lo}s.",
                 f"Keep those who work for {article(ind[p.id])} {ind[p.id]} company."] + (
                     [f"Keep those who are {article(p.attrs['role'])} {p.attrs['role']}."] if use_role else [])
        row = {"id": 0, "prompt": prompt, "answer": p.name,
               "reference_steps": "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)), "gold": gold}
        out.setdefault(template, []).append(row)
    return out


# ----------------------------------------------------------------------------- generation
def _round_robin(groups: dict[str, list[dict[str, Any]]], rng: random.Random, start: int = 0) -> list[dict[str, Any]]:
    names = sorted(groups)
    if names:
        k = start % len(names)
        names = names[k:] + names[:k]
    lists = []
    for name in names:
        items = list(groups[name])
        rng.shuffle(items)
        lists.append(items)
    out = []
    while any(lists):
        for items in lists:
            if items:
                out.append(items.pop())
    return out


def split_test_entities(world: World, fraction: float) -> set[str]:
    """Entity ids drawn into the test split (deterministic in the world's seed)."""
    rng = random.Random(f"mgrpo-split:{world.config.seed}")
    return {eid for eid in world.entities if rng.random() < fraction}


def generate_tasks(world: World, config: TaskConfig | None = None, index: SearchIndex | None = None) -> TaskSet:
    """Tasks of all three benchmarks, split train/test, each verified by the scripted expert.

    ``index``: a prebuilt :class:`SearchIndex` of ``world`` for the verification (built if None).
    """
    config = config or TaskConfig()
    base = config.base_url.rstrip("/")
    rng = random.Random(f"mgrpo-tasks:{world.config.seed}")
    cands = {"gaia": _gaia_candidates(world, base, rng), "webwalkerqa": _ww_candidates(world, base),
             "xbench": _xb_candidates(world, base)}
    test_ids = split_test_entities(world, config.test_fraction)
    toolbox = WorldToolbox(world, base, index=index) if config.verify else None
    result = TaskSet({}, {b: 0 for b in BENCHMARKS})
    xb_id = 0
    for bench in BENCHMARKS:
        split_groups: dict[str, dict[str, list[dict[str, Any]]]] = {"train": {}, "test": {}}
        for template, items in cands[bench].items():
            for t in items:
                ae = set(t["gold"]["answer_entities"])
                split = "test" if ae <= test_ids else "train" if not ae & test_ids else None
                if split:
                    split_groups[split].setdefault(template, []).append(t)
        for split in SPLITS:
            n = config.n_train if split == "train" else config.n_test
            accepted: list[dict[str, Any]] = []
            for t in _round_robin(split_groups[split], rng, config.template_start):
                if len(accepted) >= n:
                    break
                t["gold"].update(benchmark=bench, split=split)
                uid = hashlib.sha1(f"{world.config.seed}:{bench}:{split}:{len(accepted)}:{json.dumps(t, sort_keys=True)}".encode()).digest()
                t["gold"]["uid"] = str(uuid.UUID(bytes=uid[:16], version=4))
                if bench == "gaia":
                    t["task_id"] = t["gold"]["uid"]
                    if "attachment" in t["gold"]:
                        t["file_name"] = f"{t['task_id']}.csv"
                        t["file_path"] = f"files/{t['task_id']}.csv"
                        t["gold"]["attachment"]["file_name"] = t["file_name"]
                elif bench == "xbench":
                    xb_id += 1
                    t["id"] = xb_id
                if toolbox is not None and not run_expert_episode(t, toolbox).correct:
                    result.rejected[bench] += 1
                    continue
                accepted.append(t)
            result.tasks[(bench, split)] = accepted
    return result


# ----------------------------------------------------------------------------- prompts, rebase, I/O
def rebase(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """A copy of ``task`` with every URL moved from its ``gold.base_url`` to ``base_url``."""
    old = task.get("gold", {}).get("base_url", DEFAULT_BASE_URL).rstrip("/")
    new = base_url.rstrip("/")
    return json.loads(json.dumps(task).replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1]))


def select_tasks(tasks: Iterable[dict[str, Any]], *, max_hops: int | None = None,
                 templates: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The tasks with at most ``max_hops`` gold subtasks whose ``gold.template`` matches one of the
    ``templates`` glob patterns (e.g. ``gaia.person.*``); ``None`` keeps everything. Order is kept."""
    pats = list(templates) if templates is not None else None
    out = []
    for t in tasks:
        gold = t.get("gold", {})
        if max_hops is not None and len(gold.get("subtasks", [])) > max_hops:
            continue
        if pats is not None and not any(fnmatch.fnmatchcase(str(gold.get("template", "")), p) for p in pats):
            continue
        out.append(t)
    return out


def write_tasks(taskset: TaskSet, out_dir: str) -> list[str]:
    """Write ``<out_dir>/<benchmark>/<split>.jsonl`` (+ ``gaia/files/*.csv``); returns the paths written."""
    written = []
    for (bench, split), tasks in sorted(taskset.tasks.items()):
        d = os.path.join(out_dir, bench)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{split}.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for t in tasks:
                fh.write(json.dumps(t, ensure_ascii=False, sort_keys=False) + "\n")
                if t.get("file_name"):
                    fpath = os.path.join(d, t["file_path"])
                    os.makedirs(os.path.dirname(fpath), exist_ok=True)
                    with open(fpath, "w", encoding="utf-8", newline="") as f2:
                        f2.write(t["gold"]["attachment"]["content"])
                    written.append(fpath)
        written.append(path)
    return written


def _check_fields(path: str, lineno: int, obj: dict[str, Any]) -> None:
    def need(container: dict[str, Any], names: Iterable[str], where: str) -> None:
        for n in names:
            if n not in container:
                raise TaskFileError(f"{path}:{lineno}: missing field {where}{n!r}")

    bench = benchmark_of(obj)
    if bench == "gaia":
        need(obj, GAIA_FIELDS, "")
        if not isinstance(obj["Annotator Metadata"], dict):
            raise TaskFileError(f"{path}:{lineno}: field 'Annotator Metadata' must be an object")
        need(obj["Annotator Metadata"], GAIA_META, "'Annotator Metadata'.")
        for k in GAIA_FIELDS[:-1]:
            if not isinstance(obj[k], str):
                raise TaskFileError(f"{path}:{lineno}: field {k!r} must be a string (GAIA loader convention), got {type(obj[k]).__name__}")
    elif bench == "webwalkerqa":
        need(obj, WEBWALKER_FIELDS, "")
        if not isinstance(obj["info"], dict):
            raise TaskFileError(f"{path}:{lineno}: field 'info' must be an object")
        need(obj["info"], WEBWALKER_INFO, "'info'.")
    else:
        need(obj, XBENCH_FIELDS, "")


def load_tasks(path: str) -> list[dict[str, Any]]:
    """Read a task JSONL file (any of the three schemas); a broken line raises :class:`TaskFileError`.

    Lines are read by :func:`harness.records.iter_jsonl` (the repository's one JSONL reader); its
    message, which names the file and line, is kept in the :class:`TaskFileError`.
    """
    tasks = []
    try:
        for lineno, obj in iter_jsonl(path):
            try:
                _check_fields(path, lineno, obj)
            except ValueError as exc:
                if isinstance(exc, TaskFileError):
                    raise
                raise TaskFileError(f"{path}:{lineno}: unknown task schema (expected the fields of GAIA "
                                    f"{GAIA_FIELDS}, WebWalkerQA {WEBWALKER_FIELDS} or XBench {XBENCH_FIELDS})") from None
            tasks.append(obj)
    except RecordError as exc:  # not JSON, or a line that is not an object
        raise TaskFileError(f"invalid JSON task file: {exc}") from None
    return tasks
