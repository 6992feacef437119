"""The MILP (Eqs. 4-14) on hand-computed cases, the same for every backend in ``SOLVERS``.

Cells are per level on 8-GPU nodes' levels 0..3 unless a case says otherwise: ``(0, 2, 0)`` is
two free 2-GPU cells. A job's ``Option(cells, leases, reward)`` lists, per deadline, the lease
terms it needs on that allocation; ``deadlines`` are ``(Q_f, V_f)``: terms until deadline f
and its reward.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from controller.policy.unisched.config import SOLVERS
from controller.policy.unisched.milp import MilpJob, MilpProblem, Option, solve

pytestmark = pytest.mark.parametrize("solver", SOLVERS)


def _slo(job_id: str, gpus: int, options: tuple[Option, ...], *deadlines: tuple[int, float]):
    return MilpJob(job_id, gpus, options, 0.0, tuple(deadlines), slo=True)


def test_eq13_one_allocation_and_eq14_the_one_that_fits(solver):
    # A 4-GPU job on two free 2-GPU cells: its round-up cell (0, 0, 1) is worth more but
    # breaks Eq. 14 (no 4-GPU cell), so it runs split, on (0, 2, 0): 0.3 + 0.4.
    job = MilpJob("j", 4, (Option((0, 0, 1), (), 0.5), Option((0, 2, 0), (), 0.4)), 0.3)
    got = solve(MilpProblem((job,), free_cells=(0, 2, 0), total_gpus=4, horizon=2), solver)
    assert got is not None
    assert got.run_now == {"j": 1}
    assert got.objective == pytest.approx(0.7)


def test_eq14_counts_large_free_cells_for_small_requests(solver):
    # One free 4-GPU cell and one 1-GPU cell: two 2-GPU jobs fit in the 4-GPU cell (level 1:
    # 2 requested <= 2 * 1 free), a third 1-GPU job in the single one; a fourth 1-GPU job does
    # not (level 0: 2 * 2 + 2 = 6 requested > 4 + 1 free). Best: the two 2-GPU jobs (0.4
    # each) and one 1-GPU job (0.3 over 0.1).
    jobs = (
        MilpJob("a", 2, (Option((0, 1, 0), (), 0.4),)),
        MilpJob("b", 2, (Option((0, 1, 0), (), 0.4),)),
        MilpJob("c", 1, (Option((1, 0, 0), (), 0.3),)),
        MilpJob("d", 1, (Option((1, 0, 0), (), 0.1),)),
    )
    got = solve(MilpProblem(jobs, free_cells=(1, 0, 1), total_gpus=5, horizon=2), solver)
    assert got is not None
    assert got.run_now == {"a": 0, "b": 0, "c": 0}
    assert got.objective == pytest.approx(1.1)


def test_eq7_a_deadline_counts_when_enough_terms_are_held(solver):
    # Two 4-GPU SLO jobs, each needs both terms before its deadline (Q = 2), on two 4-GPU
    # cells; the best-effort job (0.5) must wait: 100 + 80 + 0.1 + 0.1.
    jobs = (
        MilpJob("a", 4, (Option((0, 0, 1), (2,)),), 0.1, ((2, 100.0),), slo=True),
        MilpJob("b", 4, (Option((0, 0, 1), (2,)),), 0.1, ((2, 80.0),), slo=True),
        MilpJob("c", 4, (Option((0, 0, 1), (), 0.5),)),
    )
    got = solve(MilpProblem(jobs, free_cells=(0, 0, 2), total_gpus=8, horizon=4), solver)
    assert got is not None
    assert got.run_now == {"a": 0, "b": 0}
    assert got.deadline == {"a": 0, "b": 0}
    assert got.objective == pytest.approx(180.2)


@pytest.mark.parametrize(("q", "met"), [(2, False), (3, True)])
def test_eq12_a_slower_allocation_needs_more_terms(solver, q, met):
    # Only the split allocation fits now, and on it the job needs 3 terms instead of 2: with
    # Q = 2 it cannot meet its deadline whatever it does now (it still runs, for its 0.2),
    # with Q = 3 it meets it by running now and in both later terms.
    options = (Option((0, 0, 1), (2,)), Option((0, 2, 0), (3,), 0.2))
    job = _slo("j", 4, options, (q, 100.0))
    got = solve(MilpProblem((job,), free_cells=(0, 2, 0), total_gpus=8, horizon=4), solver)
    assert got is not None
    assert got.run_now == {"j": 1}
    assert got.deadline == ({"j": 0} if met else {})
    assert got.objective == pytest.approx(100.2 if met else 0.2)


def test_eq6_at_most_one_deadline_per_job(solver):
    # A soft-SLO job that can meet both its deadlines earns only the first one's reward.
    job = _slo("j", 8, (Option((0, 0, 0, 1), (1, 1)),), (2, 100.0), (4, 50.0))
    got = solve(MilpProblem((job,), free_cells=(0, 0, 0, 1), total_gpus=8, horizon=4), solver)
    assert got is not None
    assert got.deadline == {"j": 0}
    assert got.objective == pytest.approx(100.0)


def test_future_terms_fit_in_what_unexpired_leases_leave(solver):
    # Two 8-GPU SLO jobs that need 2 terms before Q = 2 on one 8-GPU node: one of them (the
    # richer) makes it. With the next term reserved in full by a running SLO job, neither can.
    jobs = (
        _slo("a", 8, (Option((0, 0, 0, 1), (2,)),), (2, 100.0)),
        _slo("b", 8, (Option((0, 0, 0, 1), (2,)),), (2, 90.0)),
    )
    problem = MilpProblem(jobs, free_cells=(0, 0, 0, 1), total_gpus=8, horizon=3)
    got = solve(problem, solver)
    assert got is not None
    assert got.deadline == {"a": 0} and got.objective == pytest.approx(100.0)
    full = solve(replace(problem, reserved=(8.0, 0.0)), solver)
    assert full is not None
    assert full.deadline == {} and full.objective == pytest.approx(0.0)


def test_terms_beyond_the_horizon_count_as_available(solver):
    # Horizon 2, deadline in 5 terms, 4 terms needed: term 1 plus the 3 beyond the horizon
    # suffice, so the deadline counts without running now (no cells are free now).
    job = _slo("j", 8, (Option((0, 0, 0, 1), (4,)),), (5, 100.0))
    got = solve(MilpProblem((job,), free_cells=(0, 0, 0, 0), total_gpus=8, horizon=2), solver)
    assert got is not None
    assert got.run_now == {} and got.deadline == {"j": 0}
    assert got.objective == pytest.approx(100.0)


def test_the_feasible_ablation_stops_at_a_valid_solution(solver):
    jobs = tuple(
        MilpJob(f"j{i}", 2, (Option((0, 1, 0), (), 0.1 * (i + 1)), Option((2, 0, 0), (), 0.0)))
        for i in range(6)
    )
    problem = MilpProblem(jobs, free_cells=(1, 2, 0), total_gpus=5, horizon=2)
    best = solve(problem, solver)
    first = solve(replace(problem, first_feasible=True), solver)
    assert best is not None and first is not None
    # the two 2-GPU cells to the two richest jobs, no room for a split one
    assert best.run_now == {"j4": 0, "j5": 0}
    assert best.objective == pytest.approx(1.1)
    assert first.objective <= best.objective + 1e-9  # and solve() checked its cells (Eq. 14)


def test_no_jobs(solver):
    got = solve(MilpProblem((), free_cells=(0, 0, 1), total_gpus=4, horizon=2), solver)
    assert got is not None and got.run_now == {} and got.objective == 0.0


def random_problem(
    seed: int, jobs: int = 12, slo_share: float = 0.5, horizon: int = 4, varied: bool = False
) -> MilpProblem:
    """Random jobs of 1-8 GPUs, a share of them SLO jobs with two deadlines. ``varied``: the
    free cells, the cluster's size and what unexpired leases hold vary too (more often than
    not with some future terms whose row binds and some whose row cannot)."""
    rng = random.Random(seed)
    made = []
    for i in range(jobs):
        gpus = rng.choice((1, 2, 4, 8))
        cells = (
            [(0, 0, 0, 1)]
            if gpus == 8
            else [tuple(int(lv == gpus.bit_length() - 1) for lv in range(4))]
        )
        if gpus in (2, 4):
            cells.append((gpus, 0, 0, 0))
        if rng.random() < slo_share:
            base = rng.randint(1, 4)
            deadlines = ((base + rng.randint(0, 3), 100.0), (base + 5, 50.0))
            options = tuple(Option(c, (base + p, base + p), 0.01 * p) for p, c in enumerate(cells))
            made.append(MilpJob(f"s{i}", gpus, options, 0.05, deadlines, slo=True))
        else:
            options = tuple(Option(c, (), rng.uniform(0.1, 0.5)) for c in cells)
            made.append(MilpJob(f"b{i}", gpus, options))
    held = 24 if varied else 8
    reserved = tuple(float(rng.randint(0, held)) for _ in range(horizon - 1))
    free, total = (1, 1, 1, 1), 24
    if varied:
        free = tuple(rng.randint(0, 2) for _ in range(4))
        total = rng.choice((24, 40))
    return MilpProblem(tuple(made), free, total_gpus=total, horizon=horizon, reserved=reserved)


@pytest.mark.parametrize("seed", range(8))
def test_every_backend_finds_the_same_optimum(solver, seed):
    problem = random_problem(seed)
    reference = solve(problem, "cbc")
    got = solve(problem, solver)
    assert reference is not None and got is not None
    assert got.objective == pytest.approx(reference.objective, rel=1e-3)
