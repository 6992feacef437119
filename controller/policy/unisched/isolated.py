"""The MILP solved in a child process, so that a solver crash or hang costs one cycle.

CBC is native code: on the MIX2 trace it once died of SIGSEGV inside its feasibility-pump
heuristic (``ClpSimplex::computePrimals``), which in-process takes the whole controller (or
simulation) down with it. :class:`IsolatedSolver` keeps one worker process, a fresh
interpreter running :mod:`~controller.policy.unisched.milp_worker` (``python -m``: no fork of
a threaded gRPC server, and unlike ``multiprocessing``'s spawn it never re-imports the caller's
``__main__``), that runs :func:`~controller.policy.unisched.milp.solve` on the pickled
:class:`~controller.policy.unisched.milp.MilpProblem`, over its stdin and a duplicate of its
stdout (the real stdout goes to stderr, so solver output cannot corrupt the channel).

When the worker dies, or has not answered ``grace_s`` after the solver's own time limit, it is
killed, the call returns None (the policy falls back to its cached solution, as for a solver
that found nothing in time, §III-C4) and the next call starts a fresh worker.

An exception raised by ``solve`` in the worker (a model bug: ``_check_cells``) is raised again
here, as it would be in-process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
import weakref
from multiprocessing.connection import Connection

from controller.policy.unisched.milp import MilpProblem, MilpSolution, _check_cells
from controller.policy.unisched.milp_scipy import MatrixAnswer, build, decode

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 60.0  # a fresh interpreter importing its solver
_PIPE_BYTES = 1 << 20  # Linux's default pipe-max-size


def _widen(pipe_fd: int) -> None:
    """Give a pipe to or from the worker ``_PIPE_BYTES`` (Linux): a large model's matrices
    (up to 0.7 MB pickled on full MIX2) then go in one write, not one wait per 64 KiB.
    Where the system refuses (another OS, or a lower ``/proc/sys/fs/pipe-max-size``), the
    default pipe stays."""
    resize = getattr(fcntl, "F_SETPIPE_SZ", None)
    if resize is None:
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe_fd, resize, _PIPE_BYTES)


def _stop(process: subprocess.Popen[bytes], *conns: Connection) -> None:
    for conn in conns:
        conn.close()
    if process.poll() is None:
        process.kill()
    try:
        process.wait(timeout=5.0)
    except subprocess.TimeoutExpired:  # not worth blocking on; subprocess reaps it later
        log.warning("MILP worker %d did not exit within 5 s of SIGKILL", process.pid)


class WorkerFailed(RuntimeError):
    """The worker could not be started."""


class IsolatedSolver:
    """``solve`` with the same contract as :func:`milp.solve`, in a child process."""

    def __init__(self, grace_s: float = 10.0) -> None:
        if not grace_s > 0:
            raise ValueError(f"grace_s must be positive, got {grace_s}")
        self._grace_s = grace_s
        self._process: subprocess.Popen[bytes] | None = None
        self._requests: Connection | None = None
        self._answers: Connection | None = None
        self._finalizer: weakref.finalize | None = None
        self.failures = 0  # worker deaths and time-outs so far

    def solve(
        self, problem: MilpProblem, solver: str = "cbc", time_limit_s: float = 1.0
    ) -> MilpSolution | None:
        """The solver's answer; None when it found none or the worker died or hung.

        For ``solver="scipy"`` the model is built here and only its matrices travel (a few
        array blobs; pickling the problem's dataclasses, and above all unpickling them, cost
        about 20 ms a solve on MIX2); the worker runs HiGHS and sends the values back.
        """
        if solver != "scipy" or not problem.jobs:
            answer = self._ask(problem, solver, time_limit_s)
            assert answer is None or isinstance(answer, MilpSolution)
            return answer
        started = time.perf_counter()
        matrices, columns = build(problem)
        build_s = time.perf_counter() - started
        values = self._ask(matrices, solver, time_limit_s)
        if values is None:
            return None
        assert isinstance(values, MatrixAnswer)
        solution = decode(columns, matrices, values, build_s)
        if solution is not None:
            _check_cells(problem, solution)
        return solution

    def _ask(self, request: object, solver: str, time_limit_s: float) -> object:
        """The worker's answer to one request; None when it died or hung."""
        requests, answers = self._channel()
        try:
            requests.send((request, solver, time_limit_s))
            if not answers.poll(time_limit_s + self._grace_s):
                return self._failed(f"no answer in {time_limit_s + self._grace_s:.1f} s")
            kind, value = answers.recv()
        except (EOFError, OSError) as exc:
            return self._failed(f"worker died ({self._exit_detail() or repr(exc)})")
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        return value

    def close(self) -> None:
        """Stop the worker (a later ``solve`` starts another)."""
        if self._finalizer is not None:
            self._finalizer()
        self._process = self._requests = self._answers = self._finalizer = None

    def _channel(self) -> tuple[Connection, Connection]:
        if (
            self._process is not None
            and self._process.poll() is None
            and self._requests is not None
            and self._answers is not None
        ):
            return self._requests, self._answers
        self.close()
        process = subprocess.Popen(
            [sys.executable, "-m", "controller.policy.unisched.milp_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert process.stdin is not None and process.stdout is not None
        _widen(process.stdin.fileno())
        _widen(process.stdout.fileno())  # (the values back: 8 bytes a column)
        requests = Connection(os.dup(process.stdin.fileno()), readable=False)
        answers = Connection(os.dup(process.stdout.fileno()), writable=False)
        process.stdin.close()
        process.stdout.close()
        self._finalizer = weakref.finalize(self, _stop, process, requests, answers)
        self._process, self._requests, self._answers = process, requests, answers
        try:
            ready = answers.poll(_START_TIMEOUT_S) and answers.recv()[0] == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            self.close()
            raise WorkerFailed("the MILP worker process did not start")
        return requests, answers

    def _exit_detail(self) -> str:
        process = self._process
        if process is None:
            return ""
        try:
            code = process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return ""
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def _failed(self, why: str) -> None:
        self.failures += 1
        log.warning("MILP worker failed: %s; using the cached solution this cycle", why)
        self.close()
        return None
