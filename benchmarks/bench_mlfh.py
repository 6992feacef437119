"""Benchmark: MLF-H's decision time per cycle with 1,000 queued tasks on C120.

    python benchmarks/bench_mlfh.py [--tasks 1000] [--busy 0.85] [--snapshots 20] [--repeats 3]
                                    [--default-gc] [--phases] [--json]

Each snapshot (one seed each) is a busy C120 cluster (120 nodes x 8 GPUs): running jobs hold
``--busy`` of the GPUs, a third of their leases expired, a few servers overloaded; queued jobs of
1-32 GPUs (MLFS §4.1's sizes) hold ``--tasks`` tasks in all. Jobs carry MLFS features as
``mlsched simulate --mlfs-features`` draws them (urgency, model-parallel graphs, per-task load);
nodes report the utilisation their jobs' load gives. Reported: p50 / p95 / max of the wall time
of ``MlfhPolicy.decide`` over snapshots x repeats, in ms, the p50 / p95 of its CPU time (the
same on an idle machine, less inflated on a shared one), the wall p50 / p95 of each snapshot's
first decision alone (``first_``: every job new to the policy, so nothing it keeps between
cycles helps; the repeats see the same jobs again, as consecutive cycles mostly do), the
milliseconds the garbage collector ran inside decisions (``gc_ms``; ``gc_max_ms``: inside
the one decision where it ran longest) and what the decisions
did. The process's collector is set as the controller sets its own
(:func:`mlsched.gctune.tune_for_cycles`, after start-up); ``--default-gc`` keeps CPython's
defaults instead (at ``1871447``, before the decisions allocated less, a full collection
inside a decision added 16-25 ms to it). The paper reports 40-54 ms for 1,860 jobs (MLFS §4.2).

``--phases``: where each snapshot's first decision went (:class:`PhaseClock`; JSON key
``"phases"``): mean ms per first decision placing tasks (``place_queued``, ``place_mover``,
``HostPool.place``), computing priorities (``PriorityBook.priorities``), finding overload movers
(``find_movers``), and the rest; the tasks placed and the placing time per task. The timers
wrap those names where :mod:`controller.policy.mlfs.policy` looks them up, for the first
decisions only (they add a few microseconds a call to ``first_``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import controller.policy.mlfs.policy as mlfh
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView, NodeView
from controller.policy.mlfs.book import PriorityBook
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.policy import MlfhPolicy
from mlsched.gctune import tune_for_cycles
from mlsched.model import Deadline, IterationStop, JobSpec, JobState
from simulator.types import RESOURCES, TraceJob
from simulator.workload import assign_mlfs_features

NODES, GPUS = 120, 8
NOW = 100_000.0
LEASE = 300.0
SIZES = (1, 2, 4, 8, 16, 32)  # §4.1


def _spec(job: TraceJob, gpus: int) -> JobSpec:
    return JobSpec(
        job.id,
        ("train",),
        gpus,
        IterationStop(10_000),
        deadlines=job.deadlines,
        mlfs=job.mlfs,  # type: ignore[arg-type]
    )


def _losses(rng: random.Random, iteration: int) -> tuple[float, ...]:
    if iteration < 2:
        return ()
    first = rng.uniform(2.0, 3.0)
    latest = first * rng.uniform(0.2, 0.9)
    return (first, latest + rng.uniform(0.0, 0.01), latest)


def snapshot(seed: int, queued_tasks: int, busy: float = 0.85) -> ClusterSnapshot:
    """A C120 with ``busy`` of its GPUs held and ``queued_tasks`` queued tasks (module
    docstring)."""
    rng = random.Random(seed)
    free = {f"n{i:03d}": list(range(GPUS)) for i in range(NODES)}
    target = int(busy * NODES * GPUS)
    running: list[tuple[TraceJob, tuple[TaskPlacement, ...]]] = []
    held = 0
    while held < target:
        gpus = min(rng.choice((1, 1, 2, 4, 8)), target - held)
        nodes = [n for n, ids in free.items() if len(ids) >= gpus]
        if not nodes:
            nodes = [n for n, ids in free.items() if ids]
            gpus = 1
        node = rng.choice(nodes)
        ids, free[node] = free[node][:gpus], free[node][gpus:]
        placement = tuple(TaskPlacement(r, node, (g,)) for r, g in enumerate(ids))
        trace = TraceJob(f"r{len(running)}", "u", 0.0, 3600.0, gpus, deadlines=_deadline(rng))
        running.append((trace, placement))
        held += gpus
    queued: list[TraceJob] = []
    count = 0
    while count < queued_tasks:
        gpus = min(rng.choice(SIZES), queued_tasks - count)
        deadline = _deadline(rng)
        queued.append(TraceJob(f"q{len(queued)}", "u", 0.0, 3600.0, gpus, deadlines=deadline))
        count += gpus
    featured = assign_mlfs_features([t for t, _ in running] + queued, rng)
    running = [(t, p) for t, (_, p) in zip(featured[: len(running)], running, strict=True)]
    queued = featured[len(running) :]

    load = {n: [0.0] * len(RESOURCES) for n in free}
    gpu_load: dict[str, dict[int, float]] = {n: {} for n in free}
    active = []
    for trace, placement in running:
        demand = trace.demand
        assert demand is not None
        shares = demand.shares(1, GPUS)
        for p in placement:
            for i, share in enumerate(shares):
                load[p.node_id][i] += share
            gpu_load[p.node_id][p.gpu_indices[0]] = demand.gpu
        iteration = rng.randint(10, 5000)
        active.append(
            JobView(
                id=trace.id,
                user="u",
                spec=_spec(trace, trace.gpus),
                state=JobState.RUNNING,
                submit_time=NOW - 7200,
                queued_since=NOW - 7000,
                attempt=1,
                suspensions=0,
                iteration=iteration,
                lease_expires_at=NOW - 1 if rng.random() < 1 / 3 else NOW + 200,
                placement=placement,
                running_since=NOW - 3000,
                estimated_remaining_s=rng.uniform(60, 20_000),
                losses=_losses(rng, iteration),
                resource_usage={r: s * trace.gpus for r, s in zip(RESOURCES, shares, strict=True)},
            )
        )
    waiting = []
    for trace in queued:
        resumed = rng.random() < 0.3
        iteration = rng.randint(10, 5000) if resumed else 0
        shares = trace.demand.shares(1, GPUS) if trace.demand else ()
        usage = {r: s * trace.gpus for r, s in zip(RESOURCES, shares, strict=True)}
        since = NOW - rng.uniform(0, 20_000)
        waiting.append(
            JobView(
                id=trace.id,
                user="u",
                spec=_spec(trace, trace.gpus),
                state=JobState.SUSPENDED if resumed else JobState.PENDING,
                submit_time=since - 100,
                queued_since=since,
                attempt=int(resumed),
                suspensions=int(resumed),
                iteration=iteration,
                estimated_remaining_s=rng.uniform(60, 20_000),
                losses=_losses(rng, iteration),
                resource_usage=usage if resumed else {},
            )
        )
    nodes = tuple(
        NodeView(
            n,
            tuple(range(GPUS)),
            tuple(free[n]),
            {r: min(1.0, u) for r, u in zip(RESOURCES, load[n], strict=True)},
            {g: gpu_load[n].get(g, 0.0) for g in range(GPUS)},
        )
        for n in sorted(free)
    )
    ordered = tuple(sorted(waiting, key=lambda j: (j.queued_since, j.id)))
    return ClusterSnapshot(NOW, nodes, ordered, tuple(active), default_lease_s=LEASE)


def _deadline(rng: random.Random) -> tuple[Deadline, ...]:
    # §4.1: max(1.1 t_e, t_r), t_r in [0.5, 24] h; t_e = 1 h here
    return (Deadline(max(1.1 * 3600, rng.uniform(0.5, 24) * 3600), 100.0),)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank


class _CollectorClock:
    """A ``gc.callbacks`` entry: seconds the collector ran while ``timing`` is on."""

    def __init__(self) -> None:
        self.timing = False
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self.timing:
            self.seconds += time.perf_counter() - self._started


def _ms(seconds: float) -> float:
    return round(1000 * seconds, 2)


# (owner, attribute, phase): what MlfhPolicy._decide calls, where it looks each name up (the
# functions are imported into the policy's module; the methods are looked up on their class)
PHASE_TARGETS: tuple[tuple[Any, str, str], ...] = (
    (mlfh, "place_queued", "place"),
    (mlfh, "place_mover", "place"),
    (HostPool, "place", "place"),
    (mlfh, "find_movers", "movers"),
    (PriorityBook, "priorities", "priorities"),
)
PHASES = ("place", "priorities", "movers")


class PhaseClock:
    """Seconds and calls per phase of the wrapped functions, only the outermost wrapped call
    timed (``place_queued`` calling ``HostPool.place`` counts once); ``tasks``: the tasks
    ``HostPool.place`` placed."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.calls = dict.fromkeys(PHASES, 0)
        self.tasks = 0
        self._inside = False

    def wrap(self, phase: str, func: Callable[..., Any], counts: bool) -> Callable[..., Any]:
        """``func`` timed as ``phase``; ``counts``: it returns the tasks placed (or None)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._inside:
                result = func(*args, **kwargs)
            else:
                self._inside = True
                started = time.perf_counter()
                try:
                    result = func(*args, **kwargs)
                finally:
                    self.seconds[phase] += time.perf_counter() - started
                    self._inside = False
                self.calls[phase] += 1
            if counts and result is not None:
                self.tasks += len(result)
            return result

        return timed

    @contextlib.contextmanager
    def installed(self) -> Iterator[PhaseClock]:
        """:data:`PHASE_TARGETS` wrapped while inside, restored after."""
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in PHASE_TARGETS]
        try:
            for (owner, name, phase), (_, _, func) in zip(PHASE_TARGETS, saved, strict=True):
                setattr(owner, name, self.wrap(phase, func, owner is HostPool))
            yield self
        finally:
            for owner, name, func in saved:
                setattr(owner, name, func)


def phase_row(clock: PhaseClock, first: list[float]) -> dict[str, float]:
    """Mean ms per first decision per phase, ``rest`` the decision's time outside them."""
    count = len(first)
    row = {f"{p}_ms": _ms(clock.seconds[p] / count) for p in PHASES}
    row["rest_ms"] = _ms((sum(first) - sum(clock.seconds.values())) / count)
    row["total_ms"] = _ms(sum(first) / count)
    row["tasks_placed"] = round(clock.tasks / count, 1)
    per_task = clock.seconds["place"] / clock.tasks if clock.tasks else 0.0
    row["place_us_per_task"] = round(1e6 * per_task, 1)
    row.update({f"{p}_calls": round(clock.calls[p] / count, 1) for p in PHASES})
    return row


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000, help="queued tasks [%(default)s]")
    parser.add_argument("--busy", type=float, default=0.85, help="GPUs held [%(default)s]")
    parser.add_argument("--snapshots", type=int, default=20, help="[%(default)s]")
    parser.add_argument("--repeats", type=int, default=3, help="decisions per snapshot")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="CPython's collector settings, not the controller's",
    )
    parser.add_argument("--phases", action="store_true", help="time the first decisions' phases")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    if not args.default_gc:
        tune_for_cycles()  # as `mlsched controller` does after start-up
    collecting = _CollectorClock()
    gc.callbacks.append(collecting)
    policy = MlfhPolicy()
    times: list[float] = []
    cpu: list[float] = []
    first: list[float] = []  # each snapshot's first decision: nothing kept from before
    launched = migrated = suspended = queued_jobs = 0
    gc_most = 0.0  # the collector's longest time inside one decision
    phases = PhaseClock()
    for seed in range(args.snapshots):
        snap = snapshot(seed, args.tasks, args.busy)
        queued_jobs += len(snap.queued)
        for repeat in range(args.repeats):
            timing = args.phases and repeat == 0
            installed = phases.installed() if timing else contextlib.nullcontext()
            started, cpu_started = time.perf_counter(), time.process_time()
            before = collecting.seconds
            collecting.timing = True
            with installed:
                decision = policy.decide(snap)
            collecting.timing = False
            gc_most = max(gc_most, collecting.seconds - before)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
            if repeat == 0:
                first.append(times[-1])
        launched += len(decision.launch)
        migrated += len(decision.migrate)
        suspended += len(decision.suspend)
    row: dict[str, Any] = {
        "cluster": f"{NODES}x{GPUS}",
        "gc": "default" if args.default_gc else "tuned",
        "busy": args.busy,
        "queued_tasks": args.tasks,
        "queued_jobs_mean": queued_jobs / args.snapshots,
        "decisions": len(times),
        "p50_ms": _ms(statistics.median(times)),
        "p95_ms": _ms(_p95(times)),
        "max_ms": _ms(max(times)),
        "cpu_p50_ms": _ms(statistics.median(cpu)),
        "cpu_p95_ms": _ms(_p95(cpu)),
        "first_p50_ms": _ms(statistics.median(first)),
        "first_p95_ms": _ms(_p95(first)),
        "gc_ms": _ms(collecting.seconds),
        "gc_max_ms": _ms(gc_most),
        "launches_per_decision": launched / args.snapshots,
        "migrations_per_decision": migrated / args.snapshots,
        "suspensions_per_decision": suspended / args.snapshots,
    }
    if args.phases:
        row["phases"] = phase_row(phases, first)
    _print(row, args.json)
    return 0


def _print(row: dict[str, Any], as_json: bool) -> None:
    """``row`` as one JSON object, or a line per figure (a nested dict's indented)."""
    if as_json:
        print(json.dumps(row))
        return
    for key, value in row.items():
        if isinstance(value, dict):
            print(f"{key:>26}:")
            for name, figure in value.items():
                print(f"{name:>30} {figure}")
        else:
            print(f"{key:>26} {value}")


if __name__ == "__main__":
    sys.exit(main())
