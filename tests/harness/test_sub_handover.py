"""The sub role's hand-over between its processes (docs/training.md, "More than one process per role"), on 2 real
gloo processes: rank 0's :meth:`harness.role.sub.SubRollout.__call__` hands each rank its whole groups; when the
planner has finished, or rank 0 fails while taking groups, every rank learns it at the same hand-over
(:class:`harness.role.sub.RankShare`), so none waits for a batch that never comes.

Rank 0's group taking (``SubRollout.batch``: store, alignment, rewards; tested in tests/harness/test_roles.py) is
replaced by a script of outcomes here: the test isolates the hand-over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.runs import ROOT

pytestmark = pytest.mark.slow

SCRIPT = r'''
import json, os, sys, types
import torch.distributed as dist
from harness.role.sub import PlannerFinished, RankShare, SubRollout

dist.init_process_group("gloo")
rank = dist.get_rank()
trainer = types.SimpleNamespace(accelerator=types.SimpleNamespace(num_processes=2, process_index=rank),
                                model=types.SimpleNamespace(train=lambda: None))
script = iter(["batch", "error", "finished"])

def batch(self, n_groups, trainer, parts=1):
    what = next(script)
    if what == "error":
        raise ValueError("the store is gone")
    if what == "finished":
        raise PlannerFinished()
    assert (n_groups, parts) == (4, 2)  # 2 slots per rank -> rank 0 takes 4 groups for both
    return [{"query_id": [f"q{p}.{i}" for i in range(2)]} for p in range(parts)]

if rank == 0:
    source = SubRollout.__new__(SubRollout)
    source.cfg = types.SimpleNamespace(sub_group_size=3)
    SubRollout.batch = batch
else:
    source = RankShare()
seen = []
for _ in range(3):
    try:
        seen.append(source(["slot"] * 6, trainer)["query_id"])  # 6 prompts = 2 slots of d*K = 3
    except PlannerFinished:
        seen.append("finished")
    except Exception as exc:
        seen.append(f"{type(exc).__name__}: {exc}")
open(os.path.join(sys.argv[1], f"rank-{rank}.json"), "w").write(json.dumps(seen))
dist.destroy_process_group()
'''


def test_rank0_hands_whole_groups_and_its_failures_and_the_end_to_every_rank(tmp_path):
    script = tmp_path / "handover.py"
    script.write_text(SCRIPT)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "XDIST_"))}, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert rank0 == [["q0.0", "q0.1"], "ValueError: the store is gone", "finished"]
    assert rank1 == [["q1.0", "q1.1"],
                     "RuntimeError: sub role rank 0 failed while taking the step's groups: ValueError: the store is gone",
                     "finished"]
