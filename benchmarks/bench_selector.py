"""UniSched selector latency per cycle on C120 with many active jobs (issue: p95 <= 1 s at 500).

Each trial builds a random but realistic snapshot: ``jobs`` active jobs on 120 x 8 GPUs, GPU
counts drawn like Philly's (mostly 1, some 2/4/8/16), 70 % SLO (deadlines 1.1-2x the duration),
the cluster filled greedily by the earliest jobs and half of those leases expired, the rest
queued; then times ``UniSchedPolicy.decide`` (estimation, MILP build and solve, placement).

    python benchmarks/bench_selector.py --json            # CBC and HiGHS, 300/500/1000 jobs
    python benchmarks/bench_selector.py --solvers cbc --jobs 500 --trials 20
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from controller.placement import TaskPlacement, place_job, without
from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState, SpeedSample

NODES = {f"n{i:03d}": 8 for i in range(120)}
LEASE_S = 300.0
SIZES = (1, 1, 1, 1, 1, 1, 2, 2, 4, 4, 8, 8, 8, 16)


def snapshot(jobs: int, seed: int) -> ClusterSnapshot:
    rng = random.Random(seed)
    now = 100_000.0
    free = {n: tuple(range(c)) for n, c in NODES.items()}
    active, queued = [], []
    for i in range(jobs):
        gpus = rng.choice(SIZES)
        iterations = rng.randint(500, 20_000)
        t_comp = rng.uniform(0.05, 1.0)
        samples = (SpeedSample(min(gpus, 2), 1, t_comp * 1.08, t_comp),)
        duration = iterations * (t_comp + (gpus - 1) * 0.08 * t_comp)
        slo = rng.random() < 0.7
        submit = now - rng.uniform(0, duration)
        deadlines = (Deadline(duration * rng.uniform(1.1, 2.0), 100.0),) if slo else ()
        spec = JobSpec(
            name=f"j{i}",
            command=("train",),
            gpus=gpus,
            stopping=IterationStop(iterations),
            job_class=JobClass.STRICT_SLO if slo else JobClass.BEST_EFFORT,
            deadlines=deadlines,
        )
        placement: tuple[TaskPlacement, ...] | None = place_job(free, gpus, 1)
        base = dict(
            id=f"j{i}",
            user="u",
            spec=spec,
            submit_time=submit,
            queued_since=submit,
            attempt=1,
            suspensions=0,
            iteration=rng.randint(0, iterations // 2),
            speed_samples=samples,
            sr_overhead_s=rng.uniform(10, 40),
        )
        if placement is not None:
            free = without(free, placement)
            expires = now - 1 if rng.random() < 0.5 else now + LEASE_S / 2
            active.append(
                JobView(
                    state=JobState.RUNNING,
                    placement=placement,
                    lease_expires_at=expires,
                    running_since=now - LEASE_S,
                    **base,
                )
            )
        else:
            queued.append(JobView(state=JobState.PENDING, **base))
    return ClusterSnapshot.of(now, NODES, active=active, queued=queued, default_lease_s=LEASE_S)


def measure(solver: str, jobs: int, trials: int) -> dict[str, float]:
    times = []
    for seed in range(trials):
        snap = snapshot(jobs, seed)
        # In-process MILP: a fresh policy per trial would otherwise time its worker's start-up
        # (the isolated worker's pipe costs a few ms a cycle; docs/unisched.md).
        config = UniSchedConfig(solver=solver, time_limit_s=5.0, isolate_solver=False)
        policy = UniSchedPolicy(config)
        started = time.perf_counter()
        policy.decide(snap)
        times.append(time.perf_counter() - started)
    times.sort()
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"p50_s": statistics.median(times), "p95_s": p95, "max_s": times[-1], "trials": trials}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solvers", nargs="+", default=["cbc", "highs"])
    parser.add_argument("--jobs", nargs="+", type=int, default=[300, 500, 1000])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, float]]] = {}
    UniSchedPolicy(UniSchedConfig(isolate_solver=False)).decide(snapshot(10, 0))  # load once
    for solver in args.solvers:
        for jobs in args.jobs:
            results.setdefault(solver, {})[str(jobs)] = measure(solver, jobs, args.trials)
            if not args.json:
                r = results[solver][str(jobs)]
                print(
                    f"{solver:>6} {jobs:>5} jobs  p50 {r['p50_s'] * 1000:8.1f} ms  "
                    f"p95 {r['p95_s'] * 1000:8.1f} ms  max {r['max_s'] * 1000:8.1f} ms",
                    flush=True,
                )
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
