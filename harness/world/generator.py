"""Seeded generator of the offline web world's entity graph (docs/world.md).

A world is a graph of invented entities -- cities, organisations, people, products and
events -- with attributes and relations, all drawn from one ``random.Random`` seeded by
:class:`WorldConfig`. :func:`generate_world` turns the graph into HTML pages
(:mod:`harness.world.render`) and returns a :class:`World`: pages by path plus every fact
and the pages that state it. Same config -> byte-identical pages.

Names are built from pronounceable syllables; every *word* of every name is used by one
entity only, so no two entities share a title and an exact title query finds its page
first (docs/architecture.md §Making the tiny default learn).

Deliberate deviations / decisions where the design is silent:
* Countries, industries, roles and product categories are attribute values, not entities
  (no page of their own): the issue lists five entity types.
* Every name word is unique across the world (stronger than "distinct titles"), so search
  never has to disambiguate look-alike names.
* Numbers are stored canonically (digits only) in :class:`Fact.value`; pages may show them
  with thousands separators (``Fact.shown``).

:class:`Entity`, :class:`Fact` and :class:`Page` are defined in :mod:`harness.world.entities`
(the renderer needs them too) and re-exported here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from harness.config import help_field
from harness.world.entities import Entity, Fact, Page
from harness.world.render import render_pages

SIZES: dict[str, dict[str, int]] = {
    # cities, orgs, people, products, events, countries
    "tiny": dict(n_cities=6, n_orgs=6, n_people=30, n_products=12, n_events=8, n_countries=3),
    "small": dict(n_cities=10, n_orgs=12, n_people=60, n_products=24, n_events=16, n_countries=4),
    "default": dict(n_cities=16, n_orgs=24, n_people=120, n_products=48, n_events=32, n_countries=5),
}

INDUSTRIES = (
    "robotics", "agriculture", "shipping", "publishing", "biotechnology", "aerospace",
    "textiles", "software", "energy", "ceramics", "optics", "brewing",
)
ROLES = (
    "chief engineer", "research lead", "product designer", "sales director",
    "data analyst", "operations manager", "field technician", "legal counsel",
)
CEO_ROLE = "chief executive"
ORG_SUFFIXES = ("Labs", "Systems", "Group", "Works", "Industries", "Collective", "Dynamics", "Partners")
PRODUCT_SUFFIXES = ("Pro", "One", "Max", "Mini", "Air", "Prime", "Lite", "Duo")
PRODUCT_CATEGORIES = ("sensor", "tractor", "drone", "reader", "lamp", "pump", "scanner", "kettle", "loom", "router")
EVENT_KINDS = ("Summit", "Expo", "Festival", "Forum", "Fair", "Congress")

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "sh", "th", "gl", "pl")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th")


@dataclass(frozen=True)
class WorldConfig:
    """What world to generate. ``size`` picks a preset; explicit counts override it."""

    seed: int = help_field(0, "Random seed (an int >= 0). Same seed and size -> byte-identical pages.")
    size: str = help_field("default", "Preset: ``tiny`` (~200 pages), ``small`` (~400) or ``default`` (~800).")
    n_people: int | None = help_field(None, "Number of people (None: from the preset). At least 3 per organisation.")
    n_orgs: int | None = help_field(None, "Number of organisations, each with its own site (None: from the preset).")
    n_cities: int | None = help_field(None, "Number of cities (None: from the preset).")
    n_products: int | None = help_field(
        None, "Number of products, at least one per organisation (None: from the preset).")
    n_events: int | None = help_field(
        None, "Number of events, each organised by an organisation (None: from the preset).")
    n_countries: int | None = help_field(
        None, "Number of invented countries the cities belong to (None: from the preset).")

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"WorldConfig.seed: expected an int >= 0, got {self.seed!r}")
        if self.size not in SIZES:
            raise ValueError(f"WorldConfig.size: expected one of {'|'.join(SIZES)}, got {self.size!r}")
        for name in SIZES["tiny"]:
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"WorldConfig.{name}: expected an int >= 1 or None, got {value!r}")
        counts = self.counts()
        if counts["n_people"] < 3 * counts["n_orgs"]:
            raise ValueError(
                f"WorldConfig.n_people: need at least 3 per organisation ({3 * counts['n_orgs']}), "
                f"got {counts['n_people']}"
            )
        if counts["n_products"] < counts["n_orgs"]:
            raise ValueError(
                f"WorldConfig.n_products: need at least one per organisation ({counts['n_orgs']}), "
                f"got {counts['n_products']}"
            )

    def counts(self) -> dict[str, int]:
        """Resolved entity counts (preset, overridden by explicit fields)."""
        out = dict(SIZES[self.size])
        for name in out:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


# relation -> (subject kind, value kind: entity kind | "int" | "text" | "list")
RELATIONS: dict[str, tuple[str, str]] = {
    "birth_year": ("person", "int"),
    "birth_city": ("person", "city"),
    "employer": ("person", "org"),
    "role": ("person", "text"),
    "joined_year": ("person", "int"),
    "industry": ("org", "text"),
    "founded_year": ("org", "int"),
    "headquarters": ("org", "city"),
    "ceo": ("org", "person"),
    "employees": ("org", "int"),
    "products": ("org", "list"),
    "country": ("city", "text"),
    "population": ("city", "int"),
    "city_founded": ("city", "int"),
    "maker": ("product", "org"),
    "category": ("product", "text"),
    "launch_year": ("product", "int"),
    "price": ("product", "int"),
    "warranty": ("product", "int"),
    "host_city": ("event", "city"),
    "year": ("event", "int"),
    "organiser": ("event", "org"),
    "attendance": ("event", "int"),
}


class _Names:
    """Pronounceable invented words, never the same word twice in one world."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        for _ in range(10_000):
            n = self.rng.randint(*syllables)
            parts = []
            for i in range(n):
                parts.append(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS))
                if i == n - 1:
                    parts.append(self.rng.choice(_CODAS))
            w = "".join(parts)
            if 4 <= len(w) <= 10 and w not in self.used:
                self.used.add(w)
                return w.capitalize()
        raise RuntimeError("name space exhausted; use a smaller world")


