"""``optimus`` (issue 15): Optimus' speed fit, greedy marginal gain and its 10-minute rounds."""

from __future__ import annotations

import pytest

from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.optimus import OptimusPolicy, iteration_time
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, SpeedSample


def _job(job_id, remaining_s, samples=(), submit=0.0, gpus=1, high=4):
    spec = JobSpec(
        name=job_id,
        command=("x",),
        gpus=gpus,
        stopping=IterationStop(100),
        elastic=ElasticSpec(1, high),
    )
    return JobView(
        job_id,
        "u",
        spec,
        JobState.PENDING,
        submit,
        submit,
        0,
        0,
        estimated_remaining_s=remaining_s,
        speed_samples=tuple(SpeedSample(g, 1, t, t, 1) for g, t in samples),
    )


def test_the_speed_model_is_fitted_to_three_gpu_counts():
    def t(g):
        return 1.0 + 4.0 / g + 0.5 * g

    a, b, c = iteration_time(_job("a", 1.0, [(g, t(g)) for g in (1, 2, 4)]))
    assert (a, b, c) == pytest.approx((1.0, 4.0, 0.5), abs=1e-6)
    # one count measured: linear speed-up through it
    assert iteration_time(_job("a", 1.0, [(2, 3.0)])) == (0.0, 6.0, 0.0)


def test_gpus_go_to_the_largest_drop_in_remaining_time():
    # both t(g) = 4 / g; A has 100 iterations left (400 s on 1 GPU), B 10 (40 s)
    a = _job("a", 400.0, [(1, 4.0)])
    b = _job("b", 40.0, [(1, 4.0)], submit=1.0)
    # after one GPU each: A's next GPU saves 100 x (4 - 2) = 200 s, B's 10 x 2 = 20 s;
    # then A's third saves 100 x (2 - 4/3) = 66.7 s, still more than B's 20
    assert OptimusPolicy().allocate([a, b], 4) == {"a": 3, "b": 1}
    assert OptimusPolicy().allocate([a, b], 1) == {"a": 1}  # minimums in order while they last


def test_rounds_every_ten_minutes_and_new_jobs_wait_for_the_next():
    policy = OptimusPolicy()
    first = policy.decide(ClusterSnapshot.of(0.0, {"n0": 4}, queued=[_job("a", 400.0)]))
    assert [x.job_id for x in first.launch] == ["a"]
    assert first.launch[0].lease_s == 600.0  # to the next round
    placement = first.launch[0].placement
    running = JobView(
        **{
            **_job("a", 300.0).__dict__,
            "state": JobState.RUNNING,
            "placement": placement,
            "lease_expires_at": 600.0,
        }
    )
    waiting = _job("b", 40.0, submit=100.0)
    mid = policy.decide(ClusterSnapshot.of(100.0, {"n0": 4}, active=[running], queued=[waiting]))
    assert not mid.launch and not mid.resize and not mid.renew
    due = policy.decide(ClusterSnapshot.of(600.0, {"n0": 4}, active=[running], queued=[waiting]))
    assert [x.job_id for x in due.launch] == ["b"]


def test_an_idle_cluster_starts_a_round_at_once():
    policy = OptimusPolicy()
    policy.decide(ClusterSnapshot.of(0.0, {"n0": 4}))
    late = policy.decide(ClusterSnapshot.of(50.0, {"n0": 4}, queued=[_job("a", 400.0)]))
    assert [x.job_id for x in late.launch] == ["a"]
