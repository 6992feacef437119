"""ONES against its baselines under variants of the simulator and of ONES (docs/ones.md).

    python benchmarks/ones_variants.py [--trace PATH] [--format ones|pollux] [--gpus 64]
        [--policy ones,optimus,tiresias,fifo,fair] [--pause-s S] [--no-epoch-gate]

``--pause-s S``: every checkpoint-restart (suspension, resumption, a GPU-count change) costs
``S`` seconds in all instead of the measured 4 s + 20 s + 0.36 s/GPU, the world in which ONES'
in-place scaling (§3.3.1, about 1 s) also changes GPU counts. ``--no-epoch-gate``: ONES
deploys its best schedule every cycle instead of after every running job finished an epoch.
Prints per policy: average JCT, average wait to the first start, average time after it, resizes
and suspensions per job (seconds; 4-GPU nodes, cycles of the CLI's defaults).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from controller.policy import make_policy
from controller.policy.ones import OnesPolicy
from simulator.elastic import LOADERS, ElasticJobModel, data_folder
from simulator.engine import ClusterShape, SimConfig, Simulation

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DATA / "ones" / "trace_1.csv")
    parser.add_argument("--format", choices=sorted(LOADERS), default="ones")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--policy", default="ones,optimus,tiresias,fifo,fair")
    parser.add_argument("--pause-s", type=float, default=None)
    parser.add_argument("--no-epoch-gate", action="store_true")
    args = parser.parse_args()
    jobs = LOADERS[args.format](args.trace, data_folder(args.trace))
    costs = {}
    if args.pause_s is not None:
        costs = {"suspend_s": args.pause_s / 2, "resume_base_s": args.pause_s / 2}
        costs["resume_per_gpu_s"] = 0.0
    print(f"{len(jobs)} jobs, {args.gpus} GPUs, pause {args.pause_s or 'measured'}")
    print("policy      JCT  first-wait  after  resizes/job  suspensions/job")
    for name in args.policy.split(","):
        policy = make_policy(name)
        if args.no_epoch_gate and isinstance(policy, OnesPolicy):
            policy._due = lambda snapshot: True  # type: ignore[method-assign]
        model = ElasticJobModel(**costs)
        shape = ClusterShape(args.gpus // 4, 4)
        result = Simulation(jobs, policy, shape, model, SimConfig()).run()
        done = [r for r in result.records if r.jct_s is not None]
        n = max(1, len(done))
        jct = sum(r.jct_s for r in done) / n
        wait = sum(r.queue_s for r in done) / n
        resizes = sum(r.resizes for r in done) / n
        suspensions = sum(r.suspensions for r in done) / n
        print(
            f"{name:9s} {jct:6.0f} {wait:10.0f} {jct - wait:6.0f} {resizes:12.2f} "
            f"{suspensions:16.2f}  ({len(done)}/{len(jobs)} done)",
            flush=True,
        )


if __name__ == "__main__":
    main()
