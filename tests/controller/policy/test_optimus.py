"""``optimus`` (issue 15): Optimus' speed fit, greedy marginal gain and its 10-minute rounds."""

from __future__ import annotations

import pytest

from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.optimus import OptimusPolicy, iteration_time, remaining_iterations
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, SpeedSample


def _loss(k):
    """Optimus' curve 1 / (b0 k + b1) + b2 with b0 = 0.01, b1 = 1, b2 = 0.5."""
    return 1.0 / (0.01 * k + 1.0) + 0.5


def _job(job_id, remaining_s=None, samples=(), submit=0.0, gpus=1, high=4, upto=None):
    history = () if upto is None else tuple((k, _loss(k)) for k in range(0, upto + 1, 100))
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
        iteration=upto or 0,
        estimated_remaining_s=remaining_s,
        speed_samples=tuple(SpeedSample(g, 1, t, t, 1) for g, t in samples),
        metric_history=history,
    )


def test_the_speed_model_is_fitted_to_three_gpu_counts():
    def t(g):
        return 1.0 + 4.0 / g + 0.5 * g

    a, b, c = iteration_time(_job("a", 1.0, [(g, t(g)) for g in (1, 2, 4)]))
    assert (a, b, c) == pytest.approx((1.0, 4.0, 0.5), abs=1e-6)
    # one count measured: linear speed-up through it
    assert iteration_time(_job("a", 1.0, [(2, 3.0)])) == (0.0, 6.0, 0.0)


def test_remaining_iterations_come_from_the_fitted_loss_curve():
    # reports every 100 iterations (an epoch) on 1 / (0.01 k + 1) + 0.5; with u = 0.01 k + 1
    # an epoch lowers the loss by 1 / (u (u + 1)), under 2 % of 1 / u + 0.5 once
    # u^2 + 3u - 98 > 0, u > 8.51: the first epoch end past it is u = 9, k = 800
    assert remaining_iterations(_job("a", upto=500)) == pytest.approx(300.0)
    assert remaining_iterations(_job("a", upto=700)) == pytest.approx(100.0)
    # converged by the prediction: what is left of the current epoch
    late = JobView(**{**_job("a", upto=900).__dict__, "iteration": 930})
    assert remaining_iterations(late) == pytest.approx(70.0)
    assert remaining_iterations(_job("a")) is None  # no loss report: no curve


def test_gpus_go_to_the_largest_drop_in_predicted_remaining_time():
    # A: 300 iterations left at t(g) = 4 / g; B: 100 left at 6 / g (the test above).
    # Drops: A 300 x (4 - 2) = 600, then B 100 x (6 - 3) = 300, then A 300 x (2 - 4/3) = 200
    # over B's 100 x (3 - 2) = 100
    a = _job("a", samples=[(1, 4.0)], upto=500)
    b = _job("b", samples=[(1, 6.0)], submit=1.0, upto=700)
    assert OptimusPolicy().allocate([a, b], 5) == {"a": 3, "b": 2}
    assert OptimusPolicy().allocate([a, b], 1) == {"a": 1}  # minimums in order while they last
    # the simulator's remaining time is never read
    told = [JobView(**{**j.__dict__, "estimated_remaining_s": s}) for j, s in ((a, 1.0), (b, 1e9))]
    assert OptimusPolicy().allocate(told, 5) == {"a": 3, "b": 2}


def test_a_job_without_a_curve_gets_the_median_remaining_seconds():
    # A: 300 x t_a(1) = 1,200 s, B: 100 x 6 = 600 s; median 900 s. C never ran (t = 1 / g on
    # its request of 2 GPUs: 0.5 s), so 900 / 0.5 = 1,800 iterations
    a = _job("a", samples=[(1, 4.0)], upto=500)
    b = _job("b", samples=[(1, 6.0)], upto=700)
    c = _job("c", gpus=2)
    jobs = [a, b, c]
    left = OptimusPolicy._left(jobs, {j.id: iteration_time(j) for j in jobs})
    assert left == pytest.approx({"a": 300.0, "b": 100.0, "c": 1800.0})
    assert OptimusPolicy._left([c], {"c": iteration_time(c)}) == {"c": 1.0}  # none known


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
