"""Pollux's goodput model (controller/policy/pollux_goodput.py) against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from controller.policy.pollux_goodput import (
    Limits,
    Params,
    Point,
    best_batch,
    efficiency,
    fit,
    goodput_table,
    prior,
)


def test_efficiency_is_relative_to_the_initial_batch():
    # (phi + M0) / (phi + M): phi 100, M0 100 -> 1 at 100, 200/300 at 200, 200/500 at 400
    assert efficiency(100, 100, 100.0) == pytest.approx(1.0)
    assert efficiency(200, 100, 100.0) == pytest.approx(2 / 3)
    assert efficiency(np.array([400.0]), 100, 100.0)[0] == pytest.approx(0.4)
    assert efficiency(4000, 100, float("inf")) == pytest.approx(1.0)


def test_step_time_by_hand():
    p = Params(0.1, 0.01, 0.2, 0.05, 0.5, 0.1, 1.0)
    # one GPU: no sync; T_grad = 0.1 + 0.01 * 32 = 0.42
    assert p.step_time(np.array([1]), np.array([False]), np.array([32]))[0] == pytest.approx(0.42)
    # 4 GPUs on a node, gamma 1: 0.42 + 0.2 + 0.05 * 2 = 0.72
    assert p.step_time(np.array([4]), np.array([False]), np.array([32]))[0] == pytest.approx(0.72)
    # 8 over nodes, gamma 2: sqrt(0.42^2 + (0.5 + 0.1 * 6)^2)
    q = Params(0.1, 0.01, 0.2, 0.05, 0.5, 0.1, 2.0)
    want = (0.42**2 + 1.1**2) ** 0.5
    assert q.step_time(np.array([8]), np.array([True]), np.array([32]))[0] == pytest.approx(want)


def test_prior_assumes_perfect_scaling_through_the_measured_point():
    p = prior([Point(2, False, 50.0, 1.0)])
    assert (p.a_grad, p.b_grad, p.a_local, p.b_node) == (0.0, pytest.approx(0.02), 0.0, 0.0)
    assert fit([Point(2, False, 50.0, 1.0)]) == p  # one point: the prior, no fit


def test_fit_recovers_known_parameters():
    truth = Params(0.05, 0.004, 0.1, 0.02, 0.3, 0.04, 1.8)
    configs = [(1, False), (2, False), (4, False), (8, True), (12, True), (16, True)]
    points = []
    for k, multi in configs:
        for m in (16.0, 64.0, 128.0):
            t = float(truth.step_time(np.array([k]), np.array([multi]), np.array([m]))[0])
            points.append(Point(k, multi, m, t))
    got = fit(points)
    k = np.array([1, 3, 4, 6, 10, 20])
    multi = np.array([False, False, False, True, True, True])
    m = np.array([32.0, 100.0, 8.0, 50.0, 200.0, 64.0])
    np.testing.assert_allclose(got.step_time(k, multi, m), truth.step_time(k, multi, m), rtol=0.02)
    assert got.a_grad == pytest.approx(0.05, rel=0.05)
    assert got.b_grad == pytest.approx(0.004, rel=0.05)


def test_fit_without_multi_node_points_takes_local_sync_for_nodes():
    truth = Params(0.05, 0.004, 0.1, 0.02)
    points = [
        Point(k, False, m, float(truth.step_time(np.array([k]), np.array([False]), [m])[0]))
        for k in (1, 2, 4)
        for m in (16.0, 64.0)
    ]
    got = fit(points)
    assert (got.a_node, got.b_node) == (got.a_local, got.b_local)
    assert got.a_local == pytest.approx(0.1, rel=0.05)


def test_best_batch_by_hand():
    # T = 0.1 + 0.01 m on one GPU; goodput(M) = M / (0.1 + 0.01 M) * (100 + 100) / (100 + M)
    # d/dM: maximum where M^2 = 0.1 * 100 / 0.01 = 1000, M ~ 31.6, below M0 = 100: M0 wins
    p = Params(0.1, 0.01)
    limits = Limits(100, 1000, 100, 100.0)
    m, good = best_batch(p, 1, False, limits)
    assert m == 100
    assert good == pytest.approx(100 / 1.1)
    # a large fixed cost per step: goodput = M / (10 + 0.01 M) * 200 / (100 + M), maximum at
    # M = sqrt(10 * 100 / 0.01) = 316.2 (grid: within 10 %)
    m, good = best_batch(Params(10.0, 0.01), 1, False, limits)
    assert 290 <= m <= 345
    assert good == pytest.approx(316.2 / (10 + 3.162) * 200 / 416.2, rel=0.01)


def test_batch_limits_hold_and_no_gpus_is_no_goodput():
    p = Params(10.0, 0.01)
    good, batch = goodput_table(
        p, np.array([0, 1, 64]), np.array([False] * 3), Limits(8, 16, 8, 1e9)
    )
    assert good[0] == 0.0 and batch[0] == 0
    assert batch[1] == 16  # no efficiency loss: the largest allowed
    assert batch[2] == 64  # at least one sample per GPU
