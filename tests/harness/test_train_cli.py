"""``python -m harness train``'s console progress and its checks before any role starts (harness/train.py).

No role is started here: the progress printer reads fabricated ``metrics.jsonl`` files, and the model
checks run in-process through ``main`` (which returns before it would create the run directory). The
real runs that show the progress lines are in tests/harness/test_train_e2e.py. The supervisor's drain after the
planner's end is checked on small stand-in processes (a few seconds of Python each).
"""

from __future__ import annotations

import io
import os
import re
import sys
import time
from pathlib import Path

import pytest

from harness.config import ConfigError, from_dict
from harness.models import check_model_ref
from harness.records import StepRecord, append_step
import harness.train as train_mod
from harness.train import RoleProcess, RoleProgress, check_models, killed_hint, main, role_totals, supervise
from harness.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
MGRPO = str(ROOT / "baselines/configs/tiny/mgrpo.yaml")


def _step(run: Path, role: str, step: int, reward: float | None, *, rollout_s: float = 3.0, train_s: float = 1.5,
          at: float | None = None) -> None:
    append_step(run, StepRecord(run_id=run.name, trainer="mgrpo", role=role, seed=0, step=step,
                                time=at if at is not None else 1000.0 + step, reward_mean=reward,
                                rollout_s=rollout_s, train_s=train_s, wait_s=0.0))


def test_progress_prints_a_plain_line_per_new_step_when_stdout_is_not_a_terminal(tmp_path):
    run = tmp_path / "run"
    _step(run, "planner", 1, 0.25)  # recorded before this launcher started (a resume): not printed again
    out = io.StringIO()
    progress = RoleProgress(run, {"planner": 4, "sub": 4}, stream=out)
    assert not progress.bars  # a StringIO, like a log file, is no terminal
    progress.poll()
    assert out.getvalue() == ""
    _step(run, "planner", 2, 0.5)
    _step(run, "sub", 1, None, rollout_s=0.25, train_s=0.5)
    with open(run / "sub" / "metrics.jsonl", "a") as fh:
        fh.write('{"run_id": "run", "trainer": "mg')  # the role is writing its next record
    progress.poll()
    progress.poll()  # nothing new: nothing printed
    assert out.getvalue().splitlines() == ["[train] planner step 2/4: reward 0.500, 4.5 s/step",
                                           "[train] sub step 1/4: reward n/a, 0.8 s/step"]
    # A resumed role drops the records after its checkpoint and writes the step again: shown again.
    (run / "planner" / "metrics.jsonl").write_text((run / "planner" / "metrics.jsonl").read_text().splitlines()[0] + "\n")
    _step(run, "planner", 2, 0.75, at=2000.0)
    progress.close()
    assert out.getvalue().splitlines()[-1] == "[train] planner step 2/4: reward 0.750, 4.5 s/step"


def test_progress_draws_one_bar_per_role_on_a_terminal(tmp_path):
    run = tmp_path / "run"
    out = io.StringIO()
    progress = RoleProgress(run, {"planner": 4, "sub": 2}, stream=out, bars=True)
    _step(run, "planner", 1, 0.25)
    _step(run, "planner", 2, 0.5)
    progress.poll()
    progress.close()
    text = out.getvalue()
    assert re.search(r"planner:  50%\|[^|]*\| 2/4 \[[^\]]*reward 0\.500, 4\.5 s/step\]", text), text
    assert re.search(r"    sub:   0%\|[^|]*\| 0/2 \[", text), text
    assert "[train]" not in text  # no plain lines next to the bars


def test_role_totals_are_the_max_steps_of_the_roles_that_train():
    mgrpo = from_dict(TrainConfig, {"trainer": "mgrpo", "rollout": {"k": 2}, "alignment": {"d": 2},
                                    "planner": {"max_steps": 6, "groups_per_step": 2}, "sub": {"max_steps": 3}})
    assert role_totals(mgrpo) == {"planner": 6, "sub": 3}
    frozen = from_dict(TrainConfig, {"trainer": "frozen_sub", "rollout": {"k": 2},
                                     "planner": {"max_steps": 6, "groups_per_step": 2}})
    assert role_totals(frozen) == {"planner": 6}  # its sub role only serves


