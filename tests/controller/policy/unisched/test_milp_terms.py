"""What the matrices leave out. Future terms whose capacity row cannot bind are fixed at 1
(``milp.binding_terms``): which terms those are, by hand, and the same optimum as the full
model on random problems. A job of one allocation is one column."""

from __future__ import annotations

import pytest

from controller.policy.unisched import milp_mip, milp_scipy
from controller.policy.unisched.config import SOLVERS
from controller.policy.unisched.milp import (
    MilpJob,
    MilpProblem,
    Option,
    binding_terms,
    feasible_per_job,
    needs_terms,
    solve,
    term_rows,
)
from tests.controller.policy.unisched.test_milp import random_problem


def _slo(job_id: str, gpus: int, need: int, q: int) -> MilpJob:
    cells = (
        (0, 0, 0, 1) if gpus == 8 else tuple(int(lv == gpus.bit_length() - 1) for lv in range(4))
    )
    return MilpJob(job_id, gpus, (Option(cells, (need,)),), 0.0, ((q, 100.0),), slo=True)


def _binding(problem: MilpProblem) -> frozenset[int]:
    return binding_terms(problem, feasible_per_job(problem))


def test_a_term_binds_only_when_its_jobs_ask_for_more_than_it_has():
    # a (8 GPUs, Q = 3) may hold terms 1 and 2, b (4 GPUs, Q = 2) term 1 only: term 1 asks
    # for 12 GPUs, term 2 for 8. Horizon 4, 12 GPUs.
    jobs = (_slo("a", 8, 2, 3), _slo("b", 4, 1, 2))
    free = (0, 0, 0, 1)
    assert _binding(MilpProblem(jobs, free, total_gpus=12, horizon=4)) == frozenset()
    # 4 GPUs held in term 2 leave exactly 8: still cannot bind; 1 GPU held in term 1 leaves 11
    held = MilpProblem(jobs, free, total_gpus=12, horizon=4, reserved=(1.0, 4.0, 0.0))
    assert _binding(held) == {1}
    assert _binding(MilpProblem(jobs, free, total_gpus=12, horizon=4, reserved=(0, 5.0, 0))) == {2}
    # a job past every deadline, or a best-effort one, asks for no future term
    late = (_slo("a", 8, 4, 3), MilpJob("be", 8, (Option(free, (), 1.0),)))
    assert _binding(MilpProblem(late, free, total_gpus=1, horizon=4)) == frozenset()


def test_the_matrices_leave_out_terms_that_cannot_bind():
    jobs = (_slo("a", 8, 2, 3), _slo("b", 4, 1, 2))
    roomy = MilpProblem(jobs, (0, 0, 0, 1), total_gpus=12, horizon=4)
    tight = MilpProblem(jobs, (0, 0, 0, 1), total_gpus=11, horizon=4)
    # per job x[0] (standing for y: one option); no w (one option). Roomy: no term binds, so
    # with terms 1 and 2 held no deadline row can fail and no s is written (each deadline a
    # constant 100). Tight: term 1 of both jobs and their s (Eq. 6 over one s is its bound)
    m, columns = milp_scipy.build(roomy)
    assert m.c.size == 2 and m.offset == 200.0 and columns.met == {"a": 0, "b": 0}
    m, columns = milp_scipy.build(tight)
    assert m.c.size == 6 and m.offset == 0.0 and columns.met == {}


def _random_problem(seed: int) -> MilpProblem:
    return random_problem(seed, jobs=14, slo_share=0.7, horizon=5, varied=True)


@pytest.mark.parametrize("restored", ["terms", "terms and rows"])
@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(10))
def test_the_same_optimum_as_the_full_model(restored, solver, seed, monkeypatch):
    """Every future term put back (and every deadline row, with "rows"): the same optimum."""
    problem = _random_problem(seed)
    reduced = solve(problem, solver)
    every = frozenset(range(1, problem.horizon))
    for module in (milp_scipy, milp_mip):
        monkeypatch.setattr(module, "binding_terms", lambda *_: every)
        if restored == "terms and rows":
            monkeypatch.setattr(module, "term_rows", lambda job, feasible, *_: list(feasible))
    full = solve(problem, solver)
    assert reduced is not None and full is not None
    # HiGHS through scipy closes the gap; python-mip's backends stop within their default
    # relative gap (1e-4), and which solution each finds may depend on the machine's timing
    gap = 0.0 if solver == "scipy" else 1e-4
    assert reduced.objective == pytest.approx(full.objective, rel=gap, abs=1e-6)


