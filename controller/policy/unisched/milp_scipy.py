"""The MILP of :mod:`controller.policy.unisched.milp` as sparse matrices, solved by HiGHS
through :func:`scipy.optimize.milp` (``solver="scipy"``).

The same variables, rows and objective as the python-mip build in ``milp.py`` (Eqs. 4-14; that
module's docstring says what each one means), written straight into coordinate lists: no
expression objects per term, which is where python-mip's model building spends its time.

Columns, per job in order: ``x[0]`` (binary), ``y[p]`` per option (binary; a job of one
option has no ``y``: Eq. 13 makes ``y[0] = x[0]``, so ``x[0]`` stands for both); for an SLO job
with a reachable deadline, ``x[k]`` for the ``k = 1 .. last-1`` whose capacity row can bind
(in [0, 1]; the others are fixed at 1, ``milp.binding_terms``) and serve a deadline row
that can fail (``milp.term_rows``), then per reachable deadline ``s[f]`` (binary) followed,
when its row is written, by its ``w[f, p]`` (in [0, 1]). An SLO job none of whose deadline
rows is written has no ``x[k]`` and no ``s``: its best deadline's value is the objective's
constant ``Matrices.offset`` (``milp``'s docstring). Rows are ranges ``lo <= A x <= hi``;
HiGHS minimises, so the objective is negated.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.sparse import csc_array, csr_array

if TYPE_CHECKING:
    from scipy.optimize import OptimizeResult

from controller.policy.unisched.milp import (
    MilpProblem,
    MilpSolution,
    best_deadline,
    binding_terms,
    feasible_per_job,
    future_capacity,
    term_rows,
)

_INF = np.inf
# Measured on the MILPs of MIX2 runs (docs/unisched.md, "Solver speed"):
# * presolve off: :func:`build` already leaves out what it removed here (one column per job of
#   one allocation, deadline rows that cannot fail); on 779 models of a full MIX2 run built
#   so, presolve on the 511 of at most 2,000 columns (the rule before) took 21.2 s against
#   7.4 s without it, with the same objectives on all 1,557 models replayed (and on the
#   largest it took most of a second, twice the time of a solve without it);
# * the feasibility-jump heuristic and symmetry detection cost a fixed ~5 ms a solve (a 3-job
#   model took 7 ms, 1.5 ms without them) and found nothing the search did not: off, a
#   quarter less solver time over a sample of full-MIX2 models, the same objectives;
# * a gap of 0: at the default relative gap (1e-4, as CBC's) HiGHS stopped with best-effort
#   rewards of 0.2-0.5 left on the table when the SLO rewards add up to 10^4-10^5.
_OPTIONS: dict[str, object] = {
    "presolve": False,
    "mip_rel_gap": 0.0,
    "mip_heuristic_run_feasibility_jump": False,
    "mip_detect_symmetry": False,
}


@dataclass(frozen=True)
class Matrices:
    """``max c @ x`` subject to ``lo <= a @ x <= hi``, ``0 <= x <= ub``, integral where
    ``integrality`` is 1: all the solver needs, in arrays that pickle as a few blobs (what
    :mod:`~controller.policy.unisched.isolated` sends its worker)."""

    c: np.ndarray
    integrality: np.ndarray
    ub: np.ndarray
    a: csc_array
    lo: np.ndarray
    hi: np.ndarray
    first_feasible: bool = False
    offset: float = 0.0  # the objective's constant: deadlines met without a row


@dataclass(frozen=True)
class Columns:
    """Where each job's variables are, to read a solution back."""

    run: dict[str, int]  # job id -> column of x[0]
    ys: dict[str, range]  # job id -> columns of y[p]
    ss: dict[str, list[tuple[int, int]]]  # job id -> (deadline f, column of s[f])
    met: dict[str, int]  # job id -> deadline f it meets whatever the solution (no row: a constant)


@dataclass(frozen=True)
class MatrixAnswer:
    """The solver's values (None: no solution found) and its seconds."""

    x: np.ndarray | None
    optimal: bool
    solve_s: float