def test_check_model_ref_accepts_names_model_dirs_and_warm_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model_ref("tiny", "planner", key="models.planner")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    check_model_ref(str(model), "sub_agent", key="models.sub")
    warm = tmp_path / "warm"
    (warm / "planner").mkdir(parents=True)
    (warm / "planner" / "config.json").write_text("{}")
    check_model_ref(str(warm), "planner", key="models.planner")
    with pytest.raises(ConfigError, match=r"^models\.sub='.*warm': .*warm holds no config\.json: .*a sub_agent/ model"):
        check_model_ref(str(warm), "sub_agent", key="models.sub")
    with pytest.raises(ConfigError, match=r"^models\.planner='/nonexistent/m': no model directory at /nonexistent/m"):
        check_model_ref("/nonexistent/m", "planner", key="models.planner")
    with pytest.raises(ConfigError, match=r"not in the local Hugging Face cache .*HF_HUB_OFFLINE=1"):
        check_model_ref("no-such-org/no-such-model-xyz", "planner", key="models.planner")


def test_a_bad_model_path_fails_in_one_line_and_leaves_no_run_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = tmp_path / "run"
    assert main(["--trainer", "mgrpo", "--config", MGRPO, "--run-dir", str(run), "models.sub=/nonexistent/model-dir"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: models.sub='/nonexistent/model-dir': no model directory at /nonexistent/model-dir")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not run.exists()
    # the default run directory (<runs_dir>/<run_id>) is not created either
    assert main(["--trainer", "mgrpo", "--config", MGRPO, f"runs_dir={tmp_path / 'runs'}",
                 "models.planner=no-such-org/no-such-model-xyz"]) == 2
    assert "error: models.planner='no-such-org/no-such-model-xyz': " in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_model_checks_follow_what_each_trainer_loads(tmp_path):
    def cfg(trainer: str, **models: str) -> TrainConfig:
        return from_dict(TrainConfig, {"trainer": trainer, "rollout": {"k": 2}, "alignment": {"d": 2}, "models": models,
                                       "planner": {"max_steps": 2, "groups_per_step": 2}})

    run = tmp_path / "run"
    check_models(cfg("single_agent", sub="/nonexistent/sub"), run, resume=False)  # single_agent has no sub role
    with pytest.raises(ConfigError, match=r"^models\.sub="):
        check_models(cfg("mgrpo", sub="/nonexistent/sub"), run, resume=False)
    # a resumed mgrpo sub role starts from its own checkpoint; a frozen sub-agent always from models.sub
    ckpt = run / "sub" / "checkpoints" / "checkpoint-2"
    ckpt.mkdir(parents=True)  # half-written by a kill during its save: the role will load models.sub
    with pytest.raises(ConfigError, match=r"^models\.sub="):
        check_models(cfg("mgrpo", sub="/nonexistent/sub"), run, resume=True)
    (ckpt / "trainer_state.json").write_text('{"global_step": 2}')  # written to the end (with its store position)
    (ckpt / "mgrpo_store.json").write_text('{"max_position": 3}')
    check_models(cfg("mgrpo", sub="/nonexistent/sub"), run, resume=True)
    with pytest.raises(ConfigError, match=r"^models\.sub="):
        check_models(cfg("frozen_sub", sub="/nonexistent/sub"), run, resume=True)
    with pytest.raises(ConfigError, match=r"^models\.planner="):
        check_models(cfg("mgrpo", planner="/nonexistent/planner"), run, resume=True)


def test_a_role_stopped_by_its_store_names_the_store_the_step_and_how_to_continue(tmp_path):
    """harness/role/__main__.py: one line with the step in progress (from the role's records), the store URL
    without its password, the store's own error, and the resume command."""
    from harness.role.__main__ import STORE_FAILED, store_failure
    from mgrpo.store import StoreUnavailable

    run = tmp_path / "run"
    exc = StoreUnavailable("lost Redis at h:6379 (db 0) for 30.1 s (12 attempts, retry budget 30 s): refused")
    url = "redis://:s3cret@h:6379/0"
    assert store_failure("planner", run, url, exc) == (
        "error: the planner role stopped before its first step on store redis://:***@h:6379/0: " + str(exc)
        + ". Every store write is all or nothing, so no group is half-applied; once the store is back, continue "
        f"with python -m harness train --resume {run}")
    _step(run, "planner", 1, 0.25)
    _step(run, "planner", 2, 0.5)
    msg = store_failure("planner", run, url, exc)
    assert "stopped in step 3 (steps up to 2 recorded) on store" in msg and "s3cret" not in msg
    assert STORE_FAILED == 3  # 2 is a bad config or task set


def test_a_role_killed_by_a_signal_says_which_and_points_at_the_memory_docs():
    # SIGKILL that no one sent is most often the out-of-memory killer, which writes nothing to the role's log
    # (the smollm2 sub role on a 24 GB machine, docs/performance.md "Memory")
    assert "out-of-memory killer" in killed_hint(-9) and "docs/performance.md" in killed_hint(-9)
    assert killed_hint(-15) == " (killed by SIGTERM)"
    assert killed_hint(1) == "" and killed_hint(3) == ""
    assert killed_hint(-200) == ""  # not a signal this platform names


def _stand_in(tmp_path: Path, name: str, code: str) -> RoleProcess:
    return RoleProcess(name, [sys.executable, "-c", code], tmp_path / f"{name}.log", dict(os.environ))


@pytest.mark.parametrize("work", ["busy", "idle"])
def test_the_drain_waits_for_a_role_that_still_computes_and_not_for_one_that_only_waits(tmp_path, monkeypatch, work):
    # After the planner's end the sub role may still train its last step for minutes (SmolLM2 on a CPU: over the
    # 300 s that once failed such a run); a role that only waits is stuck. Scaled down: 1 s of allowed idleness.
    monkeypatch.setattr(train_mod, "DRAIN_TIMEOUT_S", 1.0)
    planner = _stand_in(tmp_path, "planner", "pass")
    if work == "busy":  # computes for 3 s (three times the allowed idleness), then ends cleanly
        sub = _stand_in(tmp_path, "sub", "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 3: sum(range(10000))")
    else:  # waits (asleep) for much longer than the allowed idleness
        sub = _stand_in(tmp_path, "sub", "import time; time.sleep(60)")
    t0 = time.monotonic()
    try:
        err = supervise({"planner": planner, "sub": sub}, poll_s=0.1)
    finally:
        for p in (planner, sub):
            p.stop(grace_s=2)
    took = time.monotonic() - t0
    if work == "busy":
        assert err is None, err
        assert took >= 2.5  # it was waited for, not cut at the idle limit
    else:
        assert err is not None and "role(s) ['sub'] did not stop, idle" in err and "sub.log" in err, err
        assert took < 30


def test_cpu_seconds_counts_a_process_and_reads_none_once_it_is_gone(tmp_path):
    p = _stand_in(tmp_path, "worker", "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 0.5: pass")
    first = p.cpu_seconds()
    p.proc.wait(timeout=30)
    assert first is not None and first >= 0.0
    p.stop()
    assert p.cpu_seconds() is None  # reaped: nothing to read, and no exception


def test_a_rank_that_left_its_process_group_exits_with_its_status_and_flushed_output():
    """harness/role/__main__.py ``exit_now``: a torchrun rank skips the interpreter's teardown (where C++
    destructors aborted a finished rank) but keeps its exit status and everything it printed, even when stdout
    is a pipe (block-buffered). A process that was never in a group exits the ordinary way (atexit runs)."""
    import subprocess
    import sys

    code = ("import atexit, sys\nimport harness.role.__main__ as m\n"
            "atexit.register(lambda: sys.stdout.write('atexit ran\\n'))\n"
            "m._LEFT_GROUP = {left}\nprint('finished after 2 steps')\nsys.stderr.write('last words\\n')\n"
            "m.exit_now(7)\n")
    for left, tail in ((True, ""), (False, "atexit ran\n")):
        proc = subprocess.run([sys.executable, "-c", code.format(left=left)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 7, proc.stderr
        assert proc.stdout == "finished after 2 steps\n" + tail
        assert proc.stderr.endswith("last words\n")
