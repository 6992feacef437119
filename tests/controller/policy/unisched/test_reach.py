"""What the MILP is given on a long queue (``REACH`` = 2): queued best-effort jobs and the
least-slack SLO jobs, each up to twice the GPUs that can be given out now; the other SLO jobs
reserve the future terms they need.

Every job below is profiled (``make_job``: T_comp 1 s, T1 0.1 s per iteration) and runs 1,000
iterations: on 8 GPUs of one node that is 1,000 * (1 + 7 * 0.1) = 1,700 s, 3 SLO leases of
600 s.
"""

from __future__ import annotations

import pytest

import controller.policy.unisched.policy as module
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from controller.policy.unisched.milp import MilpProblem, solve
from mlsched.model import JobClass, JobState


@pytest.fixture
def problems(monkeypatch) -> list[MilpProblem]:
    seen: list[MilpProblem] = []

    def spy(problem, *args):
        seen.append(problem)
        return solve(problem, *args)

    monkeypatch.setattr(module, "solve", spy)
    return seen


def _policy() -> UniSchedPolicy:
    return UniSchedPolicy(UniSchedConfig(isolate_solver=False))


def _on_node_a(make_job):  # type: ignore[no-untyped-def]
    """A best-effort job holding all 8 GPUs of node "a", its lease ending at 300 s."""
    return make_job(
        "r",
        JobClass.BEST_EFFORT,
        gpus=8,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "a", tuple(range(8))),),
        lease_expires_at=300.0,
        running_since=0.0,
    )


def test_queued_best_effort_jobs_past_twice_the_free_gpus_are_left_out(make_job, problems):
    # one free 8-GPU node, ten queued 8-GPU best-effort jobs: the two with the shortest
    # remaining time (highest reward) ask for 16 GPUs = 2 x 8, the other eight wait outside
    queued = [make_job(f"b{i}", JobClass.BEST_EFFORT, gpus=8, iteration=100 * i) for i in range(10)]
    decision = _policy().decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=queued))
    [problem] = problems
    assert sorted(j.job_id for j in problem.jobs) == ["b8", "b9"]
    assert [launch.job_id for launch in decision.launch] == ["b9"]  # least left to run


def test_only_the_least_slack_slo_jobs_enter_the_milp_the_rest_reserve_terms(make_job, problems):
    # deadlines 1,900 s (3 terms: the 3 it needs, no spare), 3,100 s (5 terms) and 6,100 s
    # (10 terms), two jobs each; 8 free GPUs reach 16 GPUs of SLO jobs: the two tightest
    deadlines = {"t": 1900.0, "m": 3100.0, "l": 6100.0}
    queued = [
        make_job(f"{k}{i}", gpus=8, deadline=d, queued_since=float(i))
        for k, d in deadlines.items()
        for i in range(2)
    ]
    decision = _policy().decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=queued))
    [problem] = problems
    assert {j.job_id for j in problem.jobs} == {"t0", "t1"}
    # the others cannot start now; their 3 leases are spread over the terms after this one
    # and before their deadline: 8 GPUs x 3/4 in terms 1-4 for "m", 8 x 3/9 in 1-9 for "l"
    mid, late = 8 * 3 / 4, 8 * 3 / 9
    expected = [2 * mid + 2 * late] * 4 + [2 * late] * 5 + [0.0] * 2
    assert problem.reserved == pytest.approx(expected)
    assert set(decision.estimates) == {"t0", "t1", "m0", "m1", "l0", "l1"}


def test_running_jobs_stay_in_the_milp_whatever_the_queue(make_job, problems):
    running = _on_node_a(make_job)
    queued = [make_job(f"b{i}", JobClass.BEST_EFFORT, gpus=8, iteration=900) for i in range(4)]
    _policy().decide(ClusterSnapshot.of(300.0, {"a": 8}, active=[running], queued=queued))
    [problem] = problems
    assert "r" in {j.job_id for j in problem.jobs}
    assert len(problem.jobs) == 3  # r, and 16 GPUs of the queue


def _fill_after_a_completion(make_job, queued) -> list[str]:
    """Who starts on a node freed between boundaries, after a boundary that saw the queue
    while a running job held the node."""
    policy = _policy()
    running = _on_node_a(make_job)
    assert not policy.decide(
        ClusterSnapshot.of(0.0, {"a": 8}, active=[running], queued=queued)
    ).launch
    freed = policy.decide(ClusterSnapshot.of(100.0, {"a": 8}, queued=queued))  # r has finished
    return [launch.job_id for launch in freed.launch]


def test_freed_gpus_go_first_to_an_slo_job_that_must_start_now(make_job):
    queued = [
        make_job("loose", gpus=8, deadline=6100.0),
        make_job("be", JobClass.BEST_EFFORT, gpus=8),
        make_job("tight", gpus=8, deadline=1900.0, queued_since=1.0),
    ]
    assert _fill_after_a_completion(make_job, queued) == ["tight"]


@pytest.mark.parametrize(("slo_done", "be_done", "first"), [(0, 500, "be"), (500, 0, "loose")])
def test_other_freed_gpus_go_to_the_shortest_job_slo_or_not(make_job, slo_done, be_done, first):
    # an SLO job with slack and a best-effort job compete by remaining time alone
    queued = [
        make_job("loose", gpus=8, deadline=6100.0, iteration=slo_done),
        make_job("be", JobClass.BEST_EFFORT, gpus=8, iteration=be_done),
    ]
    assert _fill_after_a_completion(make_job, queued) == [first]
