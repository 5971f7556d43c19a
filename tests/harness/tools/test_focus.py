"""The goal-guided visit's row order (harness/tools/focus.py, docs/tools.md "The goal-guided visit"): unit cases
worked by hand, and properties (hypothesis) that hold for any page and goal."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.tools.focus import focus_links, focus_page, focus_rows, page_score, row_label, row_scores

PERSON = "\n".join([
    "# Breame Bifeagle",
    "Breame Bifeagle",
    "Breame Bifeagle (born 1955 in Theabe [http://world.local/wiki/theabe.html]) is a legal counsel.",
    "| Born | 1955",
    "| Birthplace | Theabe [http://world.local/wiki/theabe.html]",
    "| Employer | Kretrair Partners [http://world.local/wiki/kretrair-partners.html]",
    "| Occupation | legal counsel",
])
CITY = "\n".join([
    "# Patal",
    "Patal",
    "Patal is a city in Kebraizeia, founded in 817, with a population of 248,800.",
    "| Country | Kebraizeia",
    "| Population | 248,800",
    "| Founded | 817",
    "Notable people born here",
    "- Glaivios Breaku [http://world.local/wiki/glaivios-breaku.html] (born 1990)",
])


def first_line(text: str, goal: str) -> str:
    """The line just under the title: where the best-matching row goes."""
    out = focus_rows(text, goal).split("\n")
    assert out[0] == text.split("\n")[0]  # the title stays on top
    return out[1]


def test_the_row_the_goal_asks_for_comes_first() -> None:
    assert first_line(CITY, "country of Patal") == "| Country | Kebraizeia"
    assert first_line(CITY, "population of Patal") == "| Population | 248,800"
    # a shared 4-letter stem: "founding" ~ "Founded"
    assert first_line(CITY, "founding year of Patal") == "| Founded | 817"
    assert first_line(PERSON, "employer of Breame Bifeagle") == "| Employer | Kretrair Partners " \
                                                                 "[http://world.local/wiki/kretrair-partners.html]"
    assert first_line(PERSON, "occupation of Breame Bifeagle") == "| Occupation | legal counsel"


def test_birth_year_and_birthplace_are_told_apart() -> None:
    # "born" is an irregular form of "birth": an exact match (2) beats the shared stem of "Birthplace" (1) ...
    assert row_scores(PERSON, "birth year of Breame Bifeagle")[3:5] == [2, 1]
    assert first_line(PERSON, "birth year of Breame Bifeagle") == "| Born | 1955"
    # ... and the other way round for the birthplace
    assert row_scores(PERSON, "birthplace of Breame Bifeagle")[3:5] == [1, 2]
    assert first_line(PERSON, "birthplace of Breame Bifeagle").startswith("| Birthplace | Theabe")


def test_a_question_works_as_a_goal() -> None:
    # the one-hop questions a planner may delegate in their own words (harness.world.subtasks.LOOKUP_QUESTION):
    # "work for" asks for the employer (IRREGULAR), "city" + "born" for the birthplace, not the birth year (IDIOMS)
    assert first_line(PERSON, "In which year was Breame Bifeagle born?") == "| Born | 1955"
    assert first_line(PERSON, "In which city was Breame Bifeagle born?").startswith("| Birthplace | Theabe")
    assert first_line(PERSON, "Which organisation does Breame Bifeagle work for?").startswith("| Employer | ")
    assert first_line(PERSON, "What is the occupation of Breame Bifeagle?") == "| Occupation | legal counsel"
    assert first_line(CITY, "In which country is Patal?") == "| Country | Kebraizeia"
    assert first_line(CITY, "What is the population of Patal?") == "| Population | 248,800"


def test_every_one_hop_question_finds_its_row_in_a_world() -> None:
    # every relation's question, about every entity that has it, on the entity's page in the world toolbox
    from harness.world.generator import generate_world
    from harness.world.render import wiki_path
    from harness.world.subtasks import LOOKUP_PHRASE, LOOKUP_QUESTION, PHRASES, question_text
    from harness.world.toolbox import WorldToolbox

    world = generate_world(seed=5, size="tiny")
    toolbox = WorldToolbox(world, k=3, snippets=False, focus=True)
    seen = Counter()
    for ent in world.entities.values():
        for rel in LOOKUP_QUESTION:
            if rel not in ent.attrs:
                continue
            question = question_text(rel, ent.name)
            page = toolbox.call("visit", {"url": toolbox.base_url + wiki_path(ent), "goal": question}).split("\n")
            assert page[1].startswith(f"| {PHRASES[LOOKUP_PHRASE[rel]][0]} |"), (question, page[:3])
            seen[rel] += 1
    assert set(seen) == set(LOOKUP_QUESTION), set(LOOKUP_QUESTION) - set(seen)


SITE = "http://world.local/site/steshur-labs"
HOME = "\n".join([
    "# Steshur Labs home",
    "Steshur Labs",
    f"About [{SITE}/about.html] | Team [{SITE}/team.html] | Products [{SITE}/products.html] | News [{SITE}/news.html]",
    "Welcome to the official website of Steshur Labs.",
])
LINKED = {
    f"{SITE}/about.html": "# About Steshur Labs\n| Founded | 1983\n| Chief executive | Driofior Viza [x]",
    f"{SITE}/team.html": "# Team of Steshur Labs\nOur team\n- Driofior Viza [t1]\n- Lashus Kruglo [t2]",
    f"{SITE}/products.html": "# Products of Steshur Labs\nProducts\n- Breagle Lite [p1]\n- Pashas Air [p2]",
    f"{SITE}/news.html": "# News of Steshur Labs\nNews\n- Steshur Labs launches Breagle Lite [n1] (2023)",
}


def menu(text: str) -> list[str]:
    return [item.split(" [")[0] for item in text.split("\n")[2].split(" | ")]


def test_the_menu_link_that_leads_to_the_goal_comes_first() -> None:
    peek = LINKED.get
    # the products page lists the product, and so does a news item ("launches Breagle Lite": the same exact words,
    # its stem "launch" does not count in a look-ahead); ties keep the menu's order, so Products leads
    assert menu(focus_links(HOME, "What is the price of the Breagle Lite in US dollars?", peek)) == \
        ["Products", "News", "About", "Team"]
    # the team lists the person; the about page names them only inside a row
    assert menu(focus_links(HOME, "What is the role of Lashus Kruglo at Steshur Labs?", peek)) == \
        ["Team", "About", "Products", "News"]
    assert menu(focus_links(HOME, "What is the role of Driofior Viza at Steshur Labs?", peek))[0] == "Team"
    # a row of the linked page: the about page has "Founded"
    assert menu(focus_links(HOME, "According to its website, in which year was Steshur Labs founded?", peek))[0] == \
        "About"
    # the link's own text is enough without a look-ahead
    assert menu(focus_links(HOME, "How many visitors did the fair draw, according to its news pages?"))[0] == "News"
    # nothing matches: unchanged, and no goal: unchanged
    assert focus_links(HOME, "What is the colour of the sky?", peek) == HOME
    assert focus_links(HOME, "", peek) == HOME


def test_the_listed_link_the_goal_names_comes_first_in_its_list() -> None:
    page = LINKED[f"{SITE}/products.html"]
    out = focus_links(page, "What kind of product is the Pashas Air of Steshur Labs?")
    assert out.split("\n") == ["# Products of Steshur Labs", "Products", "- Pashas Air [p2]", "- Breagle Lite [p1]"]
    # page_score: exact words of row labels and listed links only
    keys = ["breagle", "lite", "price"]
    assert page_score(LINKED[f"{SITE}/products.html"], keys) == 4
    assert page_score(LINKED[f"{SITE}/news.html"], keys) == 4
    assert page_score("# X\n| Price | 3\nA prose line about Breagle Lite [u].", keys) == 2


def test_links_move_only_where_no_row_matches() -> None:
    peek = LINKED.get
    # a page with the asked-for row: the rows move, the links stay
    about = LINKED[f"{SITE}/about.html"]
    assert focus_page(about, "In which year was Steshur Labs founded?", links=True, peek=peek) == \
        focus_rows(about, "In which year was Steshur Labs founded?")
    assert focus_page(HOME, "What is the price of the Breagle Lite?", links=False, peek=peek) == HOME
    assert menu(focus_page(HOME, "What is the price of the Breagle Lite?", links=True, peek=peek))[0] == "Products"


@given(st.permutations(["- Ann Lee [a]", "- Bo Day [b]", "- Cy Fox [c]", "- Di Ray [d]"]),
       st.sampled_from(["Ann", "Bo Day", "Fox", "nobody", "Ray Cy"]))
@settings(max_examples=60, deadline=None)
def test_link_order_properties(items: list[str], goal: str) -> None:
    page = "\n".join(["# Team of Org", "Our team", *items, "Home [h]"])
    out = focus_links(page, goal)
    assert sorted(out.split("\n")) == sorted(page.split("\n"))  # a permutation of the lines
    assert out.split("\n")[:2] == page.split("\n")[:2] and out.endswith("Home [h]")  # only the list moves
    assert focus_links(out, goal) == out  # idempotent


def test_the_rest_of_the_page_keeps_its_order() -> None:
    out = focus_rows(CITY, "founding year of Patal").split("\n")
    rest = [line for line in CITY.split("\n")[1:] if line != "| Founded | 817"]
    assert out == ["# Patal", "| Founded | 817", *rest]


def test_nothing_moves_when_no_row_matches() -> None:
    assert focus_rows(CITY, "") == CITY
    assert focus_rows(CITY, "   ") == CITY
    # list items and prose never move, even when they share the goal's words ("people born")
    assert focus_rows(CITY, "people born in Patal") == CITY
    assert focus_rows(PERSON, "is Breame Bifeagle industry robotics") == PERSON
    # the page's own title words are the entity, not a relation: a row named like the title does not match
    page = "# Country Club\n| Country | Elbonia\n| Price | 3"
    assert focus_rows(page, "price of Country Club").split("\n")[1] == "| Price | 3"
    assert focus_rows(page, "Country Club") == page


def test_ties_move_together_in_page_order() -> None:
    page = "# X\n| Host city | A\n| Year | 2001\n| City | B"
    assert focus_rows(page, "city of X").split("\n")[:3] == ["# X", "| Host city | A", "| City | B"]
    assert first_line(page, "host city of X") == "| Host city | A"
    # a page without a title line: the rows go to the very top
    assert focus_rows("| Year | 2001\n| Price | 4", "price").split("\n")[0] == "| Price | 4"


def test_row_label() -> None:
    assert row_label("| Host city | Patal [http://x/]") == "Host city"
    assert row_label("Home [http://x/] | Team [http://y/]") is None
    assert row_label("- item") is None


lines = st.lists(st.one_of(
    st.text(alphabet="abc XYZ|-#", max_size=20),
    st.builds(lambda a, b: f"| {a} | {b}", st.sampled_from(["Born", "Year", "Host city", "Price", "Founded", ""]),
              st.text(alphabet="abc 019", max_size=8)),
), max_size=12)
goals = st.one_of(st.text(max_size=30), st.sampled_from(["birth year of X", "host city", "price of a", "founding"]))


@settings(max_examples=300, deadline=None)
@given(lines, goals)
def test_properties(page_lines: list[str], goal: str) -> None:
    text = "\n".join(page_lines)
    out = focus_rows(text, goal)
    # a permutation of the page's lines: nothing lost, nothing added
    assert Counter(out.split("\n")) == Counter(text.split("\n"))
    # only table rows move: the other lines keep their relative order
    others = [line for line in text.split("\n") if row_label(line) is None]
    assert [line for line in out.split("\n") if row_label(line) is None] == others
    # the title line, if any, stays first
    if text.startswith("# "):
        assert out.split("\n")[0] == text.split("\n")[0]
    # deterministic, and focusing twice changes nothing more
    assert focus_rows(text, goal) == out
    assert focus_rows(out, goal) == out
