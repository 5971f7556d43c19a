"""The subtask language (docs/world.md, "The subtask language"): every phrasing a planner may delegate parses back
to the subtask it names, the one-hop questions included."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.world.subtasks import (
    LOOKUP_NP, LOOKUP_PHRASE, LOOKUP_QUESTION, WALK_PHRASE, WALK_QUESTION, ParsedSubtask, lookup_text, np_text,
    parse_subtask, question_text, site_question_text, walk_text,
)

ROOT = "http://world.local/site/steshur-labs/index.html"
NAME = st.from_regex(r"[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}", fullmatch=True)


@pytest.mark.parametrize("rel", sorted(LOOKUP_QUESTION))
def test_a_one_hop_question_is_the_lookup_it_asks_for(rel):
    want = ParsedSubtask("lookup", LOOKUP_PHRASE[rel], "Zafu Ratonaith")
    assert parse_subtask(question_text(rel, "Zafu Ratonaith")) == want
    assert parse_subtask(lookup_text(rel, "Zafu Ratonaith")) == want


@pytest.mark.parametrize("rel", sorted(WALK_QUESTION))
def test_a_site_question_with_its_start_line_is_the_walk_it_asks_for(rel):
    name = "Breagle Lite" if "{x}" in WALK_QUESTION[rel] else "Steshur Labs"
    want = ParsedSubtask("walk", WALK_PHRASE[rel], name, root=ROOT)
    text = site_question_text(rel, "Steshur Labs", "Breagle Lite", ROOT)
    assert text.split("\n")[0].endswith("?") and text.endswith(ROOT)
    assert parse_subtask(text) == want
    assert parse_subtask(walk_text(rel, name, ROOT)) == want
    # without its start line a site question names no site: not a subtask
    assert parse_subtask(text.split("\n")[0]) is None


@given(name=NAME, rel=st.sampled_from(sorted(LOOKUP_QUESTION)))
def test_question_round_trip(name, rel):
    assert parse_subtask(question_text(rel, name)) == ParsedSubtask("lookup", LOOKUP_PHRASE[rel], name)


@given(org=NAME, name=NAME, rel=st.sampled_from(sorted(WALK_QUESTION)))
def test_site_question_round_trip(org, name, rel):
    parsed = parse_subtask(site_question_text(rel, org, name, ROOT))
    assert parsed == ParsedSubtask("walk", WALK_PHRASE[rel], name if "{x}" in WALK_QUESTION[rel] else org, root=ROOT)


@given(name=NAME, rel=st.sampled_from(sorted(LOOKUP_NP)))
def test_a_chain_noun_phrase_is_the_lookup_it_names(name, rel):
    # "Find the city where X was born." is the birthplace of X, as "Find the birthplace of X." is
    want = ParsedSubtask("lookup", LOOKUP_PHRASE[rel], name)
    assert parse_subtask(np_text(rel, name)) == want == parse_subtask(lookup_text(rel, name))


def test_a_nested_noun_phrase_parses_to_its_outer_relation():
    # the inner phrase stays the name: the planner must resolve it first (the sub-agent finds no such page)
    inner = LOOKUP_NP["maker"].format(x="Breagle Lite")
    assert parse_subtask(np_text("ceo", inner)) == ParsedSubtask("lookup", "chief executive", inner)
    assert parse_subtask(np_text("birth_city", "Zafu Ratonaith").removesuffix(".")) is None


def test_other_text_is_no_subtask():
    for text in ("", "What is the meaning of life?", "In which year was born?", "Find the colour of Patal."):
        assert parse_subtask(text) is None, text
