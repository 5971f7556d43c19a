"""Normalisation, accuracy ± standard error and the WebWalkerQA cell breakdown, on hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from benchmarks.base import Task, Verdict
from benchmarks.scoring import (WEBWALKERQA_CELLS, Accuracy, accuracy, answers_match, breakdown,
                                normalize_answer, parse_number, webwalkerqa_breakdown)


@pytest.mark.parametrize("text,expected", [
    ("The Eiffel Tower!", "eiffeltower"),
    ("  a  Sea   Gull ", "seagull"),
    ("Anne's cat", "annescat"),       # "an" inside a word is not an article
    ("北京。", "北京"),                  # Chinese full stop is punctuation
    ("ＡＢＣ，１２", "abc12"),            # full-width forms fold (NFKC)
    ("", ""),
])
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


@pytest.mark.parametrize("text,value", [("17", 17.0), ("$1,000", 1000.0), ("50%", 50.0), ("1e3", 1000.0),
                                        ("17.", 17.0), (".5", 0.5), ("-3", -3.0), ("seventeen", None),
                                        ("17 km", None), ("", None), ("nan", None), ("inf", None)])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("prediction,gold,expected", [
    ("17.0", "17", True), ("1,000", "1000", True), ("$3.50", "3.5", True), ("17", "18", False),
    ("the Paris", "paris", True), ("Paris, France", "Paris", False), ("北京", "北京。", True),
    ("", "", False), ("!!!", "?", False), ("0.1", "0.1000001", False), ("0.30000000000000004", "0.3", True),
])
def test_answers_match(prediction, gold, expected):
    assert answers_match(prediction, gold) is expected


def test_accuracy_hand_numbers():
    acc = accuracy([True, True, True, False])  # p = 0.75, se = sqrt(.75 * .25 / 4)
    assert (acc.n, acc.n_correct, acc.mean) == (4, 3, 0.75)
    assert acc.stderr == pytest.approx(math.sqrt(0.1875 / 4))
    assert acc.stderr == pytest.approx(0.21650635)
    assert str(acc) == "75.0% ± 21.7 (n=4)"
    assert accuracy([True] * 5) == Accuracy(5, 5, 1.0, 0.0)


def test_accuracy_empty_is_nan_not_error():
    acc = accuracy([])
    assert acc.n == 0 and math.isnan(acc.mean) and math.isnan(acc.stderr)
    assert str(acc) == "n/a (n=0)"


def test_accuracy_counts_unscored_as_incorrect():
    items = [{"correct": True}, {"correct": None}, {}, Verdict(True, "exact", "match"),
             Verdict(False, "llm", "garbage", "bad"), (Task("t", "q", "g"), Verdict(True, "exact", "match")), "yes"]
    acc = accuracy(items)
    assert (acc.n, acc.n_correct) == (7, 3)


def _rec(t, d, correct):
    return {"correct": correct, "metadata": {"type": t, "difficulty_level": d}}


def test_webwalkerqa_breakdown_hand_numbers():
    records = (
        [_rec("single_source", "easy", c) for c in (True, True, False, False)]          # 2/4
        + [_rec("single_source", "hard", c) for c in (True, False, False)]              # 1/3
        + [_rec("multi_source", "medium", c) for c in (True, True, True, True, False)]  # 4/5
        + [{"correct": False, "info": {"type": "multi_source", "difficulty_level": "hard"}}]  # 0/1, Hub-style
    )
    table = webwalkerqa_breakdown(records)
    assert set(table) == {"overall", *WEBWALKERQA_CELLS}
    assert (table["overall"].n, table["overall"].n_correct) == (13, 7)
    assert table["overall"].mean == pytest.approx(7 / 13)
    assert table["overall"].stderr == pytest.approx(math.sqrt((7 / 13) * (6 / 13) / 13))
    assert table[("single_source", "easy")] == Accuracy(4, 2, 0.5, 0.25)
    assert table[("single_source", "hard")].mean == pytest.approx(1 / 3)
    assert table[("multi_source", "medium")].stderr == pytest.approx(math.sqrt(0.8 * 0.2 / 5))
    assert table[("multi_source", "hard")] == Accuracy(1, 0, 0.0, 0.0)
    assert table[("single_source", "medium")].n == 0 and table[("multi_source", "easy")].n == 0


def test_webwalkerqa_breakdown_from_task_verdict_pairs():
    pairs = [(Task("1", "q", "g", {"type": "single_source", "difficulty_level": "easy"}), Verdict(True, "exact", "match")),
             (Task("2", "q", "g", {"type": "single_source", "difficulty_level": "easy"}), Verdict(False, "exact", "no_match"))]
    table = webwalkerqa_breakdown(pairs)
    assert table[("single_source", "easy")].mean == 0.5 and table["overall"].n == 2


def test_webwalkerqa_breakdown_rejects_unknown_cells():
    with pytest.raises(ValueError, match="not a WebWalkerQA cell"):
        webwalkerqa_breakdown([_rec("single_source", "extreme", True)])
    with pytest.raises(KeyError, match="difficulty_level"):
        webwalkerqa_breakdown([{"correct": True, "type": "single_source"}])


def test_generic_breakdown():
    table = breakdown([{"correct": True, "level": 1}, {"correct": False, "level": 2}], lambda r: r["level"], cells=[1, 2, 3])
    assert table[1].mean == 1.0 and table[2].mean == 0.0 and table[3].n == 0 and table["overall"].n == 2
