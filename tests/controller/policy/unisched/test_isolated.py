"""The MILP in a worker process: same answers, and a crash or hang costs one call.

The worker is made to die or hang mid-request by requests that do so when the worker unpickles
them (``__reduce__``), so each failure happens exactly there, with no timing involved.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from controller.policy.unisched.config import SOLVERS
from controller.policy.unisched.isolated import IsolatedSolver
from controller.policy.unisched.milp import MilpJob, MilpProblem, Option, solve

# Two 4-GPU SLO jobs (rewards 100, 80; each needs both terms before its deadline) and a
# best-effort job (0.5 now) on two 4-GPU cells: the SLO jobs run, objective 100 + 80 + 0.2.
PROBLEM = MilpProblem(
    jobs=(
        MilpJob("a", 4, (Option((0, 0, 1), (2,)),), 0.1, ((2, 100.0),), slo=True),
        MilpJob("b", 4, (Option((0, 0, 1), (2,)),), 0.1, ((2, 80.0),), slo=True),
        MilpJob("c", 4, (Option((0, 0, 1), (), 0.5),)),
    ),
    free_cells=(0, 0, 2),
    total_gpus=8,
    horizon=4,
)


class _Exits:
    """Unpickled in the worker, it ends the worker's process at once (a crash)."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (os._exit, (3,))


class _Hangs:
    """Unpickled in the worker, it keeps the worker busy for an hour (a hang: longer than any
    test may run, so a call that waited for it would never return)."""

    def __reduce__(self) -> tuple[object, tuple[float]]:
        return (time.sleep, (3600.0,))


# How long past its limit a worker may take to answer where a test needs the answer: a fresh
# worker first starts an interpreter and imports the solvers, which a loaded machine can take
# seconds to do (at 1 s, a run beside other work once gave up on a healthy worker).
ANSWER_GRACE_S = 120.0


@pytest.fixture
def worker():
    solver = IsolatedSolver(grace_s=ANSWER_GRACE_S)
    yield solver
    solver.close()


@pytest.mark.parametrize("backend", SOLVERS)
def test_backends_agree_in_process_and_in_the_worker(worker, backend):
    here = solve(PROBLEM, backend)
    there = worker.solve(PROBLEM, backend)
    assert here is not None and there is not None
    # both SLO jobs need both terms before their deadline: the BE job must wait
    assert set(there.run_now) == set(here.run_now) == {"a", "b"}
    assert there.objective == pytest.approx(180.2) == here.objective
    assert worker.failures == 0


def test_scipy_sends_the_worker_matrices_and_reads_the_answer_back(worker, monkeypatch):
    import controller.policy.unisched.milp_worker as worker_module

    sent: list[object] = []
    ask = worker._ask

    def spy(request, solver, limit):
        sent.append(request)
        return ask(request, solver, limit)

    monkeypatch.setattr(worker, "_ask", spy)
    first = worker.solve(replace(PROBLEM, first_feasible=True), "scipy")
    assert first is not None and first.objective <= 180.2 + 1e-9
    assert [type(r) for r in sent] == [worker_module.Matrices]
    assert sent[0].first_feasible  # type: ignore[attr-defined]


def test_a_worker_that_dies_mid_request_costs_that_call_only(worker, caplog):
    assert worker.solve(PROBLEM) is not None
    assert worker.solve(_Exits()) is None  # type: ignore[arg-type]
    assert worker.failures == 1
    assert "worker died (exit code 3)" in caplog.text
    again = worker.solve(PROBLEM)  # a fresh worker
    assert again is not None and set(again.run_now) == {"a", "b"}


def test_a_worker_that_hangs_is_killed_after_the_limit_and_grace(caplog):
    solver = IsolatedSolver(grace_s=1.0)
    try:
        # Returning at all is the proof: the request sleeps for longer than the test may run.
        assert solver.solve(_Hangs(), time_limit_s=0.5) is None  # type: ignore[arg-type]
        assert solver.failures == 1
        assert "no answer" in caplog.text
        # a fresh worker answers (given the time a fresh worker may need to start)
        assert solver.solve(PROBLEM, time_limit_s=ANSWER_GRACE_S) is not None
    finally:
        solver.close()


def test_a_model_error_in_the_worker_is_raised_here(worker):
    with pytest.raises(AttributeError):
        worker.solve("not a problem")  # type: ignore[arg-type]
    assert worker.failures == 0
    assert worker.solve(PROBLEM) is not None  # the worker lives on


def test_grace_must_be_positive():
    with pytest.raises(ValueError, match="grace_s"):
        IsolatedSolver(grace_s=0.0)
