"""UniSched's joint job-selection and allocation MILP (§III-C4, Eqs. 4-14), and its backends.

Time is counted in SLO lease terms ``k = 0 .. horizon-1`` from now (term 0 is the one starting
now). Variables, per the paper:

* ``s[f, i]``: job i finishes by its deadline f (Eq. 5, 6: at most one f per job);
* ``x[k, i]``: job i holds GPUs in term k (``x[0, i]``: it runs from now; Eq. 5). Only term
  0 is carried out and the plan is solved again every cycle, so terms ``k >= 1`` are relaxed
  to [0, 1] (our rolling-horizon choice; it keeps the binaries to s, x[0] and y);
* ``y[i, p]``: job i runs now on allocation p, one at most (Eqs. 9, 13);

Constraints:

* Eqs. 7 and 12, linearised: the terms job i gets before deadline f cover the terms it needs
  there on its allocation, ``sum_{k < Q_f} x[k, i] >= L*_f s_f + sum_p (L_{f,p} - L*_f) w_{f,p}``
  with ``w_{f,p} >= y_p + s_f - 1`` (so a slower allocation, a lower normalised speed phi-bar in
  Eq. 12, needs more terms; ``L*_f`` is the fewest over the allocations). Terms beyond the
  horizon count as available (``max(0, Q_f - horizon)``), without a capacity check.
* Eqs. 10, 11, 14: the cells requested by the jobs running now, per level, satisfy the
  consolidation proposition against the free cells (which Eq. 10 bounds by the cluster).
* Terms ``k >= 1``: SLO jobs' GPUs fit in the cluster, less what the SLO jobs on unexpired
  leases will hold (``reserved``: they run on until they finish). The paper's lease
  assignment presumes this capacity but does not write it out. A term whose row cannot
  bind is left out, its ``x[k]`` fixed at 1 (:func:`binding_terms`). A deadline row that
  cannot fail is left out too (:func:`needs_terms`); a job left with no row at all has its
  ``s[f]`` in Eq. 6 alone, so the best of them is 1 in every optimum: the backends write no
  ``s`` for it and add its value to the objective as a constant.

Objective, Eq. 4: ``sum s[f, i] V[f, i]``, plus each job's reward for running now (profiler
and best-effort rewards, §III-C2; an SLO job past its deadlines earns a best-effort one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from controller.policy.unisched.cells import consolidation_feasible


@dataclass(frozen=True)
class Option:
    """One allocation choice of a job: cells per level, and for an SLO job the lease terms it
    needs to finish on it before each of its deadlines (``L_{f,p}``, same order)."""

    cells: tuple[int, ...]
    leases: tuple[int, ...] = ()
    reward: float = 0.0  # earned when chosen now (best-effort: faster is sooner done)


@dataclass(frozen=True)
class MilpJob:
    job_id: str
    gpus: int
    options: tuple[Option, ...]
    now_reward: float = 0.0  # reward for running in term 0
    deadlines: tuple[tuple[int, float], ...] = ()  # (Q_f terms before deadline f, V_f)
    slo: bool = False
    # Derived once, when the job is made (a policy reuses a queued job's entry across cycles,
    # and every build reads these): (f, Q_f, V_f) of the deadlines an SLO job can still meet
    # on its best allocation (worth something, at least a term away, its fastest allocation's
    # lease count within Q_f; none for a best-effort job), and per deadline the terms its
    # slowest allocation needs (:func:`needs_terms`).
    reachable: tuple[tuple[int, int, float], ...] = field(init=False, repr=False, compare=False)
    slowest: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        needs = list(zip(*(o.leases for o in self.options), strict=True)) if self.options else []
        reachable = []
        if self.slo:
            for f, (q, value) in enumerate(self.deadlines):
                need = min(needs[f]) if needs else q + 1
                if value > 0 and q >= 1 and need <= q:
                    reachable.append((f, q, value))
        object.__setattr__(self, "reachable", tuple(reachable))
        object.__setattr__(self, "slowest", tuple(max(n) for n in needs))


@dataclass(frozen=True)
class MilpProblem:
    jobs: tuple[MilpJob, ...]
    free_cells: tuple[int, ...]  # N^cell per level
    total_gpus: int
    horizon: int
    # GPUs held in term k (k = 1..horizon-1, index k-1) by SLO jobs on unexpired leases, which
    # keep running until they finish: capacity the candidates cannot plan on.
    reserved: tuple[float, ...] = ()
    # Stop at the solver's first feasible solution instead of maximising Eq. 4 (the
    # feasibility-only ablation of Fig. 10b).
    first_feasible: bool = False


@dataclass(frozen=True)
class MilpSolution:
    run_now: Mapping[str, int]  # job id -> chosen option index
    deadline: Mapping[str, int] = field(default_factory=dict)  # job id -> deadline f met
    status: str = ""
    objective: float = 0.0
    solve_s: float = 0.0
    build_s: float = 0.0


def solve(
    problem: MilpProblem, solver: str = "cbc", time_limit_s: float = 1.0
) -> MilpSolution | None:
    """The best solution found within ``time_limit_s``; None when the solver found none.

    ``solver``: "scipy" builds the model as sparse matrices for HiGHS in
    :func:`scipy.optimize.milp` (:mod:`~controller.policy.unisched.milp_scipy`); "cbc" and
    "highs" build it with python-mip (:mod:`~controller.policy.unisched.milp_mip`). Each
    backend is imported on first use.
    """
    if not problem.jobs:  # nothing to choose (CBC reports no solution, scipy refuses)
        return MilpSolution(run_now={}, status="optimal")
    if solver == "scipy":
        from controller.policy.unisched.milp_scipy import solve_scipy

        solution = solve_scipy(problem, time_limit_s)
    elif solver in ("cbc", "highs"):
        from controller.policy.unisched.milp_mip import solve_mip

        solution = solve_mip(problem, solver, time_limit_s)
    else:
        raise ValueError(f"unknown solver {solver!r}")
    if solution is not None:
        _check_cells(problem, solution)
    return solution


def feasible_per_job(problem: MilpProblem) -> list[tuple[tuple[int, int, float], ...]]:
    """Each job's reachable deadlines (``MilpJob.reachable``), in order."""
    return [j.reachable for j in problem.jobs]


