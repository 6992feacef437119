"""Where best-effort JCT goes, by job size: UniSched against Chronus on one trace.

    python benchmarks/be_jct_by_size.py [--trace PATH] [--cluster C120] [--limit N]

For each policy (unisched, chronus) prints, over finished best-effort jobs, in minutes: the
JCT, the wait for the first start, the time from first start to end, the time holding GPUs
(GPU-seconds over GPUs, overheads included) and suspensions per job; then the same split into
jobs of at most 2 GPUs and of more (docs/unisched.md, *Full MIX1, one change at a time*).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX1.csv"


def _avg_min(values: list[float]) -> float:
    return sum(values) / len(values) / 60 if values else 0.0


def describe(label: str, records: list) -> str:  # type: ignore[type-arg]
    jct = [r.end_s - r.job.submit_s for r in records]
    first = [r.first_start_s - r.job.submit_s for r in records]
    after = [r.end_s - r.first_start_s for r in records]
    held = [r.gpu_s / max(1, r.job.gpus) for r in records]
    suspensions = sum(r.suspensions for r in records) / max(1, len(records))
    return (
        f"{label}: jobs={len(records)} jct={_avg_min(jct):.1f} first_wait={_avg_min(first):.1f} "
        f"start_to_end={_avg_min(after):.1f} held={_avg_min(held):.1f} "
        f"suspensions_per_job={suspensions:.2f}"
    )


def main() -> int:
    from controller.policy import make_policy
    from mlsched.model import JobClass
    from simulator.cli import parse_cluster, philly_job_model, trace_script_args
    from simulator.engine import SimConfig, Simulation
    from simulator.trace import load_philly

    args = trace_script_args(__doc__.splitlines()[0], DEFAULT_TRACE)
    if args is None:
        return 2
    jobs = load_philly(args.trace, zero_gpu="one")[: args.limit or None]
    model = philly_job_model(args.trace, "be_jct_by_size")
    for name in ("unisched", "chronus"):
        result = Simulation(
            jobs, make_policy(name), parse_cluster(args.cluster), model, SimConfig()
        ).run()
        done = [
            r
            for r in result.records
            if r.job.job_class is JobClass.BEST_EFFORT and r.end_s is not None
        ]
        print(describe(f"{name} all", done))
        print(describe(f"{name} <=2 GPUs", [r for r in done if r.job.gpus <= 2]))
        print(describe(f"{name} >2 GPUs", [r for r in done if r.job.gpus > 2]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
