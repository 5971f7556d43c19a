"""Contract of the benchmark registry (docs/benchmarks.md): every registered benchmark loads, scores and fails cleanly."""

from __future__ import annotations

import pytest

from benchmarks.base import (MAX_PREDICTION_CHARS, Benchmark, BenchmarkDataMissing, Task, Verdict,
                             default_data_dir)
from benchmarks.registry import (UnknownBenchmark, benchmark_class, get_benchmark, list_benchmarks,
                                 register_benchmark)

DATA = default_data_dir()

# Options that point a benchmark at the test fixtures in ../shared/data when its default source is
# not there (GAIA: the real data is gated; the synthetic rows are a local snapshot).
FIXTURE_OPTIONS = {
    "gaia": {"snapshot": DATA / "gaia" / "synthetic_gaia_validation.jsonl",
             "attachments_dir": DATA / "gaia" / "synthetic_attachments"},
}
# Options that point a benchmark at data that is absent.
MISSING_OPTIONS = {"gaia": lambda tmp: {"snapshot": tmp / "no_such_snapshot"}}


def test_builtin_benchmarks_are_registered():
    assert {"gaia", "xbench_deepsearch", "webwalkerqa"} <= set(list_benchmarks())
    assert list_benchmarks() == sorted(list_benchmarks())


@pytest.mark.parametrize("name", list_benchmarks())
class TestContract:
    def make(self, name, **extra):
        return get_benchmark(name, **{**FIXTURE_OPTIONS.get(name, {}), **extra})

    def test_identity(self, name):
        bench = self.make(name)
        assert isinstance(bench, Benchmark)
        assert bench.name == name
        assert isinstance(bench.version, str) and bench.version
        assert isinstance(type(bench).version, str) and type(bench).version

    def test_load_with_limit(self, name):
        bench = self.make(name)
        tasks = bench.load(limit=3)
        assert 1 <= len(tasks) <= 3
        assert bench.load(limit=0) == []
        for task in tasks:
            assert isinstance(task, Task)
            assert isinstance(task.task_id, str) and task.task_id
            assert isinstance(task.question, str) and task.question.strip()
            assert isinstance(task.gold, str) and task.gold.strip()
            assert isinstance(task.metadata, dict)
            assert all(isinstance(a, str) for a in task.attachments)
        assert len({t.task_id for t in tasks}) == len(tasks)
        all_tasks = bench.load()
        assert [t.task_id for t in all_tasks[:3]] == [t.task_id for t in tasks]

    def test_bad_limit_is_rejected(self, name):
        with pytest.raises(ValueError, match="limit"):
            self.make(name).load(limit=-1)

    def test_gold_scores_correct(self, name):
        bench = self.make(name)
        for task in bench.load(limit=3):
            verdict = bench.score(task, task.gold)
            assert isinstance(verdict, Verdict)
            assert verdict.correct is True, (task.task_id, verdict)
            assert verdict.error is None

    @pytest.mark.parametrize("prediction", ["", "   \n", "x" * (MAX_PREDICTION_CHARS + 1), "y" * 10_000_000,
                                            None, b"bytes", 42, 3.5, ["list"], {"a": 1}])
    def test_bad_predictions_are_incorrect_not_errors(self, name, prediction):
        bench = self.make(name)
        task = bench.load(limit=1)[0]
        verdict = bench.score(task, prediction)
        assert verdict.correct is False
        assert verdict.error, "a rejected prediction must say why"

    def test_wrong_answer_is_incorrect(self, name):
        bench = self.make(name)
        task = bench.load(limit=1)[0]
        verdict = bench.score(task, "zzz definitely not the answer 9876543")
        assert verdict.correct is False and verdict.error is None

    def test_missing_data_raises_specific_error(self, name, tmp_path):
        options = MISSING_OPTIONS.get(name, lambda tmp: {})(tmp_path)
        bench = get_benchmark(name, data_dir=tmp_path / "empty", **options)
        with pytest.raises(BenchmarkDataMissing) as info:
            bench.load(limit=1)
        assert info.value.benchmark == name
        assert info.value.reason and name in str(info.value)


def test_unknown_name_lists_registered():
    with pytest.raises(UnknownBenchmark) as info:
        get_benchmark("no_such_benchmark")
    message = str(info.value)
    assert "no_such_benchmark" in message
    for name in list_benchmarks():
        assert name in message


def test_register_rejects_bad_classes():
    with pytest.raises(TypeError):
        register_benchmark(object)  # type: ignore[arg-type]

    class NoVersion(Benchmark):
        name = "tmp_no_version"

    with pytest.raises(ValueError, match="version"):
        register_benchmark(NoVersion)

    class Clash(Benchmark):
        name = "gaia"
        version = "x"

    with pytest.raises(ValueError, match="already registered"):
        register_benchmark(Clash)
    assert benchmark_class("gaia").__module__ == "benchmarks.gaia"


def test_a_new_benchmark_is_one_small_class(tmp_path):
    """How the local_* twins will plug in: a class, a decorator, nothing else."""

    @register_benchmark
    class TinyLocal(Benchmark):
        name = "tmp_tiny_local"
        version = "1"

        def load(self, split=None, limit=None):
            tasks = [Task("t1", "2+2?", "4")]
            return tasks[: self._check_limit(limit)] if limit is not None else tasks

        def _score_text(self, task, prediction):
            return Verdict(prediction.strip() == task.gold, "exact", "match")

    try:
        assert "tmp_tiny_local" in list_benchmarks()
        bench = get_benchmark("tmp_tiny_local")
        assert bench.score(bench.load()[0], "4").correct
        assert bench.score(bench.load()[0], None).correct is False
    finally:
        from benchmarks import registry
        registry._REGISTRY.pop("tmp_tiny_local", None)


def test_scorer_exception_becomes_incorrect_verdict():
    class Broken(Benchmark):
        name = "tmp_broken"
        version = "1"

        def _score_text(self, task, prediction):
            raise RuntimeError("judge exploded")

    verdict = Broken().score(Task("t", "q", "a"), "a")
    assert verdict.correct is False and "RuntimeError" in verdict.error


def test_task_repr_hides_text():
    task = Task("id-1", "secret question text", "secret gold text", {"k": 1})
    assert "secret" not in repr(task) and "id-1" in repr(task)


def test_data_dir_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("MGRPO_DATA_DIR", str(tmp_path))
    assert get_benchmark("webwalkerqa").data_dir == tmp_path
    monkeypatch.delenv("MGRPO_DATA_DIR")
    assert default_data_dir().name == "data" and default_data_dir().parent.name == "shared"
