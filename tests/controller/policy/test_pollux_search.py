"""PolluxSched's genetic search (controller/policy/pollux_search.py): speedups, the p = -1
fitness, the realloc factor and feasibility after repair, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from controller.policy.pollux_search import (
    FLOOR,
    Problem,
    evolve,
    fitness,
    power_mean,
    realloc_factor,
    repair,
    speedups,
)


def _problem(jobs: int = 2, nodes: int = 2, high: int = 8, realloc: float = 1.0) -> Problem:
    """Goodput k on k GPUs on one node, 0.5 k over nodes; the fair share 2 GPUs (goodput 2)."""
    top = high
    good = np.zeros((jobs, top + 1, 2))
    good[:, :, 0] = np.arange(top + 1)
    good[:, :, 1] = 0.5 * np.arange(top + 1)
    return Problem(
        capacity=np.full(nodes, 4),
        low=np.ones(jobs, dtype=int),
        high=np.full(jobs, high),
        want=np.full(jobs, 2),
        goodput=good,
        fair=np.full(jobs, 2.0),
        current=np.zeros((jobs, nodes), dtype=int),
        realloc=np.full(jobs, realloc),
    )


def test_power_mean_minus_one_is_the_harmonic_mean():
    assert power_mean(np.array([1.0, 4.0])) == pytest.approx(2 / (1 + 0.25))
    assert power_mean(np.array([2.0, 0.0])) == 0.0


def test_speedups_and_fitness_by_hand():
    p = _problem()
    a = np.array([[4, 0], [0, 2]])  # job 0: 4 on one node -> 4/2; job 1: 2 -> 2/2
    b = np.array([[2, 2], [0, 2]])  # job 0 over two nodes: 0.5 * 4 / 2 = 1
    s = speedups(p, np.stack([a, b]))
    np.testing.assert_allclose(s, [[2.0, 1.0], [1.0, 1.0]])
    f = fitness(p, np.stack([a, b]))
    hm_a, hm_b = 2 / (0.5 + 1.0), 1.0  # p = -1 means 4/3 and 1
    np.testing.assert_allclose(f, [2 + hm_a / (1 + hm_a), 2 + hm_b / (1 + hm_b)])
    # a job left out: the paper's mean is 0; ours ranks by the count first
    c = np.array([[4, 4], [0, 0]])
    assert fitness(p, c[None])[0] < f.min()
    assert fitness(p, c[None])[0] == pytest.approx(1 + (0.5 * 8 / 2) / (1 + 2))


def test_realloc_factor_by_hand_and_applied_to_moved_jobs_only():
    # (T - R delta) / (T + delta): T 1000 s, R 2, delta 25 -> 950 / 1025
    assert realloc_factor(1000.0, 2, 25.0) == pytest.approx(950 / 1025)
    assert realloc_factor(10.0, 1, 25.0) == 0.0  # clipped at 0
    p = _problem(realloc=0.5)
    p = Problem(**{**p.__dict__, "current": np.array([[2, 0], [0, 0]])})
    same = np.array([[2, 0], [0, 2]])  # job 0 kept, job 1 was not running: no factor
    moved = np.array([[4, 0], [0, 2]])
    np.testing.assert_allclose(speedups(p, np.stack([same, moved])), [[1.0, 1.0], [1.0, 1.0]])
    # a factor of 0 counts as the floor in the mean
    q = Problem(**{**p.__dict__, "realloc": np.zeros(2)})
    f = fitness(q, moved[None])[0]
    hm = 2 / (1 / FLOOR + 1.0)
    assert f == pytest.approx(2 + hm / (1 + hm))


def test_repair_clips_capacity_bounds_and_the_node_rule():
    rng = np.random.default_rng(0)
    p = _problem(jobs=3, nodes=3, high=6)
    p = Problem(**{**p.__dict__, "low": np.array([1, 3, 1])})
    a = np.array([[3, 3, 0], [0, 2, 3], [9, 0, 0]])
    repair(p, a, rng)
    assert (a.sum(axis=0) <= 4).all()
    spread = np.count_nonzero(a, axis=1) > 1
    assert (np.count_nonzero(a[spread], axis=0) <= 1).all()  # no node shared by two spread jobs
    k = a.sum(axis=1)
    assert ((k == 0) | ((k >= p.low) & (k <= p.high))).all()


def test_evolve_keeps_every_allocation_feasible_and_finds_a_full_one():
    rng = np.random.default_rng(3)
    p = _problem(jobs=5, nodes=4, high=8)
    pop, best = evolve(p, [], size=12, generations=15, rate=0.2, rng=rng)
    for a in [*pop, best]:
        assert (a.sum(axis=0) <= p.capacity).all()
        spread = np.count_nonzero(a, axis=1) > 1
        assert (np.count_nonzero(a[spread], axis=0) <= 1).all()
        k = a.sum(axis=1)
        assert ((k == 0) | ((k >= p.low) & (k <= p.high))).all()
    assert (best.sum(axis=1) > 0).all()  # 5 jobs, 16 GPUs: every job runs
    assert best.sum() >= 14  # and the GPUs are used (goodput grows with k)
