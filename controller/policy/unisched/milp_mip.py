"""The MILP of :mod:`controller.policy.unisched.milp` built with python-mip and solved by CBC
(``solver="cbc"``) or HiGHS's C library (``solver="highs"``); the module's docstring says
what each variable and row means."""

from __future__ import annotations

import time

import mip

from controller.policy.unisched.milp import (
    MilpProblem,
    MilpSolution,
    best_deadline,
    binding_terms,
    feasible_per_job,
    future_capacity,
    term_rows,
)


def solve_mip(
    problem: MilpProblem, solver: str = "cbc", time_limit_s: float = 1.0
) -> MilpSolution | None:
    """The best solution found within ``time_limit_s``; None when the solver found none."""
    started = time.perf_counter()
    model = mip.Model(sense=mip.MAXIMIZE, solver_name=mip.HIGHS if solver == "highs" else mip.CBC)
    model.verbose = 0
    levels = len(problem.free_cells)
    objective: list[mip.LinExpr] = []
    cell_use: list[list[mip.LinExpr]] = [[] for _ in range(levels)]
    future: dict[int, list[mip.LinExpr]] = {}
    x0: dict[str, mip.Var] = {}
    ys: dict[str, list[mip.Var]] = {}
    ss: dict[str, list[tuple[int, mip.Var]]] = {}
    met: dict[str, int] = {}  # deadlines met whatever the solution (no row)
    offset = 0.0
    feasible_of = feasible_per_job(problem)
    binding = binding_terms(problem, feasible_of)
    for job, feasible in zip(problem.jobs, feasible_of, strict=True):
        run = x0[job.job_id] = model.add_var(var_type=mip.BINARY)
        if job.now_reward:
            objective.append(job.now_reward * run)
        y = ys[job.job_id] = [model.add_var(var_type=mip.BINARY) for _ in job.options]
        model += mip.xsum(y) == run  # Eq. 13, and an allocation exactly when it runs
        for var, option in zip(y, job.options, strict=True):
            if option.reward:
                objective.append(option.reward * var)
            for level, count in enumerate(option.cells):
                if count:
                    cell_use[level].append(count * var)  # Eq. 11
        if not feasible:
            continue
        rows = term_rows(job, feasible, problem.horizon, binding)  # the others cannot fail
        if not rows:  # no deadline row: its s[f] enter only Eq. 6, the best one is 1
            f, value = best_deadline(feasible)
            met[job.job_id] = f
            offset += value
            continue
        last = min(problem.horizon, max((q for _, q, _ in rows), default=1))
        # Future terms are a plan, re-solved every cycle; only term 0 is carried out. They are
        # relaxed to [0, 1] (a rolling-horizon choice of ours that keeps the MILP small); a
        # term whose capacity row cannot bind is fixed at 1 (milp.binding_terms).
        terms = {k: model.add_var(lb=0.0, ub=1.0) for k in range(1, last) if k in binding}
        for k, var in terms.items():
            future.setdefault(k, []).append(job.gpus * var)
        chosen = []
        for f, q, value in feasible:
            s = model.add_var(var_type=mip.BINARY)
            chosen.append((f, s))
            objective.append(value * s)  # Eq. 4
            if (f, q, value) not in rows:
                continue
            held_terms = range(1, min(q, problem.horizon))
            held = mip.xsum(terms[k] for k in held_terms if k in terms) + run
            held += sum(1 for k in held_terms if k not in terms)  # fixed at 1
            beyond = max(0, q - problem.horizon)
            needs = [o.leases[f] for o in job.options]
            best = min(needs)
            extra = []
            for var, n in zip(ys[job.job_id], needs, strict=True):
                if n > best:
                    w = model.add_var(lb=0.0, ub=1.0)
                    model += w >= var + s - 1
                    extra.append((n - best) * w)
            need = best * s + mip.xsum(extra)
            model += held + beyond * s >= need  # Eqs. 7 and 12
        model += mip.xsum(s for _, s in chosen) <= 1  # Eq. 6
        ss[job.job_id] = chosen
    for i in range(levels):  # Eq. 14 over the requested cells (Eq. 11)
        terms_i = [e * (1 << (g - i)) for g in range(i, levels) for e in cell_use[g]]
        if terms_i:
            have = sum(problem.free_cells[g] << (g - i) for g in range(i, levels))
            model += mip.xsum(terms_i) <= have
    for k, used in future.items():
        model += mip.xsum(used) <= future_capacity(problem, k)
    model.objective = mip.maximize(mip.xsum(objective) + offset)
    built = time.perf_counter()
    if problem.first_feasible:
        status = model.optimize(max_seconds=time_limit_s, max_solutions=1)
    else:
        status = model.optimize(max_seconds=time_limit_s)
    solved = time.perf_counter()
    if status not in (mip.OptimizationStatus.OPTIMAL, mip.OptimizationStatus.FEASIBLE):
        return None
    run: dict[str, int] = {}
    for job in problem.jobs:
        if x0[job.job_id].x is not None and x0[job.job_id].x > 0.5:
            picks = [p for p, v in enumerate(ys[job.job_id]) if v.x is not None and v.x > 0.5]
            run[job.job_id] = picks[0] if picks else 0
    met.update(
        (job_id, f)
        for job_id, chosen in ss.items()
        for f, s in chosen
        if s.x is not None and s.x > 0.5
    )
    return MilpSolution(
        run_now=run,
        deadline=met,
        status=status.name.lower(),
        objective=float(model.objective_value or 0.0),
        solve_s=solved - built,
        build_s=built - started,
    )
