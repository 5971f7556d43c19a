"""One answer matcher per benchmark (issue 17): the evaluation suite, training-time evaluation and the hard
filter give the same prediction the same verdict, because all of them call the benchmark's registered
``score`` on the same gold answer (``harness.role.common.score_task``); the report reads the verdict the
record holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.registry import get_benchmark
from harness.role.common import local_benchmarks, score_task
from harness.role.tasks import candidate_tasks, task_key
from harness.train_config import load_train_config

ROOT = Path(__file__).resolve().parents[2]


def _variants(gold: str) -> list[str | None]:
    return [gold, gold.upper(), f"  {gold}. ", f"The answer is {gold}", f"the {gold}", gold[:-1], "wrong", "", None]


@pytest.mark.parametrize("style", ["gaia", "webwalkerqa", "xbench"])
def test_the_suite_and_training_time_evaluation_give_every_prediction_the_same_verdict(style):
    cfg = load_train_config(str(ROOT / "baselines/configs/tiny/mgrpo.yaml"), [f"tasks.benchmarks=[{style}]",
                                                                              "tasks.split=test"])
    _, generated, _ = candidate_tasks(cfg)  # the test split as training-time evaluation sees it
    bench = get_benchmark(f"local_{style}", world_seed=cfg.world.seed, world_size=cfg.world.size)
    benches = local_benchmarks(cfg, generated)
    checked = 0
    for task in generated[:5]:
        suite_task = bench._task(task, "test")  # the same generated row as pytest benchmarks/ turns it into a Task
        for pred in _variants(suite_task.gold):
            used, verdict = score_task(benches, task, pred)
            assert used.name == bench.name
            assert bool(verdict.correct) == bool(bench.score(suite_task, pred).correct), (task_key(task), pred)
            checked += 1
    assert checked >= 5 * 9
    # and the verdicts are not all the same (the test could not fail otherwise)
    gold = bench._task(generated[0], "test").gold
    assert score_task(benches, generated[0], gold)[1].correct and not score_task(benches, generated[0], "wrong")[1].correct
