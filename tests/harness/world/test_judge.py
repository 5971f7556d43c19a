"""Offline expert judge of sub-agent results (docs/paper.md r_expert, docs/world.md; harness.world.judge)."""

from __future__ import annotations

import pytest

from harness.world.judge import expert_judge, match_subtask, normalise


def test_normalise():
    assert normalise("The Kasti Max, 1,234 USD!") == ["the", "kasti", "max", "1234", "usd"]


@pytest.mark.parametrize("gold, result, score", [
    ({"answer": "1983"}, "1983", 1.0),
    ({"answer": "1983"}, "He was born in 1983.", 1.0),
    ({"answer": "1983"}, "1984", 0.0),
    ({"answer": "1983"}, "19834", 0.0),
    ({"answer": "1234500"}, "a population of 1,234,500", 1.0),
    ({"answer": "Orvani Labs"}, "orvani labs", 1.0),
    ({"answer": "Orvani Labs"}, "It is Orvani Labs.", 1.0),
    ({"answer": "Orvani Labs"}, "Orvani", 0.0),
    ({"answer": "Orvani Labs"}, "", 0.0),
    ({"answer": "robotics", "kind": "lookup"}, "robotics company", 1.0),
    ({"answer": "A Pro, B Max", "kind": "lookup", "list": True}, "B Max and A Pro", 1.0),
    ({"answer": "A Pro, B Max", "kind": "lookup", "list": True}, "A Pro", 0.5),
    ({"answer": "Ann Lee (1980); Bo Tan (1991)", "kind": "natives"}, "Ann Lee (1980); Bo Tan (1991)", 1.0),
    ({"answer": "Ann Lee (1980); Bo Tan (1991)", "kind": "natives"}, "Bo Tan", 0.5),
    ({"answer": "Ann Lee", "kind": "filter", "candidates": ["Ann Lee", "Bo Tan"]}, "Ann Lee", 1.0),
    ({"answer": "Ann Lee", "kind": "filter", "candidates": ["Ann Lee", "Bo Tan"]}, "Ann Lee; Bo Tan", 0.5),
    ({"answer": "Ann Lee", "kind": "filter", "candidates": ["Ann Lee", "Bo Tan"]}, "Bo Tan", 0.0),
    ({"answer": "None", "kind": "filter", "candidates": ["Ann Lee", "Bo Tan"]}, "None", 1.0),
    ({"answer": "None", "kind": "filter", "candidates": ["Ann Lee", "Bo Tan"]}, "Bo Tan", 0.0),
])
def test_expert_judge(gold, result, score):
    assert expert_judge(gold, result) == pytest.approx(score)


def test_judge_needs_an_answer_field():
    with pytest.raises(ValueError, match="no 'answer' field"):
        expert_judge({"task": "x"}, "y")


def test_match_subtask():
    subs = [{"task": "Find the maker of Kasti Max."}, {"task": "Find the chief executive of {r0}."}]
    assert match_subtask(subs, "Find the maker of Kasti Max.") == 0
    assert match_subtask(subs, "Find the chief executive of Orvani Labs.") == 1
    assert match_subtask(subs, "zzz") is None
