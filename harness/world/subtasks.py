"""The subtask language of the offline world (docs/world.md): what a planner delegates.

Task generation (:mod:`harness.world.tasks`) writes each task's gold decomposition as
subtasks in these phrasings; the scripted sub-agent (:mod:`harness.world.expert`) reads the
*text* of a delegated subtask with :func:`parse_subtask` -- it never sees the gold -- and the
page rows it must read are named by :data:`PHRASES`. Four kinds:

* ``lookup``  -- ``Find the <phrase> of <name>.`` (encyclopedia page of <name>), or the one-hop question itself
  (:data:`LOOKUP_QUESTION`, e.g. ``In which year was <name> born?``): a planner may delegate a question that one
  page answers in the question's own words (docs/world.md, "The subtask language"); or ``Find <noun phrase>.``
  with a chain question's noun phrase (:data:`LOOKUP_NP`, e.g. ``Find the city where <name> was born.``)
* ``walk``    -- ``On the website <root>, find the <phrase> of <name>.`` (organisation site), or the site's one-hop
  question with its start line (:data:`WALK_QUESTION`, then ``Start from this website: <root>``)
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

from harness.world.schemas import START_MARKER

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

# relation -> the one-hop question the GAIA-style tasks ask about it ({x}: the entity or a noun phrase)
LOOKUP_QUESTION: dict[str, str] = {
    "birth_year": "In which year was {x} born?", "birth_city": "In which city was {x} born?",
    "employer": "Which organisation does {x} work for?", "role": "What is the occupation of {x}?",
    "founded_year": "In which year was {x} founded?", "headquarters": "In which city does {x} have its headquarters?",
    "ceo": "Who is the chief executive of {x}?", "employees": "How many employees does {x} have?",
    "industry": "In which industry does {x} work?", "population": "What is the population of {x}?",
    "country": "In which country is {x}?", "maker": "Which company makes {x}?",
    "launch_year": "In which year was {x} launched?", "host_city": "In which city was {x} held?",
    "year": "In which year was {x} held?", "organiser": "Which organisation organised {x}?",
}
# relation -> the one-hop question the WebWalkerQA-style tasks ask about it ({org}: the site's organisation; {x}: the
# entity, when it is not the organisation)
WALK_QUESTION: dict[str, str] = {
    "founded_year": "According to its website, in which year was {org} founded?",
    "headquarters": "According to its website, in which city does {org} have its headquarters?",
    "industry": "According to its website, in which industry does {org} work?",
    "ceo": "According to its website, who is the chief executive of {org}?",
    "employees": "According to its website, how many employees does {org} have?",
    "joined_year": "In which year did {x} join {org}, according to the company's website?",
    "role": "What is the role of {x} at {org}, according to the company's website?",
    "launch_year": "In which year did {org} launch the {x}, according to its website?",
    "category": "What kind of product is the {x} of {org}, according to its website?",
    "price": "What is the price of the {x} in US dollars, according to {org}'s website?",
    "warranty": "How many years of warranty does {org} give on the {x}, according to its website?",
    "attendance": "How many visitors did the {x} draw, according to {org}'s news pages?",
}
# relation -> the noun phrase a multi-hop GAIA-style question nests it as ({x}: the entity or an inner noun phrase):
# "In which country is the city where X was born?" asks for the country of the city where X was born
LOOKUP_NP: dict[str, str] = {
    "employer": "the organisation that employs {x}", "birth_city": "the city where {x} was born",
    "headquarters": "the city where {x} has its headquarters", "ceo": "the chief executive of {x}",
    "maker": "the company that makes {x}", "organiser": "the organisation that organised {x}",
    "host_city": "the city that hosted {x}",
}


def _pattern(question: str) -> re.Pattern[str]:
    rx = re.escape(question)
    for field in ("x", "org"):
        rx = rx.replace(re.escape("{" + field + "}"), f"(?P<{field}>.+)")
    return re.compile("^" + rx + "$")


_QUESTION = [(_pattern(q), LOOKUP_PHRASE[rel]) for rel, q in LOOKUP_QUESTION.items()]
_NOUN_PHRASE = [(_pattern(f"Find {np}."), LOOKUP_PHRASE[rel]) for rel, np in LOOKUP_NP.items()]
_SITE_QUESTION = [(_pattern(q), WALK_PHRASE[rel]) for rel, q in WALK_QUESTION.items()]
_START = re.compile("^" + re.escape(START_MARKER.strip()) + r" (?P<root>\S+)$", re.M)
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


def cap_first(text: str) -> str:
    """``text`` with its first letter upper-cased (a task question or subtask built from a lower-case phrase)."""
    return text[:1].upper() + text[1:]


def lookup_text(relation: str, name: str) -> str:
    return f"Find the {LOOKUP_PHRASE[relation]} of {name}."


def walk_text(relation: str, name: str, root_url: str) -> str:
    return f"On the website {root_url}, find the {WALK_PHRASE[relation]} of {name}."


def np_text(relation: str, name: str) -> str:
    """``Find <the noun phrase of relation about name>.`` (a lookup the sub-agent parses like ``Find the ...``)."""
    return f"Find {LOOKUP_NP[relation].format(x=name)}."


def question_text(relation: str, name: str) -> str:
    """The one-hop question about ``relation`` of ``name`` (a lookup the sub-agent parses like ``Find the ...``)."""
    return LOOKUP_QUESTION[relation].format(x=name)


def site_question_text(relation: str, org: str, name: str, root_url: str) -> str:
    """The one-hop site question about ``relation`` of ``name`` on ``org``'s site, with its start line (a walk the
    sub-agent parses like ``On the website ...``)."""
    return WALK_QUESTION[relation].format(org=org, x=name) + START_MARKER + root_url


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
    """Parse a subtask's text (first line); None if it is in none of the four phrasings (or a one-hop question)."""
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
    for rx, phrase in _QUESTION + _NOUN_PHRASE:
        m = rx.match(line)
        if m:
            return ParsedSubtask("lookup", phrase, m["x"])
    start = _START.search(text)
    for rx, phrase in _SITE_QUESTION if start else ():
        m = rx.match(line)
        if m:
            fields = m.groupdict()
            return ParsedSubtask("walk", phrase, fields.get("x") or fields["org"], root=start["root"])
    return None