def best_deadline(feasible: Sequence[tuple[int, int, float]]) -> tuple[int, float]:
    """(f, V_f) of the most valuable of ``feasible`` (the first of equal ones): the deadline a
    job without deadline rows meets in every optimum, its ``s[f]`` being in Eq. 6 alone."""
    f, _, value = max(feasible, key=lambda d: d[2])
    return f, value


def future_capacity(problem: MilpProblem, k: int) -> float:
    """GPUs the candidates may plan on in future term ``k >= 1``: the cluster, less what SLO
    jobs on unexpired leases hold then."""
    taken = problem.reserved[k - 1] if k - 1 < len(problem.reserved) else 0.0
    return max(0.0, problem.total_gpus - taken)


def binding_terms(
    problem: MilpProblem, feasible: Sequence[Sequence[tuple[int, int, float]]]
) -> frozenset[int]:
    """The future terms whose capacity row can bind (``feasible``:
    :func:`feasible_per_job` of the problem).

    A term's row binds only if the GPUs of every SLO job that may hold the term exceed its
    capacity. In any other term every such job can hold its GPUs (``x[k] = 1``) at no cost,
    and ``x[k]`` enters no other row but Eqs. 7 and 12, where more terms only help. So the
    backends fix those ``x[k]`` at 1 and leave out their columns and row: the same optimum
    (and the same LP relaxation) in a smaller model. On full MIX2 at C120 it helps the
    lighter cycles: in 404 of the 469 models of 5,000 columns or more every term's row could
    bind (docs/unisched.md, *Solver speed*)."""
    demand: dict[int, int] = {}
    horizon = problem.horizon
    for job, deadlines in zip(problem.jobs, feasible, strict=True):
        rows = [q for f, q, _ in deadlines if needs_terms(job, f, q, horizon)]
        if not rows:
            continue
        for k in range(1, min(horizon, max(rows))):
            demand[k] = demand.get(k, 0) + job.gpus
    return frozenset(k for k, used in demand.items() if used > future_capacity(problem, k))


def needs_terms(job: MilpJob, f: int, q: int, horizon: int, fixed: int = 0) -> bool:
    """Whether the Eqs. 7/12 row of job's deadline f (``q`` terms away) can fail.

    The terms beyond the horizon (``q - horizon``) and ``fixed`` terms before the deadline
    held at 1 (:func:`binding_terms`) count as the job's own. When they cover what its slowest
    allocation needs there, the row holds whatever the other variables are, and the
    deadline's ``x[k]`` and ``w`` enter nothing else that they could help; so the backends
    leave out the row, its ``w`` and the future terms only it would use (the same optimum in
    a smaller model: on full MIX2 at C120 most SLO jobs' deadlines are this far away)."""
    return job.slowest[f] > max(0, q - horizon) + fixed


def term_rows(
    job: MilpJob, feasible: Sequence[tuple[int, int, float]], horizon: int, binding: frozenset[int]
) -> list[tuple[int, int, float]]:
    """The deadlines of ``feasible`` whose Eqs. 7/12 row the backends write
    (:func:`needs_terms`, the terms before each that are not ``binding`` counted as held)."""
    rows = []
    for f, q, value in feasible:
        if not needs_terms(job, f, q, horizon):  # most rows are left out here, at no count
            continue
        fixed = sum(k not in binding for k in range(1, min(q, horizon)))  # held at 1
        if needs_terms(job, f, q, horizon, fixed):
            rows.append((f, q, value))
    return rows


def _check_cells(problem: MilpProblem, solution: MilpSolution) -> None:
    """The solver's answer must satisfy Eq. 14; a violation is a bug in the model above."""
    levels = len(problem.free_cells)
    used = [0] * levels
    for job in problem.jobs:
        p = solution.run_now.get(job.job_id)
        if p is not None:
            for level, count in enumerate(job.options[p].cells):
                used[level] += count
    if not consolidation_feasible(used, problem.free_cells):
        raise AssertionError(f"MILP broke Eq. 14: cells {used} over free {problem.free_cells}")
