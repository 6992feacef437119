"""SLAQ against fair under different resize costs, side by side (docs/slaq.md, issue 14).

    nice -n 10 python benchmarks/slaq_worlds.py --format ones \\
        --trace ../shared/data/ones/trace_1.csv [--policy slaq,fair] \\
        [--worlds restart,regroup:1,free] [--cluster 16x4 --lease-seconds 60 --cycle-seconds 10]

A world fixes what every resize costs, for every policy of the run alike (the simulator's
``simulator/resize_cost.py`` model):

- ``restart``: the default: a batch change in place 1 s, any GPU change a checkpoint-restart
  (the job model's 4 s + 20 s + 0.36 s/GPU); SLAQ counts its measured t_sr (25 s before one).
- ``regroup:S``: GPU changes with every rank on one node regroup in place for ``S`` seconds
  (engine and SLAQ's prediction alike); other GPU changes restart.
- ``inplace:S``: a what-if: every GPU change regroups in place for ``S`` seconds, whatever the
  nodes (ONES' in-place scaling assumption; the live regroup is per node).
- ``free``: the paper's assumption (§4.3, §5: Spark cores move for free): every suspension,
  resumption and resize costs 0 s, and SLAQ plans without a pause (``pause_s=0``).

``+linear`` after a world (before ``@``) makes every job's speed linear in its GPUs (g / its
request, SLAQ §4.2.1's assumption) instead of the measured tables. ``@L`` after a world sets
its lease (SLAQ's scheduling epoch) to ``L`` seconds instead of
``--lease-seconds``, e.g. ``free@20``. Prints, per world and policy, the quality metrics
(``quality_avg``; the average normalised loss 1 - quality, which the paper's "73 %" compares;
delays to 90 / 95 % of the final reduction, avg / median), JCT, resizes per job, and the
seconds per job spent holding GPUs without progress (pauses).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from controller.policy.registry import make_policy  # noqa: E402
from simulator.cli import parse_cluster  # noqa: E402
from simulator.elastic import LOADERS, BatchProfile, ElasticJobModel, data_folder  # noqa: E402
from simulator.engine import SimConfig, Simulation  # noqa: E402
from simulator.metrics import compute_metrics  # noqa: E402
from simulator.resize_cost import ResizeCosts  # noqa: E402
from simulator.types import JobRecord, TraceJob  # noqa: E402


@dataclass(frozen=True)
class World:
    name: str
    costs: ResizeCosts
    free: bool  # suspensions and resumptions cost nothing either
    lease_s: float
    linear: bool  # speed linear in GPUs (SLAQ §4.2.1's c S / N holds)


def world(text: str, lease_s: float) -> World:
    """A ``--worlds`` entry (module docstring); ValueError if malformed."""
    name, _, lease = text.partition("@")
    lease_s = float(lease) if lease else lease_s
    name, linear = name.removesuffix("+linear"), name.endswith("+linear")
    kind, _, value = name.partition(":")
    if kind == "restart" and not value:
        return World(text, ResizeCosts(), False, lease_s, linear)
    if kind == "regroup" and value:
        return World(text, ResizeCosts(regroup_s=float(value)), False, lease_s, linear)
    if kind == "inplace" and value:
        costs = ResizeCosts(regroup_s=float(value), regroup_any=True)
        return World(text, costs, False, lease_s, linear)
    if kind == "free" and not value:
        return World(text, ResizeCosts(batch_s=0.0, regroup_s=0.0), True, lease_s, linear)
    raise ValueError(f"unknown world {text!r}: restart, regroup:S, inplace:S or free")


def linear_speed(job: TraceJob) -> TraceJob:
    """``job`` whose speed on g GPUs is g / its request: its measured tables dropped, so the
    engine's speed (``BatchProfile.throughput``) and the iteration times reported to the
    policy (``ElasticJobModel.speed``) both follow ``speedup``."""
    most = len(job.elastic.speedup)
    speedup = tuple(g / job.gpus for g in range(1, most + 1))
    changes: dict = {"speedup": speedup}
    if isinstance(job.elastic, BatchProfile):
        changes["tables"] = None
    return dataclasses.replace(job, elastic=dataclasses.replace(job.elastic, **changes))


def paused_s(record: JobRecord) -> float:
    """Seconds a job held GPUs without progress after its first start (pauses)."""
    points = sorted(record.progress)
    return sum(t1 - t0 for (t0, w0), (t1, w1) in itertools.pairwise(points) if w1 <= w0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--format", choices=sorted(LOADERS), required=True)
    p.add_argument("--policy", default="slaq,fair")
    p.add_argument("--worlds", default="restart,regroup:1,free")
    p.add_argument("--cluster", default="16x4")
    p.add_argument("--lease-seconds", type=float, default=60.0)
    p.add_argument("--cycle-seconds", type=float, default=10.0)
    p.add_argument("--limit", type=int, help="only the first N jobs (a smoke run)")
    args = p.parse_args(argv)
    worlds = [world(w, args.lease_seconds) for w in args.worlds.split(",")]
    data = data_folder(args.trace)
    jobs = LOADERS[args.format](args.trace, data)[: args.limit]
    shape = parse_cluster(args.cluster)
    source = str(data / "pollux" / "traces")
    print(f"{len(jobs)} jobs on {shape.nodes}x{shape.gpus_per_node} GPUs")
    print(
        f"{'world':<14} {'policy':<12} {'quality':>7} {'loss':>6} {'d90 avg/med (min)':>18} "
        f"{'d95 avg/med (min)':>18} {'JCT min':>8} {'resz/job':>8} {'paused s':>8}"
    )
    for w in worlds:
        zero = {"suspend_s": 0.0, "resume_base_s": 0.0, "resume_per_gpu_s": 0.0}
        model = ElasticJobModel(source=source, seed=0, **(zero if w.free else {}))
        config = SimConfig(lease_s=w.lease_s, cycle_s=args.cycle_seconds, resize=w.costs)
        run_jobs = [linear_speed(j) for j in jobs] if w.linear else jobs
        name = w.name
        for policy_name in args.policy.split(","):
            policy = make_policy(policy_name)
            if policy_name.startswith("slaq"):
                policy.regroup_s = w.costs.regroup_s
                policy.regroup_any = w.costs.regroup_any
                if w.free:
                    policy.pause_s = 0.0
            result = Simulation(run_jobs, policy, shape, model, config).run()
            m = compute_metrics(result)
            q = m["quality_avg"]
            d90, d95 = m["delay_90_s"], m["delay_95_s"]
            done = [r for r in result.records if r.end_s is not None]
            pause = sum(paused_s(r) for r in done) / max(1, len(done))
            print(
                f"{name:<14} {policy_name:<12} {100 * q:7.1f} {1 - q:6.3f} "
                f"{d90['avg'] / 60:9.2f}/{d90['median'] / 60:<8.2f} "
                f"{d95['avg'] / 60:9.2f}/{d95['median'] / 60:<8.2f} "
                f"{m['jct_s']['all']['avg'] / 60:8.1f} {m['resizes_per_job']:8.2f} {pause:8.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
