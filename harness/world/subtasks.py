"""The subtask language of the offline world (docs/world.md): what a planner delegates.

Task generation (:mod:`harness.world.tasks`) writes each task's gold decomposition as
subtasks in these phrasings; the scripted sub-agent (:mod:`harness.world.expert`) reads the
*text* of a delegated subtask with :func:`parse_subtask` -- it never sees the gold -- and the
page rows it must read are named by :data:`PHRASES`. Four kinds:

* ``lookup``  -- ``Find the <phrase> of <name>.`` (encyclopedia page of <name>)
* ``walk``    -- ``On the website <root>, find the <phrase> of <name>.`` (organisation site)
* ``natives`` -- ``List the people born in <city>, with their birth years.``
* ``filter``  -- ``Which of these people works for a <industry> company: A; B?`` or
  ``Which of these people is a <role>: A; B?``

Results are plain strings: a value (numbers as digits, no separators), a name, a
comma-separated list (``products``), ``Name (1983); Name (1990)`` (natives) or ``A; B`` /
``None`` (filter).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# phrase -> (row label / heading on the page, value type: int | text | list | count)
PHRASES: dict[str, tuple[str, str]] = {
    "birth year": ("Born", "int"),
    "birthplace": ("Birthplace", "text"),
    "employer": ("Employer", "text"),
    "occupation": ("Occupation", "text"),
    "industry": ("Industry", "text"),
    "founding year": ("Founded", "int"),
    "headquarters city": ("Headquarters", "text"),
    "chief executive": ("Chief executive", "text"),
    "number of employees": ("Employees", "int"),
    "products": ("Products", "list"),
    "country": ("Country", "text"),
    "population": ("Population", "int"),
    "maker": ("Maker", "text"),
    "category": ("Category", "text"),
    "launch year": ("Launched", "int"),
    "host city": ("Host city", "text"),
    "year": ("Year", "int"),
    "organiser": ("Organiser", "text"),
    # organisation sites only
    "joining year": ("Joined", "int"),
    "role": ("Role", "text"),
    "price": ("Price", "int"),
    "warranty": ("Warranty", "int"),
    "attendance": ("drew", "int"),  # prose: "It drew 12,340 visitors."
    "number of team members": ("Our team", "count"),  # list items on the team page
    "number of products": ("Products", "count"),  # list items on the products page
}

# relation (generator.RELATIONS) -> phrase, for encyclopedia lookups and site walks
LOOKUP_PHRASE: dict[str, str] = {
    "birth_year": "birth year", "birth_city": "birthplace", "employer": "employer", "role": "occupation",
    "industry": "industry", "founded_year": "founding year", "city_founded": "founding year",
    "headquarters": "headquarters city", "ceo": "chief executive", "employees": "number of employees",
    "products": "products", "country": "country", "population": "population", "maker": "maker",
    "category": "category", "launch_year": "launch year", "host_city": "host city", "year": "year",
    "organiser": "organiser",
}
WALK_PHRASE: dict[str, str] = {
    "joined_year": "joining year", "role": "role", "price": "price", "warranty": "warranty",
    "launch_year": "launch year", "category": "category", "founded_year": "founding year",
    "headquarters": "headquarters city", "industry": "industry", "ceo": "chief executive",
    "employees": "number of employees", "attendance": "attendance",
    # derived counts (not graph relations): list lengths on an organisation's listing pages
    "team_size": "number of team members", "product_count": "number of products",
}

_LOOKUP = re.compile(r"^Find the (?P<rest>.+)\.$")
_WALK = re.compile(r"^On the website (?P<root>\S+), find the (?P<rest>.+)\.$")
_BY_LENGTH = sorted(PHRASES, key=len, reverse=True)


def _split_phrase(rest: str) -> tuple[str, str] | None:
    for phrase in _BY_LENGTH:  # longest first: "number of employees" contains " of "
        if rest.startswith(phrase + " of ") and len(rest) > len(phrase) + 4:
            return phrase, rest[len(phrase) + 4:]
    return None
_NATIVES = re.compile(r"^List the people born in (?P<name>.+?), with their birth years\.$")
_FILTER_IND = re.compile(r"^Which of these people works for an? (?P<value>.+?) company: (?P<names>.*)\?$")
_FILTER_ROLE = re.compile(r"^Which of these people is an? (?P<value>.+?): (?P<names>.*)\?$")


def article(word: str) -> str:
    """The indefinite article before ``word`` (``an`` before a vowel letter, else ``a``).

    The one rule for the world's English: subtask texts, task questions (:mod:`harness.world.tasks`)
    and page text (:mod:`harness.world.render`) use it, and the sub-agent parses ``an?`` back.
    """
    return "an" if word[:1].lower() in "aeiou" else "a"


def lookup_text(relation: str, name: str) -> str:
    return f"Find the {LOOKUP_PHRASE[relation]} of {name}."


def walk_text(relation: str, name: str, root_url: str) -> str:
    return f"On the website {root_url}, find the {WALK_PHRASE[relation]} of {name}."


def natives_text(city: str) -> str:
    return f"List the people born in {city}, with their birth years."


def filter_text(what: str, value: str, names: str) -> str:
    """``what`` is ``industry`` or ``role``; ``names`` a ``; ``-joined list (or a placeholder)."""
    if what == "industry":
        return f"Which of these people works for {article(value)} {value} company: {names}?"
    return f"Which of these people is {article(value)} {value}: {names}?"


@dataclass(frozen=True)
class ParsedSubtask:
    """A delegated subtask as the sub-agent understands it."""

    kind: str  # lookup | walk | natives | filter
    phrase: str = ""  # lookup/walk phrase, or "industry"/"role" for filters
    name: str = ""  # entity name (lookup, walk, natives)
    root: str = ""  # walk: the site's home URL
    value: str = ""  # filter: the industry or role
    names: tuple[str, ...] = ()  # filter: candidates


def parse_subtask(text: str) -> ParsedSubtask | None:
    """Parse a subtask's text (first line); None if it is in none of the four phrasings."""
    line = text.strip().split("\n", 1)[0].strip()
    m = _WALK.match(line)
    if m and (pn := _split_phrase(m["rest"])):
        return ParsedSubtask("walk", pn[0], pn[1], root=m["root"])
    m = _NATIVES.match(line)
    if m:
        return ParsedSubtask("natives", name=m["name"])
    for what, rx in (("industry", _FILTER_IND), ("role", _FILTER_ROLE)):
        m = rx.match(line)
        if m:
            names = tuple(n.strip() for n in m["names"].split(";") if n.strip() and n.strip() != "None")
            return ParsedSubtask("filter", what, value=m["value"], names=names)
    m = _LOOKUP.match(line)
    if m and (pn := _split_phrase(m["rest"])):
        return ParsedSubtask("lookup", pn[0], pn[1])
    return None
