"""The evaluation suite: one test item per benchmark task (docs/evaluation.md, docs/report.md).

``pytest benchmarks/ --trainer=expert|mgrpo|frozen_sub|single_agent ...``; the options, the
parametrisation (ids ``<benchmark>::<task_id>``), the records and the closing accuracy table live
in ``benchmarks/conftest.py`` (see docs/evaluation.md).

An item **passes** when the task was answered, scored and its record written, whatever the
verdict (a wrong answer is a result, not a failure). A runner crash or timeout is recorded as
incorrect and the item is reported as **xfail** with the error. A benchmark that cannot run here
(data missing, or the runner cannot answer it) is one ``<benchmark>::NOT_RUN`` item, skipped with
the reason.
"""

from __future__ import annotations

import pytest


def test_task(eval_case, request):
    if eval_case.skip is not None:  # a NOT_RUN case, or a session without a run to evaluate
        pytest.skip(eval_case.skip)
    # Requested here, after the skip, so a session that runs nothing starts no world or model.
    eval_suite = request.getfixturevalue("eval_suite")
    outcomes = eval_suite.evaluate(eval_case, eval_suite.timer(request, eval_case))
    for outcome in outcomes:  # one per inference run
        record = outcome.record
        assert record.benchmark == eval_case.bench and record.task_id == eval_case.task.task_id
        assert outcome.path.is_file(), f"record file {outcome.path} was not written"
        assert isinstance(record.correct, bool)
        assert record.correct is False or record.error is None, "a record with an error must be incorrect"
    crashed = [o.record.error for o in outcomes if o.crashed]
    if crashed:
        pytest.xfail(f"counted as incorrect ({len(crashed)} of {len(outcomes)} run(s)): {crashed[0]}")