class _Builder:
    """Columns, and rows as runs of (column, value) in one pair of flat lists."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lengths: list[int] = []  # entries per row
        self.lo: list[float] = []
        self.hi: list[float] = []

    def column(self, cost: float = 0.0, integer: bool = False) -> int:
        self.cost.append(cost)
        self.integer.append(integer)
        return len(self.cost) - 1

    def row(self, cols: list[int], vals: list[float], lo: float, hi: float) -> None:
        self.cols.extend(cols)
        self.vals.extend(vals)
        self.lengths.append(len(cols))
        self.lo.append(lo)
        self.hi.append(hi)

    def matrices(self, first_feasible: bool, offset: float = 0.0) -> Matrices:
        indptr = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=indptr[1:])
        shape = (len(self.lo), len(self.cost))
        a = csr_array((self.vals, self.cols, indptr), shape=shape)
        a.sum_duplicates()  # a level-g cell count enters each Eq. 14 row i <= g
        return Matrices(
            c=np.asarray(self.cost, dtype=float),
            integrality=np.asarray(self.integer, dtype=np.uint8),
            ub=np.ones(len(self.cost)),
            a=a.tocsc(),
            lo=np.asarray(self.lo, dtype=float),
            hi=np.asarray(self.hi, dtype=float),
            first_feasible=first_feasible,
            offset=offset,
        )


def build(problem: MilpProblem) -> tuple[Matrices, Columns]:
    """The matrices of ``problem``'s MILP, and where each job's variables are in them."""
    b = _Builder()
    levels = len(problem.free_cells)
    horizon = problem.horizon
    cell_use: list[list[int]] = [[] for _ in range(levels)]
    future: dict[int, tuple[list[int], list[float]]] = {}
    run: dict[str, int] = {}
    ys: dict[str, range] = {}
    ss: dict[str, list[tuple[int, int]]] = {}
    met: dict[str, int] = {}
    offset = 0.0
    feasible_of = feasible_per_job(problem)
    binding = binding_terms(problem, feasible_of)
    for job, feasible in zip(problem.jobs, feasible_of, strict=True):
        if len(job.options) == 1:  # Eq. 13 makes y[0] = x[0]: one column for both
            x0 = run[job.job_id] = b.column(job.now_reward + job.options[0].reward, True)
            y = ys[job.job_id] = range(x0, x0 + 1)
        else:
            x0 = run[job.job_id] = b.column(job.now_reward, integer=True)
            y = ys[job.job_id] = range(x0 + 1, x0 + 1 + len(job.options))
            for option in job.options:
                b.column(option.reward, integer=True)
            b.row([x0, *y], [-1.0] + [1.0] * len(y), 0.0, 0.0)  # Eq. 13
        for var, option in zip(y, job.options, strict=True):
            for level, count in enumerate(option.cells):
                if count:
                    cell_use[level] += (var, count)  # Eq. 11 (column, cells: flat pairs)
        if not feasible:
            continue
        rows = term_rows(job, feasible, horizon, binding)  # the others cannot fail
        if not rows:  # no deadline row: its s[f] enter only Eq. 6, the best one is 1
            f, value = best_deadline(feasible)
            met[job.job_id] = f
            offset += value
            continue
        last = min(horizon, max((q for _, q, _ in rows), default=1))
        terms = {}  # relaxed future terms k = 1 .. last-1 whose row can bind; the others are 1
        for k in range(1, last):
            if k in binding:
                var = terms[k] = b.column()
                cols, vals = future.setdefault(k, ([], []))
                cols.append(var)
                vals.append(float(job.gpus))
        chosen = []
        for f, q, value in feasible:
            s = b.column(value, integer=True)  # Eq. 4
            chosen.append((f, s))
            if (f, q, value) not in rows:
                continue
            beyond = max(0, q - horizon)
            needs = [o.leases[f] for o in job.options]
            best = min(needs)
            held_terms = range(1, min(q, horizon))
            held = [terms[k] for k in held_terms if k in terms]
            fixed = len(held_terms) - len(held)  # terms fixed at 1
            cols = [*held, x0, s]
            vals = [1.0] * len(held) + [1.0, float(beyond - best)]
            for var, n in zip(y, needs, strict=True):
                if n > best:
                    w = b.column(0.0)
                    b.row([w, var, s], [1.0, -1.0, -1.0], -1.0, _INF)  # w >= y + s - 1
                    cols.append(w)
                    vals.append(float(best - n))
            b.row(cols, vals, -float(fixed), _INF)  # Eqs. 7 and 12
        if len(chosen) > 1:  # (one s: its bound)
            b.row([s for _, s in chosen], [1.0] * len(chosen), -_INF, 1.0)  # Eq. 6
        ss[job.job_id] = chosen
    for i in range(levels):  # Eq. 14 over the requested cells (Eq. 11)
        cols: list[int] = []
        vals: list[float] = []
        for g in range(i, levels):
            cols.extend(cell_use[g][0::2])
            vals.extend([float(n << (g - i)) for n in cell_use[g][1::2]])
        if cols:
            have = sum(problem.free_cells[g] << (g - i) for g in range(i, levels))
            b.row(cols, vals, -_INF, float(have))
    for k, (cols, vals) in future.items():
        b.row(cols, vals, -_INF, future_capacity(problem, k))
    return b.matrices(problem.first_feasible, offset), Columns(run, ys, ss, met)


def solve_scipy(problem: MilpProblem, time_limit_s: float = 1.0) -> MilpSolution | None:
    """The best solution HiGHS found within ``time_limit_s``; None when it found none."""
    started = time.perf_counter()
    matrices, columns = build(problem)
    build_s = time.perf_counter() - started
    return decode(columns, matrices, solve_matrices(matrices, time_limit_s), build_s)


def solve_matrices(m: Matrices, time_limit_s: float = 1.0) -> MatrixAnswer:
    """HiGHS on the matrices, within ``time_limit_s``."""
    started = time.perf_counter()
    result = run_highs(m, highs_options(m, time_limit_s))
    return MatrixAnswer(result.x, result.status == 0, time.perf_counter() - started)


def highs_options(m: Matrices, time_limit_s: float) -> dict[str, object]:
    """The options :func:`solve_matrices` gives HiGHS for ``m``."""
    options: dict[str, object] = {"time_limit": time_limit_s, **_OPTIONS}
    if m.first_feasible:
        options["mip_max_improving_sols"] = 1  # HiGHS's own option, passed on verbatim
    return options


def run_highs(m: Matrices, options: dict[str, object]) -> OptimizeResult:
    """``scipy.optimize.milp`` (HiGHS) on the matrices, maximising, with ``options``
    as given (HiGHS's own names pass through; scipy's warning about them is silenced)."""
    # scipy.optimize on the first solve: it costs every process that imports the policies
    # (the controller, the CLI) half a second, and most never solve a MILP
    from scipy.optimize import Bounds, LinearConstraint, milp

    constraints = LinearConstraint(m.a, m.lo, m.hi) if m.lo.size else None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Unrecognized options", RuntimeWarning)
        return milp(
            -m.c,
            integrality=m.integrality,
            bounds=Bounds(np.zeros_like(m.ub), m.ub),
            constraints=constraints,
            options=options,
        )


def decode(
    columns: Columns, m: Matrices, answer: MatrixAnswer, build_s: float = 0.0
) -> MilpSolution | None:
    """The solution in the problem's terms; None when the solver found none."""
    x = answer.x
    if x is None:
        return None
    run_now = {}
    for job_id, col in columns.run.items():
        if x[col] > 0.5:
            picks = [p for p, var in enumerate(columns.ys[job_id]) if x[var] > 0.5]
            run_now[job_id] = picks[0] if picks else 0
    met = dict(columns.met)
    for job_id, chosen in columns.ss.items():
        met.update((job_id, f) for f, s in chosen if x[s] > 0.5)
    return MilpSolution(
        run_now=run_now,
        deadline=met,
        status="optimal" if answer.optimal else "feasible",
        objective=float(m.c @ x) + m.offset,
        solve_s=answer.solve_s,
        build_s=build_s,
    )
