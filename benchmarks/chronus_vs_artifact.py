"""The chronus policy on a Chronus Philly trace, with the figures docs/chronus.md compares
against the ChronusArtifact's own (issue 9, item 4).

    python benchmarks/chronus_vs_artifact.py [--trace PATH] [--cluster C120] [--limit N]

Prints one line: jobs, wall seconds, R^slo both ways (ours: a rejected job that still meets a
deadline earns its reward; the artifact's: every never-admitted SLO job is a full miss), BE JCT
average / median in minutes, preemptions per job, admitted / rejected, and the policy's
counters (``stats``) when it keeps them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX2.csv"


def run(trace: Path, cluster: str, limit: int | None) -> dict[str, object]:
    from controller.policy.chronus import ChronusPolicy
    from mlsched.model import JobClass
    from simulator.cli import parse_cluster, philly_job_model
    from simulator.engine import SimConfig, Simulation
    from simulator.metrics import compute_metrics, reward_earned, scored_slo_records

    jobs = load(trace, limit)
    model = philly_job_model(trace, "chronus_vs_artifact")
    policy = ChronusPolicy()
    started = time.perf_counter()
    result = Simulation(jobs, policy, parse_cluster(cluster), model, SimConfig()).run()
    wall = time.perf_counter() - started
    metrics = compute_metrics(result)
    scored = scored_slo_records(result.records)

    def lost(record, admitted_only: bool) -> float:  # type: ignore[no-untyped-def]
        if admitted_only and record.job.id not in policy.admitted_ever:
            return 1.0
        top = max(d.reward for d in record.job.deadlines)
        return (top - reward_earned(record)) / top

    be = [
        r.jct_s / 60
        for r in result.records
        if r.job.job_class is JobClass.BEST_EFFORT and r.jct_s is not None
    ]
    rejected = [r for r in scored if r.job.id not in policy.admitted_ever]
    return {
        "jobs": len(jobs),
        "wall_s": round(wall, 1),
        "slo_jobs": len(scored),
        "r_slo_ours_pct": round(100 * sum(lost(r, False) for r in scored) / len(scored), 2),
        "r_slo_artifact_pct": round(100 * sum(lost(r, True) for r in scored) / len(scored), 2),
        "be_jct_avg_min": round(statistics.fmean(be), 1) if be else None,
        "be_jct_median_min": round(statistics.median(be), 1) if be else None,
        "preemptions_per_job": round(metrics["preemptions_per_job"], 2),
        "admitted": len(scored) - len(rejected),
        "rejected": len(rejected),
        "rejected_met_a_deadline": sum(reward_earned(r) > 0 for r in rejected),
        "rejected_gpu_time_pct": round(100 * work(rejected) / work(scored), 1),
        "rejected_median_gpus": statistics.median(r.job.gpus for r in rejected) if rejected else 0,
        **getattr(policy, "stats", {}),
    }


def work(records: list) -> float:
    """GPU-seconds of the jobs' trace durations."""
    return sum(r.job.gpus * r.job.duration_s for r in records)


def load(trace: Path, limit: int | None) -> list:
    from simulator.trace import load_philly

    return load_philly(trace, zero_gpu="skip")[: limit or None]


def main() -> int:
    from simulator.cli import trace_script_args

    args = trace_script_args(__doc__.splitlines()[0], DEFAULT_TRACE)
    if args is None:
        return 2
    row = run(args.trace, args.cluster, args.limit)
    print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
