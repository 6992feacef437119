"""Future terms whose capacity row cannot bind are fixed at 1 (``milp.binding_terms``): which
terms those are, by hand, and the same optimum as the full model on random problems."""

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
    solve,
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
    # per job x[0], y, s; a's w none (one option); terms: none, or term 1 of both jobs
    assert milp_scipy.build(roomy)[0].c.size == 6
    assert milp_scipy.build(tight)[0].c.size == 8


def _random_problem(seed: int) -> MilpProblem:
    return random_problem(seed, jobs=14, slo_share=0.7, horizon=5, varied=True)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(10))
def test_the_same_optimum_as_the_model_with_every_term(solver, seed, monkeypatch):
    problem = _random_problem(seed)
    reduced = solve(problem, solver)
    every = frozenset(range(1, problem.horizon))
    for module in (milp_scipy, milp_mip):
        monkeypatch.setattr(module, "binding_terms", lambda *_: every)
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
