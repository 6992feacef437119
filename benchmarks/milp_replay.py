"""Benchmark: UniSched's MILPs captured in a simulation, replayed under other HiGHS settings.

    python benchmarks/milp_replay.py [--trace PATH] [--cluster C120] [--limit N] [--every 4]
                                     [--slower-than S] [--policy unisched] [--sets NAME,...]
                                     [--json] [--save FILE | --load FILE]

The policy runs over the trace as ``mlsched simulate --policy unisched`` runs it (its own
argument parser and :func:`simulator.cli.prepare_run`, every other option at its default).
Every MILP the policy sends its worker as matrices (``IsolatedSolver._ask`` with the
``Matrices`` of ``milp_scipy.build``: the default ``solver="scipy"``) is counted, and every
``--every``-th is kept with the worker's answer (with ``--slower-than S``, only those the
worker took at least S seconds to solve, or never answered: the solver's tail). Each kept
model is then solved again in this process with :func:`scipy.optimize.milp`, one option set
of :data:`OPTION_SETS` after another.

Printed per option set (``run``: the worker's own solves during the simulation): models, total
solve seconds and those of the solves that ended before the time limit (``done_s``), p50 / p95
ms per solve, how many reached the objective the run reached (within 1e-6 relative), how many
did better or worse or found no solution, the objective lost on the worse ones, and how many
stopped at the time limit (for ``run``: answers not proven optimal). Wall times: the machine's
load moves them, and a solve cut off at the limit can end with another objective. ``--save
FILE`` writes the kept models (pickled) so that ``--load FILE`` replays them again without
simulating.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.policy import make_policy
from controller.policy.unisched.isolated import IsolatedSolver
from controller.policy.unisched.milp_scipy import (
    Matrices,
    MatrixAnswer,
    highs_options,
    run_highs,
)
from mlsched.gctune import tune_for_cycles
from simulator.cli import add_simulate_command, prepare_run
from simulator.engine import Simulation

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX2.csv"
TIME_LIMIT = 1  # scipy.optimize.milp's status: iteration or time limit reached
REL_TOL = 1e-6


@dataclass(frozen=True)
class Captured:
    """One MILP as the worker received it, and what the worker answered."""

    matrices: Matrices
    time_limit_s: float
    answer: MatrixAnswer | None  # None: the worker died or hung


def _with(**changes: object) -> Callable[[Matrices, float], dict[str, object]]:
    """The code's options with ``changes``."""
    return lambda m, limit: {**highs_options(m, limit), **changes}


def _limit(seconds: float) -> Callable[[Matrices, float], dict[str, object]]:
    """The code's options with another time limit."""
    return lambda m, _limit_s: highs_options(m, seconds)


def _scipy_defaults(m: Matrices, time_limit_s: float) -> dict[str, object]:
    """HiGHS's own defaults (presolve, gap 1e-4, every heuristic), the limit kept."""
    options: dict[str, object] = {"time_limit": time_limit_s}
    if m.first_feasible:
        options["mip_max_improving_sols"] = 1
    return options


# name -> the options for one model and its time limit; the names after "code" are HiGHS
# settings the docs (docs/unisched.md, "Solver speed") weighed against the code's
OPTION_SETS: dict[str, Callable[[Matrices, float], dict[str, object]]] = {
    "code": highs_options,
    "presolve-off": _with(presolve=False),
    "presolve-on": _with(presolve=True),
    "abs-gap-1e-4": _with(mip_abs_gap=1e-4),
    "heuristics-0": _with(mip_heuristic_effort=0.0),
    "root-reduced-cost-off": _with(mip_heuristic_run_root_reduced_cost=False),
    "heuristics-0.3": _with(mip_heuristic_effort=0.3),
    "limit-0.3s": _limit(0.3),
    "limit-0.5s": _limit(0.5),
    "scipy-defaults": _scipy_defaults,
}


