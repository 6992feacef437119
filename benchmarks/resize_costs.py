"""Measure what a resize costs on the live control plane, per mechanism (docs/elastic.md).

Runs a local cluster (real controller, agent and DDP example processes; virtual GPUs) under
``ones`` with two elastic jobs of a scheduler-chosen batch on one node of 4 GPUs, until both
reach their accuracy target, and prints every resize's cost as the controller recorded it
(order to training again, ``job_resized``) grouped by mechanism, with the load average.

    .venv/bin/python benchmarks/resize_costs.py [--jobs 2] [--target 0.95] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from mlsched.localcluster import ClusterTiming, LocalCluster
from mlsched.model import BatchRule, ElasticSpec, JobSpec, MetricGoal, TargetMetricStop

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
COST = re.compile(r"by (.+?) in ([0-9.]+) s")
TIMING = ClusterTiming(lease_s=30.0, cycle_s=0.5, heartbeat_interval_s=0.5, suspend_grace_s=60.0)


def job_spec(name: str, seed: int, target: float) -> JobSpec:
    spec = JobSpec(
        name=name,
        command=(sys.executable, str(EXAMPLES / "ddp_classifier.py"), "--seed", str(seed)),
        gpus=1,
        stopping=TargetMetricStop("accuracy", target, MetricGoal.MAXIMIZE, 10**6),
        working_dir=str(EXAMPLES),
        env=(("OMP_NUM_THREADS", "1"),),
        batch_size=64,
    )
    spec = replace(spec, command=(*spec.command, "--train-size", "4000", "--lr", "0.0001"))
    elastic = ElasticSpec(1, 2, BatchRule.SCHEDULER, max_batch_size=512, linear_lr=True)
    return replace(spec, elastic=elastic)


def run(root: Path, jobs: int, target: float) -> dict[str, list[float]]:
    cluster = LocalCluster(root, TIMING, "ones")
    costs: dict[str, list[float]] = {}
    try:
        cluster.start_controller()
        cluster.start_agent("node-a", gpus=4)
        cluster.wait_for_nodes({"node-a"})
        with cluster.client() as client:
            ids = {client.submit(job_spec(f"ones-{i}", i, target)).id for i in range(jobs)}
            left = set(ids)
            for event in client.events(follow=True, timeout_s=1800.0):
                if event.kind == "job_resized":
                    match = COST.search(event.message)
                    if match:
                        costs.setdefault(match[1], []).append(float(match[2]))
                if (
                    event.kind == "job_state"
                    and event.job_id in left
                    and "-> COMPLETED" in event.message
                ):
                    left.discard(event.job_id)
                if not left:
                    break
    finally:
        cluster.stop()
    return costs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--target", type=float, default=0.95)
    p.add_argument("--keep", default=None, help="run under this directory and keep it")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(args.keep) if args.keep else Path(scratch)
        costs = run(root, args.jobs, args.target)
    print(f"load average (1, 5, 15 min) at the end: {os.getloadavg()}")
    for mechanism, values in sorted(costs.items()):
        print(
            f"{mechanism:16s} n={len(values):2d}  median {statistics.median(values):6.2f} s  "
            f"min {min(values):6.2f} s  max {max(values):6.2f} s"
        )
    if not costs:
        print("no resize completed")


if __name__ == "__main__":
    main()
