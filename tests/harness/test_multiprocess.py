"""A planner role on two processes (docs/training.md "More than one process per role"): ``python -m harness train``
with ``planner.num_processes: 2`` starts the planner through torchrun (gloo on CPU, DDP), each rank rolls out
its own whole query groups (query ids ``<task>@<step>.<rank>.<i>``), and the run's records, store and checkpoints
are those of one run: one step record per step, every group complete, the sub role (mgrpo: one process) trains
each delegating group exactly once.

Each trainer runs 2 steps of 2 groups (one per rank) on the tiny preset; mgrpo from the delegating warm start of
tests/support/runs.py so that its sub role trains, and its sub role on two processes as well (rank 0 serves, takes
each step's groups from the store and hands rank 1 its whole group). A frozen sub-agent's role is the service
alone, one process (a config asking for more is refused, tests/harness/test_train_config.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from harness.records import RunPaths, read_steps
from tests.support.runs import ROOT, build_warm_start, store_groups

pytestmark = pytest.mark.slow

SHAPE = ["planner.num_processes=2", "planner.groups_per_step=2", "rollout.k=2", "rollout.max_new_tokens=16",
         "rollout.planner_turns=2", "rollout.sub_turns=2", "alignment.d=2", "tasks.n_train=4", "tasks.n_test=2",
         "eval.every=0", "planner.save_steps=1", "sub.save_steps=1", "threads=1", "tools.visit_backend=direct"]


def test_accelerate_cpu_config_starts_two_gloo_processes(tmp_path):
    """``accelerate launch --config_file baselines/accelerate/cpu.yaml`` starts 2 processes that join with gloo
    (``--cpu --num_processes 2`` would start one, which a role with num_processes 2 refuses)."""
    script = tmp_path / "ranks.py"
    script.write_text("import sys\nfrom pathlib import Path\nfrom accelerate import PartialState\n"
                      "s = PartialState(cpu=True)\n"
                      "Path(sys.argv[1], f'rank-{s.process_index}').write_text(f'{s.num_processes} {s.backend}')\n"
                      "s.wait_for_everyone()\n")
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                           str(ROOT / "baselines/accelerate/cpu.yaml"), str(script), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # each process writes its own file (two processes printing to one pipe can lose a line)
    assert {p.name: p.read_text() for p in tmp_path.glob("rank-*")} == {"rank-0": "2 gloo", "rank-1": "2 gloo"}


def test_a_sharded_launch_loads_the_model_under_the_trainer_config(tmp_path):
    """With accelerate's FSDP environment (what ``accelerate launch --config_file baselines/accelerate/fsdp2.yaml``
    sets), a role creates its trainer config before the model (``args_then_model``), so transformers loads it the
    sharded way: the weights on rank 0 only, rank 1's left empty until the trainer prepares the model. FSDP2
    itself runs on gloo; its generation goes through a vLLM server (not run here), so the role stops there."""
    from harness.models import load_model

    model, tok = load_model("tiny")
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    script = tmp_path / "load.py"
    script.write_text(
        "import os, sys\nfrom pathlib import Path\n"
        "from harness.role.common import args_then_model, mgrpo_args\n"
        "from harness.train_config import load_train_config\n"
        "cfg = load_train_config(sys.argv[1], ['planner.num_processes=2', 'planner.groups_per_step=2'])\n"
        "out = Path(sys.argv[2])\n"
        "args, model, tok = args_then_model(lambda: mgrpo_args(cfg, 'planner', out / 'ckpt', cfg.k, 2, 1), "
        "sys.argv[3], 'planner', cfg)\n"
        "total = sum(float(p.detach().abs().sum()) for p in model.parameters())\n"
        "(out / f\"rank-{os.environ['RANK']}\").write_text(f'{total:.3f}')\n")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))},
           "HF_HUB_OFFLINE": "1", "ACCELERATE_USE_FSDP": "true", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(ROOT / "baselines/configs/tiny/single_agent.yaml"), str(tmp_path),
                           str(tmp_path / "model")], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sums = {r: float((tmp_path / f"rank-{r}").read_text()) for r in (0, 1)}
    expected = sum(float(p.detach().abs().sum()) for p in model.parameters())
    assert abs(sums[0] - expected) < 1e-3 * expected  # rank 0: the whole model
    assert sums[1] == 0.0, sums  # rank 1: nothing loaded (sharded loading in effect)


def _train(trainer: str, run, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "harness", "train", "--trainer", trainer, "--config",
                           str(ROOT / f"baselines/configs/tiny/{trainer}.yaml"), "--max-steps", "2", "--run-dir", str(run),
                           *SHAPE, *extra], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))},
                               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.parametrize("trainer", ["single_agent", "frozen_sub", "mgrpo"])
def test_each_trainer_runs_its_planner_on_two_processes(trainer, tmp_path):
    extra: list[str] = []
    if trainer == "mgrpo":
        warm = build_warm_start(tmp_path / "warm", ROOT / "baselines/configs/tiny/mgrpo.yaml", SHAPE, sub_visits=True)
        extra = [f"models.planner={warm}", f"models.sub={warm}", "sub.num_processes=2"]
    run = tmp_path / "run"
    _train(trainer, run, *extra)
    assert "[rank1]" in (run / "logs" / "planner.log").read_text()  # torchrun's second worker, in the role's log
    # one run's records: a step record per step (rank 0 writes them), a checkpoint per step
    assert [r.step for r in read_steps(run / "planner" / "metrics.jsonl").records] == [1, 2]
    assert sorted(p.name for p in (run / "planner" / "checkpoints").iterdir() if p.is_dir()) == [
        "checkpoint-1", "checkpoint-2"]
    progress, consumed, pending, delegated = store_groups(f"sqlite:///{RunPaths(run).store_db.resolve()}", run.name)
    assert len(progress) == 4 and all(p.complete for p in progress.values())  # 2 steps x 2 groups, K each
    ranks = sorted({re.search(r"@\d+\.(\d+)\.", q).group(1) for q in progress})
    assert ranks == ["0", "1"], sorted(progress)  # each rank rolled out its own group every step
    if trainer == "mgrpo":  # the sub role took every delegating group once and trained it in exactly one step
        assert all(delegated.values()) and pending == []
        assert sorted(c.query_id for c in consumed) == sorted(progress) and all(c.state == "done" for c in consumed)
        subs = read_steps(run / "sub" / "metrics.jsonl").records
        trained = [q for r in subs for q in r.extra["groups"]]
        assert [r.step for r in subs] == [1, 2] and sorted(trained) == sorted(progress)
        # the sub role on two processes too: rank 0 took both groups of a step and handed rank 1 one, whole
        assert "[rank1]" in (run / "logs" / "sub.log").read_text()
        assert all(r.n_trajectories == 2 * 2 * 2 for r in subs)  # 2 groups of d*K = 2*2 per step
        assert sorted(p.name for p in (run / "sub" / "checkpoints").iterdir() if p.is_dir()) == [
            "checkpoint-1", "checkpoint-2"]
