"""Every cycle's decisions of a UniSched run on a trace slice, one line per cycle, to compare two
versions of the code (a change meant to save time must not change a decision).

    python benchmarks/unisched_decisions.py --out FILE [--trace PATH] [--cluster C120]
        [--start 12000] [--end 16000] [--time-limit-s 60] [--policy unisched]

Writes ``now launches renewals suspensions`` per ``decide`` call (each sorted, with placements,
lease lengths and reasons) to FILE and prints R^slo, best-effort JCT and cycle counts. The
solver's limit is raised (60 s) so that its answer does not depend on the machine's speed; run
the script in two checkouts and compare the files with ``cmp`` (docs/unisched.md, *Policy
speed*).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TextIO

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX1.csv"


class Recording:
    """A policy that writes its inner policy's decisions, one line per cycle."""

    def __init__(self, inner, out: TextIO) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.name = inner.name
        self.out = out
        self.needs_job_truth = getattr(inner, "needs_job_truth", False)

    def decide(self, snapshot):  # type: ignore[no-untyped-def]
        decision = self.inner.decide(snapshot)
        parts = (sorted(map(repr, orders)) for orders in (decision.launch, decision.renew))
        suspend = sorted(map(repr, decision.suspend))
        self.out.write(f"{snapshot.now:.3f} {list(parts)} {suspend}\n")
        return decision


def main() -> int:
    from controller.policy import make_policy
    from controller.policy.unisched import UniSchedPolicy
    from simulator.cli import parse_cluster, philly_job_model
    from simulator.engine import SimConfig, Simulation
    from simulator.metrics import compute_metrics
    from simulator.trace import load_philly

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--cluster", default="C120")
    parser.add_argument("--start", type=int, default=12_000)
    parser.add_argument("--end", type=int, default=16_000)
    parser.add_argument("--time-limit-s", type=float, default=60.0)
    parser.add_argument("--policy", default="unisched")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (set MLSCHED_DATA or pass --trace)", file=sys.stderr)
        return 2
    jobs = load_philly(args.trace, zero_gpu="one")[args.start : args.end]
    origin = jobs[0].submit_s
    jobs = [dataclasses.replace(j, submit_s=j.submit_s - origin) for j in jobs]
    model = philly_job_model(args.trace, "unisched_decisions")
    named = make_policy(args.policy)
    if not isinstance(named, UniSchedPolicy):
        print(f"{args.policy} is not a UniSched policy", file=sys.stderr)
        return 2
    config = dataclasses.replace(named.config, time_limit_s=args.time_limit_s)
    inner = UniSchedPolicy(config, named.name)
    with args.out.open("w") as out:
        policy = Recording(inner, out)
        result = Simulation(jobs, policy, parse_cluster(args.cluster), model, SimConfig()).run()
    metrics = compute_metrics(result)
    be = metrics["jct_s"]["best_effort"]
    jct = f"{be['avg'] / 60:.1f}" if be["avg"] is not None else "-"
    print(
        f"{args.policy}: R^slo {metrics['r_slo']}, BE JCT avg {jct} min, "
        f"{metrics['decision_time_s']['cycles']} cycles, {inner.boundary_cycles} boundaries, "
        f"{len(inner.solve_times_s)} solves"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
