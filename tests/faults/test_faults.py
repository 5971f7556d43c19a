"""The injected-fault suite (marker ``faults``; docs/reliability.md): five kinds of fault at seeded random moments
of real ``mgrpo`` runs, each run checked against a fault-free run of the same seed (tests/faults/campaign.py).

CI: 20 faults (:data:`CAMPAIGNS` x :data:`FAULTS_PER_RUN`), each kind 4 times, in runs of up to
:data:`FAULTS_PER_RUN` faults (a run that completes before its share leaves the rest to the next run); a
longer soak: ``pytest tests/faults --faults-n 100``. The table (faults per kind, runs recovered, groups lost and duplicated) is printed
and written to ``<tmp>/faults-table.md``.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from tests.faults.campaign import (
    CONFIG, KINDS, OVERRIDES, can_mount_tmpfs, compare, fault_plan, reference_run, run_campaign, table,
)
from tests.support.redis_server import redis_server_binary
from tests.support.runs import build_warm_start

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.redis, pytest.mark.browser,
              pytest.mark.xdist_group("faults")]

CAMPAIGNS, FAULTS_PER_RUN = 2, 10


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    return build_warm_start(tmp_path_factory.mktemp("warm"), CONFIG, OVERRIDES, sub_visits=True)


def test_faults_lose_and_repeat_no_group(warm, tmp_path_factory, request):
    why = can_mount_tmpfs()
    if why is not None or redis_server_binary() is None:
        pytest.fail(f"the fault suite cannot run here: {why or 'redis-server is not installed'}")
    n = request.config.getoption("--faults-n") or CAMPAIGNS * FAULTS_PER_RUN
    ref = reference_run(warm, tmp_path_factory.mktemp("reference"))
    assert ref["delegated_groups"] == len(ref["groups"]) > 0, "the warm-started planner did not delegate"
    campaigns, problems = [], {}
    plan = fault_plan(n, seed=0)
    seed = 0
    while plan:  # a run that completes before its share of the plan leaves the rest to the next run
        assert seed < 3 * math.ceil(n / FAULTS_PER_RUN), f"{len(plan)} faults still not injected after {seed} runs"
        camp = run_campaign(seed, plan[:FAULTS_PER_RUN], warm, tmp_path_factory.mktemp(f"campaign{seed}"))
        del plan[:len([f for f in camp.faults if f.kind in KINDS])]
        campaigns.append(camp)
        for f in camp.faults:
            print(f"[faults] run {seed}: {f.kind} at planner step {f.at_planner_step}: {f.detail}"
                  + (f" -> stopped: {f.message}" if f.stopped else " -> went on"), flush=True)
        problems[seed] = compare(camp.check, ref) + ([] if camp.completed else ["the run did not complete"])
        seed += 1
    text = table(campaigns)
    print("\n" + text, flush=True)
    (tmp_path_factory.getbasetemp() / "faults-table.md").write_text(text + "\n")
    injected = [f for c in campaigns for f in c.faults if f.kind in KINDS]
    assert not any(problems.values()), problems
    assert len(injected) == n and Counter(f.kind for f in injected) == Counter(fault_plan(n, seed=0))
    assert not [f for c in campaigns for f in c.faults if f.kind not in KINDS], "a run stopped without a fault"