def _slug(name: str) -> str:
    return "-".join(name.lower().split())


def generate_graph(config: WorldConfig) -> tuple[dict[str, Entity], list[str]]:
    """The entity graph: entities by id and the country names. Deterministic in ``config``."""
    c = config.counts()
    rng = random.Random(f"mgrpo-world:{config.seed}")
    names = _Names(rng)
    ents: dict[str, Entity] = {}

    def add(kind: str, i: int, name: str, **attrs: Any) -> Entity:
        e = Entity(id=f"{kind}:{i}", kind=kind, name=name, slug=_slug(name), attrs=attrs)
        ents[e.id] = e
        return e

    countries = [names.word((2, 3)) + "ia" for _ in range(c["n_countries"])]
    cities = [
        add("city", i, names.word(), country=countries[i % len(countries)],
            population=rng.randint(200, 25_000) * 100, city_founded=rng.randint(800, 1900))
        for i in range(c["n_cities"])
    ]
    orgs = [
        add("org", i, f"{names.word()} {rng.choice(ORG_SUFFIXES)}", industry=INDUSTRIES[i % len(INDUSTRIES)],
            founded_year=rng.randint(1900, 2012), headquarters=rng.choice(cities).id,
            employees=rng.randint(12, 9000), products=[])
        for i in range(c["n_orgs"])
    ]
    people = []
    for i in range(c["n_people"]):
        org = orgs[i % len(orgs)] if i < 3 * len(orgs) else rng.choice(orgs)
        birth = rng.randint(1950, 1999)
        role = CEO_ROLE if i < len(orgs) else rng.choice(ROLES)
        lo = max(org.attrs["founded_year"], birth + 22)
        p = add("person", i, f"{names.word((2, 2))} {names.word()}", birth_year=birth,
                birth_city=rng.choice(cities).id, employer=org.id, role=role,
                joined_year=rng.randint(lo, max(lo, 2024)))
        if role == CEO_ROLE:
            org.attrs["ceo"] = p.id
        people.append(p)
    for i in range(c["n_products"]):
        org = orgs[i] if i < len(orgs) else rng.choice(orgs)
        p = add("product", i, f"{names.word()} {rng.choice(PRODUCT_SUFFIXES)}", maker=org.id,
                category=rng.choice(PRODUCT_CATEGORIES),
                launch_year=rng.randint(max(org.attrs["founded_year"], 1990), 2024),
                price=rng.randint(20, 4000), warranty=rng.randint(1, 6))
        org.attrs["products"].append(p.id)
    for i in range(c["n_events"]):
        org = orgs[i % len(orgs)] if i < len(orgs) else rng.choice(orgs)
        add("event", i, f"{names.word()} {rng.choice(EVENT_KINDS)}", host_city=rng.choice(cities).id,
            year=rng.randint(1995, 2024), organiser=org.id, attendance=rng.randint(30, 6000) * 10)
    for org in orgs:
        org.attrs["products"].sort(key=lambda pid: ents[pid].name)
    return ents, countries


