"""Benchmark: accuracy and speed of the training-iteration estimator on real learning curves.

    python benchmarks/bench_curves.py [--history PATH] [--target-share 0.95]
                                      [--observed 0.3,0.5,0.7] [--min-epochs 10]
                                      [--unit iteration|epoch] [--repeat 5] [--jobs] [--json]

Data: the ONES trace's ``job_history.csv`` (one row per epoch per job, accuracy per epoch),
by default ``../shared/data/ones/job_history.csv`` next to the repository (or under
``$MLSCHED_DATA``). For every job with at least ``--min-epochs`` epochs:

* x is the job's cumulative training iteration at the end of each epoch,
  ``round(sum(epoch_size / batch_size))`` over its epochs so far: ONES changes a job's batch
  size while it runs, so ``num_samples / batch_size`` would not count iterations
  (``--unit epoch`` uses the epoch number instead);
* the target is ``--target-share`` of the job's best accuracy, and the true iteration is that
  of the first epoch reaching it;
* the estimator sees the first ``--observed`` share of the epochs, with ``max_iterations`` the
  iteration of the job's last epoch, and its prediction is compared with the true iteration:
  error = (predicted - true) / true.

Jobs whose target is already met within the observed epochs are answered exactly from the
history; they are counted (``met``) but left out of the error figures and the timing. The
``max`` rows give the same figures for the conservative fallback (always predict
``max_iterations``). Timing: wall-clock per call, each call repeated ``--repeat`` times.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_HISTORY = DATA / "ones" / "job_history.csv"

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))

from controller.estimator.curves import predict_target_iteration  # noqa: E402
from mlsched.model import MetricGoal  # noqa: E402


@dataclass(frozen=True)
class Curve:
    job: str
    xs: tuple[int, ...]  # iteration (or epoch) at the end of each epoch
    accs: tuple[float, ...]


def load_curves(path: Path, unit: str) -> list[Curve]:
    """One curve per job, in file order.

    A job is a run of consecutive rows with the same id and increasing epochs (the file reuses
    id 0 for two jobs). ONES changes a job's batch size while it runs, so the iteration count
    is accumulated epoch by epoch, ``sum(epoch_size / batch_size)``, rounded.
    """
    curves: list[Curve] = []
    seen_ids: dict[str, int] = {}
    job, last_epoch, iterations = None, 0, 0.0
    xs: list[int] = []
    accs: list[float] = []

    def close() -> None:
        if job is not None and xs:
            curves.append(Curve(job, tuple(xs), tuple(accs)))

    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            epoch = int(row["epoch"])
            if job is None or row["id"] != job.split("#")[0] or epoch <= last_epoch:
                close()
                count = seen_ids[row["id"]] = seen_ids.get(row["id"], 0) + 1
                job = row["id"] if count == 1 else f"{row['id']}#{count}"
                iterations, xs, accs = 0.0, [], []
            last_epoch = epoch
            iterations += float(row["epoch_size"]) / float(row["batch_size"])
            xs.append(epoch if unit == "epoch" else round(iterations))
            accs.append(float(row["acc"]))
    close()
    return curves


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(errors: list[float]) -> dict[str, float | int]:
    absolute = [abs(e) for e in errors]
    n = len(errors)
    return {
        "count": n,
        "mean_abs_err": statistics.fmean(absolute) if n else float("nan"),
        "p50_err": percentile(errors, 50),
        "p50_abs_err": percentile(absolute, 50),
        "p90_abs_err": percentile(absolute, 90),
        "within_10pct": sum(a <= 0.10 for a in absolute) / n if n else float("nan"),
        "within_20pct": sum(a <= 0.20 for a in absolute) / n if n else float("nan"),
    }


def run(
    curves: list[Curve], observed: float, share: float, min_epochs: int, repeat: int
) -> dict[str, object]:
    errors, fallback_errors, times_ms, jobs, sizes = [], [], [], [], []
    met = not_reached = 0
    for curve in curves:
        if len(curve.xs) < min_epochs:
            continue
        target = share * max(curve.accs)
        true = next(x for x, a in zip(curve.xs, curve.accs, strict=True) if a >= target)
        seen = max(1, int(observed * len(curve.xs)))
        history = list(zip(curve.xs[:seen], curve.accs[:seen], strict=True))
        max_iterations = curve.xs[-1]
        if any(a >= target for a in curve.accs[:seen]):
            met += 1  # answered from the history, exactly: no fit, not timed
            continue
        sizes.append(seen)
        for _ in range(repeat):
            started = time.perf_counter()
            prediction = predict_target_iteration(
                history, target, MetricGoal.MAXIMIZE, max_iterations
            )
            times_ms.append((time.perf_counter() - started) * 1e3)
        error = (prediction.iteration - true) / true
        errors.append(error)
        fallback_errors.append((max_iterations - true) / true)
        not_reached += not prediction.reached
        jobs.append(
            {
                "job": curve.job,
                "seen": seen,
                "epochs": len(curve.xs),
                "true": true,
                "predicted": prediction.iteration,
                "reached": prediction.reached,
                "err": round(error, 4),
                "models": len(prediction.models),
            }
        )
    return {
        "observed": observed,
        "met": met,
        "not_reached": not_reached,
        "estimator": summarise(errors),
        "max": summarise(fallback_errors),
        "points": [min(sizes), max(sizes)] if sizes else [],
        "time_ms_p50": percentile(times_ms, 50),
        "time_ms_p95": percentile(times_ms, 95),
        "calls": len(times_ms),
        "jobs": jobs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=Path, default=DEFAULT_HISTORY, help="job_history.csv")
    parser.add_argument("--target-share", type=float, default=0.95, help="of the best accuracy")
    parser.add_argument(
        "--observed", default="0.3,0.5,0.7", help="shares of the epochs shown (comma list)"
    )
    parser.add_argument("--min-epochs", type=int, default=10, help="shorter jobs are skipped")
    parser.add_argument("--unit", choices=("iteration", "epoch"), default="iteration")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per job")
    parser.add_argument("--jobs", action="store_true", help="also print each job's prediction")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not args.history.is_file():
        parser.error(f"{args.history} not found (use --history PATH or set MLSCHED_DATA)")
    if not 0 < args.target_share <= 1:
        parser.error("--target-share must be in (0, 1]")
    shares = [float(s) for s in args.observed.split(",") if s.strip()]
    if not shares or not all(0 < s < 1 for s in shares):
        parser.error("--observed must be shares in (0, 1)")

    curves = load_curves(args.history, args.unit)
    results = [
        run(curves, share, args.target_share, args.min_epochs, max(1, args.repeat))
        for share in shares
    ]
    used = sum(len(c.xs) >= args.min_epochs for c in curves)
    if args.json:
        report = {
            "history": str(args.history),
            "unit": args.unit,
            "target_share": args.target_share,
            "min_epochs": args.min_epochs,
            "jobs_used": used,
            "jobs_total": len(curves),
            "results": results,
        }
        print(json.dumps(report, indent=2))
        return 0

    print(
        f"{args.history}: {used} of {len(curves)} jobs with >= {args.min_epochs} epochs; "
        f"x = {args.unit}; target = {args.target_share:g} x best accuracy"
    )
    print("error = (predicted - true) / true over jobs whose target is not met when observed")
    head = (
        f"{'observed':>8} {'who':>9} {'n':>3} {'met':>3} {'!reach':>6} {'mean|e|':>8}"
        f" {'p50 e':>7} {'p50|e|':>7} {'p90|e|':>7} {'<=10%':>6} {'<=20%':>6}"
        f" {'p50 ms':>7} {'p95 ms':>7} {'points':>7}"
    )
    print(head)
    for result in results:
        for who in ("estimator", "max"):
            s = result[who]
            points = "-".join(map(str, result["points"]))
            timing = (
                f" {result['time_ms_p50']:7.2f} {result['time_ms_p95']:7.2f} {points:>7}"
                if who == "estimator"
                else ""
            )
            reach = result["not_reached"] if who == "estimator" else "-"
            print(
                f"{result['observed']:8.0%} {who:>9} {s['count']:3d} {result['met']:3d}"
                f" {reach:>6} {s['mean_abs_err']:8.1%} {s['p50_err']:+7.1%}"
                f" {s['p50_abs_err']:7.1%} {s['p90_abs_err']:7.1%} {s['within_10pct']:6.0%}"
                f" {s['within_20pct']:6.0%}{timing}"
            )
    if args.jobs:
        for result in results:
            for job in result["jobs"]:
                print(f"  observed {result['observed']:.0%}: {job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
