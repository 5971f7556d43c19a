"""WebWalkerQA: Hub-schema loader on the full 680-row main split and the 24-row sample (docs/benchmarks.md)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from benchmarks.base import BenchmarkDataError, default_data_dir
from benchmarks.registry import get_benchmark
from benchmarks.scoring import WEBWALKERQA_CELLS, webwalkerqa_breakdown

WDIR = default_data_dir() / "webwalkerqa"


def test_main_split_counts_match_the_data_readme():
    tasks = get_benchmark("webwalkerqa").load()
    assert len(tasks) == 680
    assert [t.task_id for t in tasks[:3]] == ["0", "1", "2"]
    assert Counter(t.metadata["type"] for t in tasks) == {"single_source": 340, "multi_source": 340}
    assert Counter(t.metadata["difficulty_level"] for t in tasks) == {"easy": 160, "medium": 280, "hard": 240}
    assert Counter(t.metadata["domain"] for t in tasks) == {"education": 322, "conference": 156, "game": 136,
                                                             "organization": 66}
    assert len({t.metadata["root_url"] for t in tasks}) == 138
    assert all(t.metadata["root_url"].startswith("http") for t in tasks)


def test_sample24_has_four_per_cell_and_main_ids():
    bench = get_benchmark("webwalkerqa")
    sample = bench.load(split="sample24")
    main = {t.task_id: t for t in bench.load()}
    assert len(sample) == 24
    assert Counter((t.metadata["type"], t.metadata["difficulty_level"]) for t in sample) == {c: 4 for c in WEBWALKERQA_CELLS}
    for task in sample:  # same id, same question and answer as in main
        assert (main[task.task_id].question, main[task.task_id].gold) == (task.question, task.gold)


def test_gold_answers_score_and_breakdown_is_full():
    bench = get_benchmark("webwalkerqa")
    sample = bench.load(split="sample24")
    pairs = [(t, bench.score(t, t.gold if i % 2 == 0 else "I could not find it.")) for i, t in enumerate(sample)]
    table = webwalkerqa_breakdown(pairs)
    assert table["overall"].n == 24 and table["overall"].n_correct == 12
    assert all(table[c].n == 4 for c in WEBWALKERQA_CELLS)


def test_exact_match_tolerates_case_and_punctuation_only():
    bench = get_benchmark("webwalkerqa")
    task = bench.load(limit=1)[0]
    assert bench.score(task, task.gold.upper() + "!!").correct
    assert not bench.score(task, task.gold + " and something else").correct


def test_unknown_split():
    with pytest.raises(ValueError, match="sample24"):
        get_benchmark("webwalkerqa").load(split="silver")


@pytest.mark.parametrize("bad_line,problem", [
    ('{"question": "q", "answer": "a"', "not valid JSON"),
    ('{"question": "q", "answer": "a", "root_url": "http://x"}', "info"),
    ('{"question": "q", "answer": "a", "root_url": "http://x", "info": {"type": "single_source", "difficulty_level": "extreme"}}',
     "difficulty_level"),
    ('{"question": "q", "answer": 3, "root_url": "http://x", "info": {"type": "single_source", "difficulty_level": "easy"}}',
     "answer"),
    ('["not", "an", "object"]', "JSON object"),
])
def test_garbled_file_names_file_and_line(tmp_path, bad_line, problem):
    lines = (WDIR / "webwalkerqa_sample24.jsonl").read_text(encoding="utf-8").splitlines()[:3]
    path = tmp_path / "ww.jsonl"
    path.write_text("\n".join(lines[:2] + [bad_line] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkDataError) as info:
        get_benchmark("webwalkerqa", path=path).load()
    assert info.value.line == 3 and str(path) in str(info.value) and problem in str(info.value)


def test_duplicate_index_rejected(tmp_path):
    line = (WDIR / "webwalkerqa_sample24.jsonl").read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "ww.jsonl"
    path.write_text(line + "\n" + line + "\n", encoding="utf-8")
    with pytest.raises(BenchmarkDataError, match=r"ww\.jsonl:2: duplicate task id"):
        get_benchmark("webwalkerqa", path=path).load()
    assert json.loads(line)["index"] == 38
