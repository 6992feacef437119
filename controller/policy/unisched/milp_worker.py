"""The MILP worker process of :mod:`controller.policy.unisched.isolated`.

Run as ``python -m controller.policy.unisched.milp_worker``: it reads pickled
``(problem, solver, time_limit_s)`` requests on stdin, where ``problem`` is a ``MilpProblem``
or, for ``solver="scipy"``, the ``Matrices`` its parent built, and writes ("ok", solution or
``MatrixAnswer``) or ("error", exception) answers on a duplicate of its stdout, until stdin
closes. Its own stdout is pointed at /dev/null first, so that nothing the solver prints can
corrupt the channel or reach the user's terminal (HiGHS 1.12 prints a leftover debug line,
ERGO-Code/HiGHS#2783, several times a full trace; the solvers run with their output off).
Python's own errors still go to stderr. (A module of its own, so that ``-m`` runs it before
anything imports it.)
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

# Loaded before "ready" (milp_scipy imports it on first use): no timed solve pays for it.
import scipy.optimize  # noqa: F401

from controller.policy.unisched.milp import solve
from controller.policy.unisched.milp_scipy import Matrices, solve_matrices


def serve(requests: Connection, answers: Connection) -> None:
    """The worker: answer ("ok", solution) or ("error", exception) per request until EOF."""
    answers.send(("ready", None))
    while True:
        try:
            problem, solver, limit = requests.recv()
        except (EOFError, OSError):
            return
        try:
            if isinstance(problem, Matrices):  # built by the parent (solver="scipy")
                answer: tuple[str, object] = ("ok", solve_matrices(problem, limit))
            else:
                answer = ("ok", solve(problem, solver, limit))
        except Exception as exc:  # sent back and raised in the parent
            answer = ("error", exc)
        answers.send(answer)


def _main() -> None:
    """Serve requests on stdin, answers on a duplicate of stdout."""
    answers_fd = os.dup(1)
    with open(os.devnull, "wb") as devnull:
        os.dup2(devnull.fileno(), 1)  # what the solver prints goes nowhere, not into the channel
    serve(Connection(0, writable=False), Connection(answers_fd, readable=False))


if __name__ == "__main__":
    _main()
