"""The injected-fault suite (marker ``faults``; docs/reliability.md): five kinds of fault at seeded random moments
of real ``mgrpo`` runs, each run checked against a fault-free run of the same seed (tests/faults/campaign.py).

CI: :data:`CAMPAIGNS` runs of :data:`FAULTS_PER_RUN` faults each (at least 20 faults, every kind several
times); a longer soak: ``pytest tests/faults --faults-n 100`` (the faults spread over runs of
:data:`FAULTS_PER_RUN`). The table (faults per kind, runs recovered, groups lost and duplicated) is printed
and written to ``<tmp>/faults-table.md``.
"""

from __future__ import annotations

import math

import pytest

from tests.faults.campaign import KINDS, OVERRIDES, CONFIG, can_mount_tmpfs, compare, reference_run, run_campaign, table
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
    for seed in range(math.ceil(n / FAULTS_PER_RUN)):
        camp = run_campaign(seed, min(FAULTS_PER_RUN, n - seed * FAULTS_PER_RUN), warm,
                            tmp_path_factory.mktemp(f"campaign{seed}"))
        campaigns.append(camp)
        for f in camp.faults:
            print(f"[faults] run {seed}: {f.kind} at planner step {f.at_planner_step}: {f.detail}"
                  + (f" -> stopped: {f.message}" if f.stopped else " -> went on"), flush=True)
        problems[seed] = compare(camp.check, ref) + ([] if camp.completed else ["the run did not complete"])
    text = table(campaigns)
    print("\n" + text, flush=True)
    (tmp_path_factory.getbasetemp() / "faults-table.md").write_text(text + "\n")
    injected = [f for c in campaigns for f in c.faults if f.kind in KINDS]
    assert not any(problems.values()), problems
    assert len(injected) >= min(n, 20) * 0.9, f"only {len(injected)} faults were injected before the runs ended"
    assert {f.kind for f in injected} == set(KINDS)
    assert not [f for c in campaigns for f in c.faults if f.kind not in KINDS], "a run stopped without a fault"
