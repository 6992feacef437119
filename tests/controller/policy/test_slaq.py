"""SLAQ's predictors and Algorithm 1 against hand-computed expectations; fair shares."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from controller.placement import TaskPlacement
from controller.policy.base import JobView
from controller.policy.fair import share
from controller.policy.slaq import SlaqPolicy
from controller.policy.slaq_predict import (
    fit_loss,
    iteration_time,
    largest_change,
    linear,
    strawman,
    sublinear,
)
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, SpeedSample


def test_sublinear_fit_recovers_a_known_curve():
    ks = np.arange(0, 200, 10)
    truth = lambda k: 1 / (2e-4 * k * k + 0.01 * k + 1) + 0.5  # noqa: E731
    curve = fit_loss(list(zip(ks, truth(ks), strict=True)))
    assert curve.family == "sublinear"
    assert curve(300) == pytest.approx(truth(300), rel=1e-3)  # 0.5455, 100 iterations ahead


def test_linear_fit_recovers_a_known_curve():
    ks = np.arange(0, 200, 10)
    truth = lambda k: 0.97 ** (k - 5) + 0.2  # noqa: E731
    curve = fit_loss(list(zip(ks, truth(ks), strict=True)))
    assert curve.family == "linear"
    assert curve(300) == pytest.approx(truth(300), rel=1e-3)


def test_families_by_hand():
    assert sublinear(1.0, 1.0, 1.0, 2.0, 0.5) == pytest.approx(0.75)  # 1/(1+1+2) + 0.5
    assert linear(3.0, 0.5, 1.0, 0.1) == pytest.approx(0.35)  # 0.5^2 + 0.1


def test_short_histories_use_the_strawman():
    assert fit_loss([(0, 1.0), (10, 0.8)]) is None
    curve = strawman([(0, 1.0), (10, 0.8)])
    assert curve(20) == pytest.approx(0.6)  # the last drop, 0.02 an iteration, goes on


def test_normalisation_is_over_the_largest_change_per_iteration():
    assert largest_change([(0, 1.0), (10, 0.5), (30, 0.3), (40, 0.35)]) == pytest.approx(0.05)


def test_iteration_time_is_c_s_over_n():
    samples = (SpeedSample(2, 1, 1.0, 1.0, 3), SpeedSample(8, 2, 0.4, 0.4, 1))
    assert iteration_time(samples, 4) == pytest.approx(0.5)  # from 2 GPUs: 1.0 * 2 / 4
    assert iteration_time(samples, 8) == pytest.approx(0.4)
    assert iteration_time((), 4) is None


def job(job_id: str, history, t_iter: float, low=1, high=4, user="") -> JobView:
    spec = JobSpec(job_id, ("x",), 1, IterationStop(10**6), elastic=ElasticSpec(low, high))
    return JobView(
        job_id,
        user,
        spec,
        JobState.PENDING,
        0.0,
        0.0,
        0,
        0,
        iteration=history[-1][0],
        metric_history=tuple(history),
        speed_samples=(SpeedSample(1, 1, t_iter, t_iter, 1),),
    )


def line(rate: float):
    """A straight loss history falling ``rate`` an iteration (the strawman predicts it on)."""
    return [(0, 100.0), (10, 100.0 - 10 * rate)]


def test_algorithm_1_on_three_jobs():
    # Strawman curves keep each job's rate: normalised reduction per iteration is 1 for all
    # three, so a unit is worth the iterations it adds in the 10 s epoch: 10 / t_iter * (a+1)
    # - 10 / t_iter * a = 10 / t_iter (c*S/N: t(a) = t_iter / a). A: 10, B: 5, C: 2.5 a unit.
    jobs = [job("A", line(1.0), 1.0), job("B", line(2.0), 2.0), job("C", line(0.5), 4.0)]
    policy = SlaqPolicy()
    # 7 units: one each (3), then A to its maximum 4 (3 more), then B (1 more).
    assert policy.allocate(jobs, 7, 10.0) == {"A": 4, "B": 2, "C": 1}
    # A's weight below a third makes B's unit (5) worth more than A's (10 * 0.25)
    weighted = SlaqPolicy(weights={"A": 0.25})
    assert weighted.allocate(jobs, 5, 10.0) == {"A": 1, "B": 3, "C": 1}


def test_maxmin_gives_units_to_the_job_whose_loss_stays_highest():
    # B's loss falls slowest (0.1 an iteration at 1 s an iteration), so it stays worst
    jobs = [job("A", line(5.0), 1.0), job("B", line(0.1), 1.0)]
    assert SlaqPolicy(maxmin=True).allocate(jobs, 4, 10.0) == {"A": 1, "B": 3}


def test_a_job_without_a_prediction_gets_its_request_first():
    new = job("N", [(0, 1.0)], 1.0)
    assert SlaqPolicy()._value(new, 0, 10.0) == math.inf
    assert SlaqPolicy()._value(new, 1, 10.0) == 0.0


def test_fair_is_equal_and_work_conserving():
    jobs = [job("A", line(1), 1, high=2), job("B", line(1), 1, high=8), job("C", line(1), 1)]
    assert share(jobs, 10) == {"A": 2, "B": 4, "C": 4}  # A stops at 2; the rest split
    assert share(jobs, 2) == {"A": 1, "B": 1}  # C waits: not even its minimum is left


def running(job_id: str, history, t_iter: float, gpus: int, high=4) -> JobView:
    """An active job holding ``gpus`` GPUs of node n0 (its lease at a boundary)."""
    view = job(job_id, history, t_iter, high=high)
    return dataclasses.replace(
        view,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "n0", tuple(range(gpus))),),
    )


def test_the_resize_pause_keeps_allocations_that_moving_would_not_beat():
    # Normalised reduction 1 an iteration for both (strawman); epoch 60 s, pause 25 s.
    # gain(a) = train * a / t_iter, train = 60 on the held count, else 35.
    # A (1 s an iteration) holds 1, B (2 s) holds 3; 4 GPUs.
    jobs = [running("A", line(1.0), 1.0, 1), running("B", line(2.0), 2.0, 3)]
    # Without the pause Algorithm 1 moves both GPUs to the faster A: A 3 (180) + B 1 (30).
    assert SlaqPolicy(pause_s=0.0).allocate(jobs, 4, 60.0) == {"A": 3, "B": 1}
    # With it, from one unit each: A at 1 is worth max_k (35 (1+k) - 60) / k = 80/3 (k=3);
    # B at 1 (17.5) is worth (90 - 17.5) / 2 = 36.25 (k=2, back to its 3 unpaused), then
    # 90 - 35 = 55: B gets both. Moving would give A 105 + B 17.5 = 122.5 < 60 + 90 kept.
    assert SlaqPolicy(pause_s=25.0).allocate(jobs, 4, 60.0) == {"A": 1, "B": 3}


def test_a_grow_cut_short_of_its_gain_is_undone():
    # A holds 1 GPU (60 s: 60); paused, gain(a) = 25 a. One free GPU: its priority at 1 is
    # max(50 - 60, (75 - 60) / 2, (100 - 60) / 3) = 13.3 > 0, so it takes it, but A on 2 GPUs
    # (50) does not beat A on 1 (60): it keeps its 1 and the GPU stays free.
    jobs = [running("A", line(1.0), 1.0, 1)]
    assert SlaqPolicy(pause_s=35.0).allocate(jobs, 2, 60.0) == {"A": 1}
    assert SlaqPolicy(pause_s=0.0).allocate(jobs, 2, 60.0) == {"A": 2}
    measured = [dataclasses.replace(jobs[0], sr_overhead_s=20.0)]  # measured beats the default
    assert SlaqPolicy(pause_s=35.0).allocate(measured, 2, 60.0) == {"A": 2}  # 80 > 60