def entity_facts(ents: dict[str, Entity]) -> list[Fact]:
    """Every fact of the graph, one per (entity, relation), in a stable order."""
    facts = []
    for e in ents.values():
        for rel, val in e.attrs.items():
            kind = RELATIONS[rel][1]
            if kind == "list":
                facts.append(Fact(e.id, rel, ", ".join(ents[v].name for v in val)))
            elif kind in ("city", "org", "person"):
                facts.append(Fact(e.id, rel, ents[val].name, value_id=val))
            elif kind == "int":
                shown = f"{val:,}" if rel in ("population", "attendance", "employees") else str(val)
                facts.append(Fact(e.id, rel, str(val), shown=shown))
            else:
                facts.append(Fact(e.id, rel, str(val)))
    return facts


@dataclass
class World:
    """A generated world: the graph, its pages and where each fact is stated."""

    config: WorldConfig
    entities: dict[str, Entity]
    countries: list[str]
    facts: list[Fact]
    pages: dict[str, Page]
    fact_pages: dict[tuple[str, str], list[str]]
    """(subject id, relation) -> paths of the pages stating it."""

    def by_name(self, name: str) -> Entity:
        """The entity with this exact name (KeyError if none)."""
        if not hasattr(self, "_by_name"):
            self._by_name = {e.name: e for e in self.entities.values()}
        return self._by_name[name]

    def fact(self, subject: str, relation: str) -> Fact:
        """The fact (subject, relation); KeyError if the graph has none."""
        if not hasattr(self, "_facts"):
            self._facts = {(f.subject, f.relation): f for f in self.facts}
        return self._facts[(subject, relation)]

    def of_kind(self, kind: str) -> list[Entity]:
        """Entities of one kind, in generation order."""
        return [e for e in self.entities.values() if e.kind == kind]

    def resolve(self, path: str) -> Page | None:
        """The page served at ``path`` (query and fragment ignored; ``dir/`` -> ``dir/index.html``)."""
        path = path.split("#", 1)[0].split("?", 1)[0] or "/"
        if path.endswith("/"):
            path += "index.html"
        return self.pages.get(path)

    def site_root(self, org: Entity) -> str:
        """Path of an organisation's home page."""
        return f"/site/{org.slug}/index.html"


def generate_world(config: WorldConfig | None = None, *, seed: int | None = None, size: str | None = None) -> World:
    """Generate the world for ``config`` (or for ``seed``/``size`` with the other fields default)."""
    if config is None:
        config = WorldConfig(seed=0 if seed is None else seed, size="default" if size is None else size)
    ents, countries = generate_graph(config)
    facts = entity_facts(ents)
    pages = render_pages(ents, countries, {(f.subject, f.relation): f for f in facts})
    fact_pages: dict[tuple[str, str], list[str]] = {}
    for page in pages.values():
        for key in page.facts:
            fact_pages.setdefault(key, []).append(page.path)
    return World(config, ents, countries, facts, pages, fact_pages)