class Recorder:
    """Counts the matrices sent to the MILP worker and keeps every ``every``-th, of those
    only the ones the worker took at least ``slower_than`` seconds on (or never answered)."""

    def __init__(self, every: int, slower_than: float = 0.0) -> None:
        if every < 1:
            raise ValueError(f"--every must be at least 1, got {every}")
        if slower_than < 0:
            raise ValueError(f"--slower-than must be at least 0, got {slower_than}")
        self.every = every
        self.slower_than = slower_than
        self.sent = 0
        self.kept: list[Captured] = []

    @contextlib.contextmanager
    def installed(self) -> Iterator[Recorder]:
        """``IsolatedSolver._ask`` recording while inside, restored after."""
        original = IsolatedSolver._ask

        def ask(solver: IsolatedSolver, request: object, name: str, limit: float) -> object:
            answer = original(solver, request, name, limit)
            if isinstance(request, Matrices):
                kept = answer if isinstance(answer, MatrixAnswer) else None
                slow = kept is None or kept.solve_s >= self.slower_than
                if self.sent % self.every == 0 and slow:
                    self.kept.append(Captured(request, limit, kept))
                self.sent += 1
            return answer

        IsolatedSolver._ask = ask  # type: ignore[method-assign]
        try:
            yield self
        finally:
            IsolatedSolver._ask = original  # type: ignore[method-assign]


def simulate_args(trace: Path, cluster: str, limit: int | None) -> argparse.Namespace:
    """``mlsched simulate``'s arguments for this trace, cluster and limit, the rest default."""
    parser = argparse.ArgumentParser()
    add_simulate_command(parser.add_subparsers())
    argv = ["simulate", "--trace", str(trace), "--cluster", cluster]
    return parser.parse_args(argv + (["--limit", str(limit)] if limit else []))


def capture(args: argparse.Namespace, policy_name: str, recorder: Recorder) -> dict[str, Any]:
    """Simulate ``policy_name`` as ``mlsched simulate`` would, recording its MILPs."""
    run = prepare_run(args)
    tune_for_cycles()  # as `mlsched simulate` does once the trace is loaded
    policy = make_policy(policy_name, run.mlfs)
    started = time.perf_counter()
    try:
        with recorder.installed():
            Simulation(run.jobs, policy, run.shape, run.model, run.config).run()
    finally:
        close = getattr(policy, "close", None)
        if close is not None:
            close()
    return {
        "jobs": len(run.jobs),
        "cluster": f"{run.shape.nodes}x{run.shape.gpus_per_node}",
        "sim_s": round(time.perf_counter() - started, 1),
    }


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """File descriptor 1 on /dev/null while inside: HiGHS 1.12 prints a leftover debug line
    from native code (``milp_worker``'s docstring), which would corrupt ``--json``."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def solve(m: Matrices, options: dict[str, object]) -> tuple[float, float | None, int]:
    """Seconds, objective (None: no solution) and status of HiGHS on ``m``, timed as
    ``solve_matrices`` times its own solve."""
    started = time.perf_counter()
    result = run_highs(m, options)
    seconds = time.perf_counter() - started
    objective = None if result.x is None else float(m.c @ result.x)
    return seconds, objective, int(result.status)


def run_objective(c: Captured) -> float | None:
    """The objective the run's own solve reached (None: no solution)."""
    if c.answer is None or c.answer.x is None:
        return None
    return float(c.matrices.c @ c.answer.x)


def summary(
    seconds: list[float],
    objectives: list[float | None],
    limited: list[bool],
    runs: list[float | None],
) -> dict[str, Any]:
    """One option set's row, per model its seconds, objective and whether it stopped at the
    limit; objectives compared with the run's (``runs``)."""
    counts = dict.fromkeys(("same", "better", "worse", "none"), 0)
    lost = 0.0
    for got, ran in zip(objectives, runs, strict=True):
        verdict = _compare(got, ran)
        counts[verdict] += 1
        if verdict == "worse" and got is not None and ran is not None:
            lost += ran - got
    ordered = sorted(seconds)
    finished = (s for s, cut in zip(seconds, limited, strict=True) if not cut)
    return {
        "models": len(seconds),
        "solve_s": round(sum(seconds), 3),
        "done_s": round(sum(finished), 3),
        "p50_ms": round(1000 * _rank(ordered, 0.50), 2),
        "p95_ms": round(1000 * _rank(ordered, 0.95), 2),
        **counts,
        "lost": round(lost, 1),
        "at_limit": sum(limited),
    }


