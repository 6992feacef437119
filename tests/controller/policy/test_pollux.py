"""The ``pollux`` policy (controller/policy/pollux.py): what it learns from reports, its bounds
and the decisions it emits."""

from __future__ import annotations

import numpy as np
import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.pollux import INTERVAL_S, PolluxPolicy
from controller.policy.pollux_goodput import Point
from mlsched.model import BatchRule, ElasticSpec, IterationStop, JobSpec, JobState


def _spec(gpus=2, batch=128, most=1024, high=4):
    return JobSpec(
        name="j",
        command=("x",),
        gpus=gpus,
        stopping=IterationStop(100),
        batch_size=batch,
        elastic=ElasticSpec(1, high, BatchRule.SCHEDULER, most, True),
    )


def _queued(job_id, submit=0.0, gpus=2, **metrics):
    spec = _spec(gpus=gpus)
    return JobView(job_id, "u", spec, JobState.PENDING, submit, submit, 0, 0, metrics=metrics)


def _running(job_id, gpus_by_node, **metrics):
    placement, rank = [], 0
    for node, gpus in gpus_by_node.items():
        for g in gpus:
            placement.append(TaskPlacement(rank, node, (g,)))
            rank += 1
    return JobView(
        job_id,
        "u",
        _spec(),
        JobState.RUNNING,
        0.0,
        0.0,
        1,
        0,
        metrics=metrics,
        placement=tuple(placement),
        lease_expires_at=1000.0,
    )


def _snap(now, active=(), queued=(), nodes=None):
    return ClusterSnapshot.of(now, nodes or {"n0": 4, "n1": 4}, active=active, queued=queued)


def test_a_report_becomes_a_measured_point():
    policy = PolluxPolicy()
    job = _running("a", {"n0": [0, 1], "n1": [0]}, batch_size=96.0, throughput=480.0)
    policy.decide(_snap(0.0, active=[job]))
    # 3 GPUs over two nodes, 32 per GPU, step time 96 / 480 = 0.2 s
    assert list(policy.tracks["a"].points.values()) == [Point(3, True, 32.0, 0.2)]


def test_bounds_explore_at_most_twice_the_most_gpus_held():
    policy = PolluxPolicy()
    fresh = _queued("a")
    policy.decide(_snap(0.0, queued=[fresh]))
    assert policy.bounds(fresh, 64) == (1, 2)  # never ran: its request
    policy.tracks["a"].most = 1
    assert policy.bounds(fresh, 64) == (1, 2)
    policy.tracks["a"].most = 3
    assert policy.bounds(fresh, 64) == (1, 4)  # the elastic maximum caps 6


def test_batch_limits_follow_the_noise_report():
    policy = PolluxPolicy()
    silent = _queued("a")
    assert (policy.limits(silent).low, policy.limits(silent).high) == (128, 128)  # keeps M0
    noisy = _queued("b", grad_noise_scale=500.0)
    limits = policy.limits(noisy)
    assert (limits.low, limits.high, limits.initial, limits.noise) == (128, 1024, 128, 500.0)


def test_waiting_jobs_launch_on_free_gpus_with_a_lease_to_the_next_round():
    policy = PolluxPolicy(seed=1)
    decision = policy.decide(_snap(0.0, queued=[_queued("a"), _queued("b")]))
    assert sorted(x.job_id for x in decision.launch) == ["a", "b"]
    taken = [(p.node_id, g) for x in decision.launch for p in x.placement for g in p.gpu_indices]
    assert len(taken) == len(set(taken))
    assert all(x.lease_s == INTERVAL_S for x in decision.launch)


def test_a_running_job_gets_the_plans_batch_and_the_same_seed_decides_alike():
    def run(seed):
        policy = PolluxPolicy(seed=seed)
        job = _running("a", {"n0": [0, 1]}, batch_size=128.0, throughput=1000.0)
        job = JobView(**{**job.__dict__, "metrics": {**job.metrics, "grad_noise_scale": 300.0}})
        return policy, job, policy.decide(_snap(0.0, active=[job], nodes={"n0": 4}))

    policy, job, decision = run(0)
    row, batch = policy.plan["a"]
    k = int(row.sum())
    assert row.tolist() == [k] and 1 <= k <= 4  # one node only
    _, best = policy.table(job, 4)
    assert batch == max(best[k, 0], k)  # the batch maximising goodput on that allocation
    # prior (one point): perfect scaling, time per sample constant, so efficiency alone
    # decides: the smallest batch allowed, M0
    assert batch == 128
    _, _, again = run(0)
    assert again == decision


def test_gpus_of_a_suspending_job_are_not_planned():
    policy = PolluxPolicy()
    busy = _running("z", {"n0": [0, 1, 2, 3]})
    busy = JobView(**{**busy.__dict__, "state": JobState.SUSPENDING})
    snap = ClusterSnapshot.of(0.0, {"n0": 4}, queued=[_queued("a", gpus=2)], busy=[busy])
    decision = policy.decide(snap)
    assert decision.launch == ()
    assert np.sum(policy.plan.get("a", (np.zeros(1), 0))[0]) == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_one_gpu_many_jobs_runs_one_and_keeps_it(seed):
    policy = PolluxPolicy(seed=seed)
    decision = policy.decide(
        _snap(0.0, queued=[_queued(x, gpus=1) for x in "abc"], nodes={"n0": 1})
    )
    assert len(decision.launch) == 1