def test_the_random_problems_have_terms_both_ways():
    """The seeds above are worth running: some terms bind and some do not."""
    bound = [len(_binding(_random_problem(seed))) for seed in range(10)]
    assert 0 in bound and 4 in bound and any(0 < n < 4 for n in bound)


def test_a_job_of_one_option_is_one_column():
    """Eq. 13 makes y[0] = x[0] for a job of one allocation: the matrices give it one column
    carrying both rewards and no Eq. 13 row (the model HiGHS sees without presolve)."""
    one = MilpJob("one", 1, (Option((1, 0, 0, 0), (), 0.3),), now_reward=0.2)
    two = MilpJob("two", 2, (Option((0, 1, 0, 0), (), 0.4), Option((2, 0, 0, 0), (), 0.1)))
    problem = MilpProblem((one, two), free_cells=(1, 1, 0, 0), total_gpus=4, horizon=2)
    m, columns = milp_scipy.build(problem)
    # one: x[0] (0.2 + 0.3); two: x[0], y[0], y[1]
    assert m.c.tolist() == pytest.approx([0.5, 0.0, 0.4, 0.1])
    assert columns.run == {"one": 0, "two": 1} and list(columns.ys["one"]) == [0]
    # rows: two's Eq. 13; Eq. 14 at level 0 (1 + 2 + 2 GPUs of cells against 1 + 2 free)
    # and at level 1 (two's 2-GPU cell against the one free); levels 2-3 ask for nothing
    assert m.a.shape == (3, 4)
    assert m.a.toarray()[1].tolist() == [1.0, 0.0, 2.0, 2.0] and m.hi[1] == 3.0
    got = solve(problem, "scipy")
    assert got is not None and got.run_now == {"one": 0, "two": 0}
    assert got.objective == pytest.approx(0.9)


def test_a_deadline_row_is_written_only_when_it_can_fail():
    # leases needed on the two allocations: 3 and 5; horizon 4
    job = MilpJob("a", 2, (Option((0, 1), (3,)), Option((2, 0), (5,))), 0.0, ((8, 1.0),), True)
    assert not needs_terms(job, 0, 9, horizon=4)  # 5 terms beyond the horizon: the slowest fits
    assert needs_terms(job, 0, 8, horizon=4)  # 4 beyond: the slower allocation could miss it
    assert not needs_terms(job, 0, 8, horizon=4, fixed=1)  # one term before it held at 1
    # terms 1-3 come before a deadline 8 terms away: with term 2 the only binding one, the
    # two others count as held
    assert term_rows(job, [(0, 8, 1.0)], 4, frozenset({2})) == []
    assert term_rows(job, [(0, 8, 1.0)], 4, frozenset({1, 2, 3})) == [(0, 8, 1.0)]


def test_a_far_deadline_needs_no_terms():
    # "far" needs 2 terms with 16 beyond the horizon; "near" needs 2 of the 3 before its
    # deadline, and its 8 GPUs fit only 7/8 of each future term (7 GPUs): it must run now
    jobs = (_slo("far", 8, 2, 20), _slo("near", 8, 2, 3))
    problem = MilpProblem(jobs, (0, 0, 0, 1), total_gpus=7, horizon=4)
    assert _binding(problem) == {1, 2}  # "far" holds no term, so term 3 cannot bind
    m, _ = milp_scipy.build(problem)
    # far: x[0] (no row: its deadline is the constant 100); near: x[0], x[1], x[2], s. Rows:
    # near's Eq. 7, Eq. 14 at four levels, the capacity of terms 1 and 2 (Eq. 6 over one s is
    # its bound)
    assert m.c.size == 5 and m.a.shape[0] == 7 and m.offset == 100.0
    for solver in SOLVERS:
        got = solve(problem, solver)
        assert got is not None and got.run_now == {"near": 0}
        assert got.deadline == {"far": 0, "near": 0} and got.objective == pytest.approx(200.0)


def test_the_random_problems_have_rows_both_ways():
    """The seeds above are worth running: some deadline rows are left out and some not."""
    kept = left = 0
    for seed in range(10):
        problem = _random_problem(seed)
        for job, feasible in zip(problem.jobs, feasible_per_job(problem), strict=True):
            rows = term_rows(job, feasible, problem.horizon, frozenset())
            kept += len(rows)
            left += len(feasible) - len(rows)
    assert kept > 0 and left > 0
