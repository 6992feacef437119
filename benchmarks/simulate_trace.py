"""Benchmark: time to simulate a full trace per policy, with jobs/s and peak memory.

    python benchmarks/simulate_trace.py [--trace PATH] [--policy fifo,srtf,...] [--cluster C120]

Each policy runs in its own process so that its peak resident memory is its own. The trace
defaults to the MIX2 trace under ../shared/data (or $MLSCHED_DATA).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX2.csv"


def run_one(trace: Path, policy: str, cluster: str) -> dict[str, object]:
    """Load, simulate and report one policy in this process."""
    from controller.policy import make_policy
    from simulator.cli import parse_cluster, philly_job_model
    from simulator.engine import SimConfig, Simulation
    from simulator.metrics import compute_metrics
    from simulator.trace import load_philly

    started = time.perf_counter()
    jobs = load_philly(trace, zero_gpu="one")
    model = philly_job_model(trace, "simulate_trace")
    loaded = time.perf_counter()
    result = Simulation(jobs, make_policy(policy), parse_cluster(cluster), model, SimConfig()).run()
    metrics = compute_metrics(result)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "policy": policy,
        "speed_model": model.speed_model.describe(),
        "jobs": len(jobs),
        "load_s": round(loaded - started, 2),
        "simulate_s": round(result.wall_s, 2),
        "jobs_per_s": round(len(jobs) / result.wall_s, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "jobs_completed": metrics["jobs_completed"],
        "r_slo": metrics["r_slo"],
        "decision_p95_ms": round(1000 * (metrics["decision_time_s"]["p95"] or 0), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policy", default="fifo,srtf,tiresias,edf,themis")
    parser.add_argument("--cluster", default="C120")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (set MLSCHED_DATA or pass --trace)", file=sys.stderr)
        return 2
    if args.one:
        print(json.dumps(run_one(args.trace, args.policy, args.cluster)))
        return 0
    print(
        f"{'policy':>10} {'jobs':>6} {'load s':>7} {'sim s':>7} {'jobs/s':>8} "
        f"{'peak MiB':>9} {'done':>6} {'p95 ms':>7}"
    )
    for policy in args.policy.split(","):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--one",
                "--trace",
                str(args.trace),
                "--policy",
                policy,
                "--cluster",
                args.cluster,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(out.stdout)
        print(
            f"{policy:>10} {row['jobs']:>6} {row['load_s']:>7} {row['simulate_s']:>7} "
            f"{row['jobs_per_s']:>8} {row['peak_rss_mib']:>9} {row['jobs_completed']:>6} "
            f"{row['decision_p95_ms']:>7}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
