"""ONES against its baselines, at the measured checkpoint-restart cost and at ONES' in-place
cost side by side, with where each policy's time after a job's first start goes
(docs/ones.md, issue 15).

    python benchmarks/ones_variants.py [--trace PATH] [--format ones|pollux] [--gpus 64]
        [--policy ones,optimus,tiresias,fair,fifo] [--pauses measured,1] [--no-epoch-gate]
        [--seed N]

``pollux`` (docs/pollux.md) may be named among the policies; ``--seed`` seeds ONES' and
Pollux's generators alike.

``--pauses``: each entry is one world every policy runs in: ``measured`` (a suspension,
resumption or GPU-count change costs the job model's 4 s + 20 s + 0.36 s/GPU) or a number of
seconds ``S`` that every such pause costs in all (ONES' in-place scaling, §3.3.1: about 1 s).
A batch change on the same GPUs costs 1 s in every world. ``--no-epoch-gate``: ONES deploys its
best schedule every cycle instead of after every running job finished an epoch.

Per policy and world, averages per completed job (seconds unless named): JCT, the wait to the
first start and the time after it, split into ``train`` (making progress), ``held`` (holding
GPUs without progress: checkpoint-restart and in-place pauses) and ``out`` (preempted,
waiting again); during training the time-weighted mean ``gpus``, throughput against the trace's
own allocation (``X/X0``: GPUs and per-GPU batch efficiency) and ``E0/E`` (samples to converge
at the trace's batch over those at the batch used: below 1 when a batch past B_crit costs
samples); ``gpu_s`` held; resizes and suspensions per job.
"""

from __future__ import annotations

import argparse
import itertools
import os
from bisect import bisect_right
from collections import defaultdict
from pathlib import Path

from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, Decision
from controller.policy.ones import OnesPolicy
from controller.policy.pollux import PolluxPolicy
from simulator.elastic import LOADERS, BatchProfile, ElasticJobModel, data_folder
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.types import JobRecord

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))


class Recorder:
    """A policy seen from outside: each job's (time, GPUs, global batch) after every decision
    (the simulator refuses none of these orders in the runs reported: it counts refusals)."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.name = getattr(policy, "name", type(policy).__name__)
        self.timeline: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
        self._batch: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = self.policy.decide(snapshot)
        now = snapshot.now
        for job in (*snapshot.active, *snapshot.queued):
            self._batch.setdefault(job.id, job.spec.batch_size)
        for item in decision.suspend:
            self.timeline[item.job_id].append((now, 0, self._batch[item.job_id]))
        for item in decision.launch:
            gpus = sum(len(p.gpu_indices) for p in item.placement)
            self.timeline[item.job_id].append((now, gpus, self._batch[item.job_id]))
        for item in decision.resize:
            gpus = sum(len(p.gpu_indices) for p in item.placement)
            batch = self._batch[item.job_id]
            batch = item.batch_size or (max(batch, gpus) if batch else 0)
            self._batch[item.job_id] = batch
            self.timeline[item.job_id].append((now, gpus, batch))
        return decision


def breakdown(record: JobRecord, timeline: list[tuple[float, int, int]]) -> dict[str, float]:
    """One completed job's time after its first start by cause, and its training conditions."""
    out = dict.fromkeys(("train", "held", "out", "gpus", "x", "e"), 0.0)
    times = [t for t, _, _ in timeline]
    profile = record.job.elastic
    points = record.progress
    for (t0, w0), (t1, w1) in itertools.pairwise(points):
        if t1 <= t0:
            continue
        k = bisect_right(times, t0) - 1
        _, gpus, batch = timeline[k] if k >= 0 else (t0, 0, 0)
        dt = t1 - t0
        if w1 <= w0:
            out["held" if gpus else "out"] += dt
            continue
        out["train"] += dt
        out["gpus"] += dt * gpus
        if isinstance(profile, BatchProfile) and batch and gpus:
            own = profile.throughput(profile.gpus, profile.batch)
            out["x"] += dt * profile.throughput(gpus, batch) / own
            out["e"] += dt * profile.samples_needed(profile.batch) / profile.samples_needed(batch)
    if out["train"] > 0:
        for key in ("gpus", "x", "e"):
            out[key] /= out["train"]
    return out


def busy(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """Time-weighted mean of the busy-GPU step function over [start, end]."""
    total = 0.0
    for (t0, n), (t1, _) in itertools.pairwise([*samples, (end, 0)]):
        total += n * max(0.0, min(t1, end) - max(t0, start))
    return total / (end - start) if end > start else 0.0


def run(jobs, name: str, gpus: int, pause: str, no_gate: bool, seed: int) -> str:
    costs = {}
    if pause != "measured":
        costs = {"suspend_s": float(pause) / 2, "resume_base_s": float(pause) / 2}
        costs["resume_per_gpu_s"] = 0.0
    policy = make_policy(name)
    if isinstance(policy, OnesPolicy):
        policy = OnesPolicy(seed=seed)
        if no_gate:
            policy._due = lambda snapshot: True  # type: ignore[method-assign]
    elif isinstance(policy, PolluxPolicy):
        policy = PolluxPolicy(seed=seed)
    recorder = Recorder(policy)
    model = ElasticJobModel(**costs)
    result = Simulation(jobs, recorder, ClusterShape(gpus // 4, 4), model, SimConfig()).run()
    done = [r for r in result.records if r.jct_s is not None]
    n = max(1, len(done))
    parts = [breakdown(r, recorder.timeline[r.job.id]) for r in done]
    mean = {k: sum(p[k] for p in parts) / n for k in parts[0]} if parts else {}
    jct = sum(r.jct_s for r in done) / n
    wait = sum(r.queue_s for r in done) / n
    deployed = f", {policy.deployments} deployments" if isinstance(policy, OnesPolicy) else ""
    if isinstance(policy, PolluxPolicy):
        deployed = f", {policy.rounds} rounds"
    refused = result.refused_launches + result.refused_resizes
    first = min(j.submit_s for j in jobs)
    last = max((r.end_s for r in done), default=first)
    return (
        f"{pause:>8s} {name:9s} {jct:6.0f} {wait:6.0f} {jct - wait:6.0f} "
        f"{mean.get('train', 0):6.0f} {mean.get('held', 0):5.0f} {mean.get('out', 0):5.0f} "
        f"{mean.get('gpus', 0):5.2f} {mean.get('x', 0):5.2f} {mean.get('e', 0):5.2f} "
        f"{sum(r.gpu_s for r in done) / n:7.0f} {sum(r.resizes for r in done) / n:5.2f} "
        f"{sum(r.suspensions for r in done) / n:5.2f} "
        f"{busy(result.utilization, first, last):5.1f}  ({len(done)}/{len(jobs)} done, "
        f"{refused} refused{deployed})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DATA / "ones" / "trace_1.csv")
    parser.add_argument("--format", choices=sorted(LOADERS), default="ones")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--policy", default="ones,optimus,tiresias,fair,fifo")
    parser.add_argument("--pauses", default="measured,1")
    parser.add_argument("--no-epoch-gate", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    jobs = LOADERS[args.format](args.trace, data_folder(args.trace))
    print(f"{len(jobs)} jobs, {args.gpus} GPUs, {args.trace.name}")
    print(
        "   pause policy       JCT  first  after  train  held   out  gpus  X/X0  E0/E"
        "   gpu_s  rsz/j susp/j busy"
    )
    for pause in args.pauses.split(","):
        for name in args.policy.split(","):
            print(run(jobs, name, args.gpus, pause, args.no_epoch_gate, args.seed), flush=True)


if __name__ == "__main__":
    main()