def _compare(got: float | None, ran: float | None) -> str:
    if got is None:
        return "none"
    if ran is None or (got > ran and not _close(got, ran)):
        return "better"
    return "same" if _close(got, ran) else "worse"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-9)


def _rank(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list (0 for none)."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def replay(models: list[Captured], name: str) -> dict[str, Any]:
    """Every model solved under option set ``name``."""
    seconds: list[float] = []
    objectives: list[float | None] = []
    limited: list[bool] = []
    for c in models:
        took, objective, status = solve(c.matrices, OPTION_SETS[name](c.matrices, c.time_limit_s))
        seconds.append(took)
        objectives.append(objective)
        limited.append(status == TIME_LIMIT)
    return summary(seconds, objectives, limited, [run_objective(c) for c in models])


def run_row(models: list[Captured]) -> dict[str, Any]:
    """The worker's own solves of the kept models, as a row like :func:`replay`'s (at the
    limit: not proven optimal; a model the worker never answered counts its time limit)."""
    seconds = [c.answer.solve_s if c.answer else c.time_limit_s for c in models]
    limited = [not (c.answer and c.answer.optimal) for c in models]
    runs = [run_objective(c) for c in models]
    return summary(seconds, runs, limited, runs)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--cluster", default="C120", help="[%(default)s]")
    parser.add_argument("--limit", type=int, help="only the first N jobs")
    parser.add_argument("--every", type=int, default=4, help="keep every Nth MILP [%(default)s]")
    parser.add_argument(
        "--slower-than",
        type=float,
        default=0.0,
        help="keep only MILPs the run's worker took at least this many seconds on [%(default)s]",
    )
    parser.add_argument("--policy", default="unisched", help="[%(default)s]")
    parser.add_argument("--sets", default=",".join(OPTION_SETS), help="[%(default)s]")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    stored = parser.add_mutually_exclusive_group()
    stored.add_argument("--save", type=Path, help="also write the kept models to this file")
    stored.add_argument("--load", type=Path, help="replay the models of a --save file")
    return parser.parse_args()


def _print(report: dict[str, Any]) -> None:
    """The run's line, then a table of the option sets."""
    head = {k: v for k, v in report.items() if k != "sets"}
    print("  ".join(f"{k}={v}" for k, v in head.items()))
    rows = report["sets"]
    columns = list(next(iter(rows.values())))
    print(f"{'set':>15}" + "".join(f"{c:>9}" for c in columns))
    for name, row in rows.items():
        print(f"{name:>15}" + "".join(f"{row[c]:>9}" for c in columns))


def main() -> int:
    args = _arguments()
    if not args.load and not args.trace.exists():
        print(f"trace not found: {args.trace} (set MLSCHED_DATA or pass --trace)", file=sys.stderr)
        return 2
    names = [n for n in args.sets.split(",") if n]
    unknown = [n for n in names if n not in OPTION_SETS]
    if unknown:
        print(f"unknown option sets {unknown}; valid: {', '.join(OPTION_SETS)}", file=sys.stderr)
        return 2
    if args.load:
        with args.load.open("rb") as stored:
            report, kept = pickle.load(stored)
    else:
        recorder = Recorder(args.every, args.slower_than)
        report = capture(simulate_args(args.trace, args.cluster, args.limit), args.policy, recorder)
        report.update(every=args.every, slower_than=args.slower_than)
        report.update(milps=recorder.sent, captured=len(recorder.kept))
        kept = recorder.kept
        print(f"kept {len(kept)} of {recorder.sent} MILPs", file=sys.stderr)
        if args.save:
            with args.save.open("wb") as stored:
                pickle.dump((report, kept), stored)
    report["sets"] = {"run": run_row(kept)}
    with quiet_stdout():
        for name in names:
            report["sets"][name] = replay(kept, name)
            print(f"replayed {name}", file=sys.stderr)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
