"""The discrete-event simulation engine.

The simulated cluster is driven exactly like the live one: at each scheduling cycle the engine
builds a :class:`ClusterSnapshot`, asks the *same* policy object the controller uses for a
:class:`Decision`, and applies it. Cycles happen at every lease boundary (leases are aligned to
a grid of ``lease_s``, as UniSched schedules at lease boundaries) and, like the live
controller's triggered cycles, at most every ``cycle_s`` after a job arrives or ends.

Job progress is measured in *work seconds*: seconds of training at the requested GPU count on
one node. A running job makes ``speed`` work seconds per second (the job model's placement
factor); suspension keeps all progress (the trainer checkpoints at the lease boundary) and costs
``suspend_s`` of held GPUs, resumption costs ``resume_s`` before progress restarts.
Deterministic: no randomness, ties broken by insertion order.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, JobView, NodeView, Policy
from mlsched.model import IterationStop, JobSpec, JobState
from simulator.types import JobModel, JobRecord, SimResult, TraceJob

_ARRIVE, _RELEASE, _FINISH = 0, 1, 2
_EPS = 1e-6


@dataclass(frozen=True)
class ClusterShape:
    nodes: int
    gpus_per_node: int

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


# UniSched §IV-A: two homogeneous clusters of 8-GPU nodes.
PRESETS = {"C120": ClusterShape(120, 8), "C96": ClusterShape(96, 8)}


@dataclass(frozen=True)
class SimConfig:
    lease_s: float = 300.0  # UniSched's BE lease (5 min)
    cycle_s: float = 60.0  # the least time between two triggered cycles
    check_invariants: bool = False
    max_time_s: float | None = None  # stop the clock here (None: run until every job ends)


_NO_METRICS: Mapping[str, float] = MappingProxyType({})
_VIEW_FIELDS = frozenset(f.name for f in fields(JobView))


def _job_view(values: dict[str, object]) -> JobView:
    """A JobView from every one of its fields, without running ``__init__``: the frozen
    dataclass's field-by-field ``object.__setattr__`` dominated simulation time (the result is
    equal to ``JobView(**values)``; a test checks it)."""
    view = object.__new__(JobView)
    view.__dict__.update(values)
    return view


class InvariantViolation(AssertionError):
    """The simulation broke one of its own rules (a bug, never a property of the trace)."""


class _Job:
    """Mutable simulation state of one job."""

    __slots__ = (
        "attempt",
        "attempt_start",
        "gpus",
        "lease_expires",
        "placement",
        "progress_from",
        "queued_since",
        "record",
        "remaining",
        "spec",
        "speed",
        "state",
        "static_view",
        "trace",
        "version",
        "work",
    )

    def __init__(self, trace: TraceJob, work: float) -> None:
        self.trace = trace
        self.spec = JobSpec(
            name=trace.id,
            command=("simulated",),
            gpus=trace.gpus,
            stopping=IterationStop(max(1, trace.iterations)),
            job_class=trace.job_class,
            deadlines=trace.deadlines,
        )
        self.record = JobRecord(job=trace)
        self.gpus = trace.gpus
        self.static_view: dict[str, object] = {
            "id": trace.id,
            "user": trace.user,
            "spec": self.spec,
            "submit_time": trace.submit_s,
            "iteration": 0,
            "metrics": _NO_METRICS,
            "model": trace.model,
        }
        self.state = JobState.PENDING
        self.work = work
        self.remaining = work
        self.placement: tuple[TaskPlacement, ...] = ()
        self.speed = 1.0
        self.progress_from = 0.0  # when progress (re)starts after the resume overhead
        self.attempt_start = 0.0
        self.lease_expires = 0.0
        self.queued_since = trace.submit_s
        self.version = 0
        self.attempt = 0

    def remaining_at(self, now: float) -> float:
        if self.state is not JobState.RUNNING or now <= self.progress_from:
            return self.remaining
        return max(0.0, self.remaining - (now - self.progress_from) * self.speed)


class Simulation:
    """One run of one policy over one trace."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        policy: Policy,
        shape: ClusterShape,
        model: JobModel,
        config: SimConfig = SimConfig(),
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self._policy = policy
        self._shape = shape
        self._model = model
        self._config = config
        self._progress = progress
        self._jobs = [_Job(t, model.work_s(t)) for t in sorted(jobs, key=lambda j: j.submit_s)]
        self._free = {f"n{i:03d}": set(range(shape.gpus_per_node)) for i in range(shape.nodes)}
        self._all_gpus = tuple(range(shape.gpus_per_node))
        self._node_views: dict[str, NodeView] = {}
        self._dirty_nodes: set[str] = set(self._free)
        self._indices = {j.trace.id: i for i, j in enumerate(self._jobs)}
        if len(self._indices) != len(self._jobs):
            raise ValueError("job ids in a trace must be unique")
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._now = 0.0
        self._busy = 0
        self._queued: dict[str, _Job] = {}
        self._queued_views: dict[str, JobView] = {}  # same order as _queued
        self._active: dict[str, _Job] = {}
        self._releasing: dict[str, _Job] = {}
        self._done = 0
        self._result = SimResult(
            policy=getattr(policy, "name", type(policy).__name__),
            total_gpus=shape.total_gpus,
            records=[j.record for j in self._jobs],
        )

    # --- the event loop ----------------------------------------------------------------------
    def run(self) -> SimResult:
        started = time.perf_counter()
        for index, job in enumerate(self._jobs):
            self._push(job.trace.submit_s, _ARRIVE, index, 0)
        lease, gap = self._config.lease_s, self._config.cycle_s
        last_cycle = -math.inf
        trigger_at: float | None = None  # a cycle owed to an arrival or an end
        while self._heap or self._active or self._releasing or self._queued:
            if not (self._heap or self._active or self._releasing):
                if trigger_at is None:
                    break  # the last cycle saw this state and launched nothing: stuck for good
                self._advance(trigger_at)
                self._cycle()
                last_cycle, trigger_at = self._now, None
                continue
            times = [self._heap[0][0]] if self._heap else []
            if self._active or self._queued or self._releasing:
                times.append(
                    lease * (math.floor(max(last_cycle, 0.0) / lease) + 1)
                    if last_cycle > -math.inf
                    else self._now
                )
            if trigger_at is not None:
                times.append(trigger_at)
            t = max(min(times), self._now)
            if self._config.max_time_s is not None and t > self._config.max_time_s:
                break
            self._advance(t)
            if self._drain_events(t) and trigger_at is None:
                trigger_at = max(t, last_cycle + gap)
            on_boundary = (
                last_cycle == -math.inf
                or t >= lease * (math.floor(max(last_cycle, 0.0) / lease) + 1) - _EPS
            )
            if on_boundary or (trigger_at is not None and t >= trigger_at - _EPS):
                self._cycle()
                last_cycle = t
                trigger_at = None
        self._finish(started)
        return self._result

    def _push(self, t: float, kind: int, index: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, index, version))

    def _advance(self, t: float) -> None:
        if t < self._now - _EPS:
            raise InvariantViolation(f"time went backwards: {self._now} -> {t}")
        self._now = max(self._now, t)

    def _drain_events(self, t: float) -> bool:
        """Process every event due by ``t``; True when a cycle could now start something:
        GPUs were freed, or a job arrived while some GPU is free. (With every GPU busy an
        arrival can only preempt, and preemption waits for a lease boundary.)"""
        worth_a_cycle = False
        while self._heap and self._heap[0][0] <= t + _EPS:
            _, _, kind, index, version = heapq.heappop(self._heap)
            job = self._jobs[index]
            if kind == _ARRIVE:
                job.state = JobState.PENDING
                self._enqueue(job)
                worth_a_cycle |= self._busy < self._shape.total_gpus
            elif version == job.version:
                if kind == _FINISH:
                    self._complete(job)
                else:
                    self._released(job)
                worth_a_cycle = True
        return worth_a_cycle

    # --- cycles ------------------------------------------------------------------------------
    def _cycle(self) -> None:
        snapshot = self._snapshot()
        started = time.perf_counter()
        decision = self._policy.decide(snapshot)
        self._result.decision_times_s.append(time.perf_counter() - started)
        self._apply(snapshot, decision)
        if self._config.check_invariants:
            self._check_gpus()

    def _snapshot(self) -> ClusterSnapshot:
        now = self._now
        for node_id in self._dirty_nodes:
            self._node_views[node_id] = NodeView(
                node_id, self._all_gpus, tuple(sorted(self._free[node_id]))
            )
        self._dirty_nodes.clear()
        nodes = tuple(self._node_views.values())
        return ClusterSnapshot(
            now=now,
            nodes=nodes,
            queued=tuple(self._queued_views.values()),
            active=tuple(self._view(j) for j in self._active.values()),
            busy=tuple(self._view(j) for j in self._releasing.values()),
            default_lease_s=self._config.lease_s,
        )

    def _enqueue(self, job: _Job) -> None:
        self._queued[job.trace.id] = job
        self._queued_views[job.trace.id] = self._view(job)

    def _view(self, job: _Job) -> JobView:
        now = self._now
        values = job.static_view.copy()  # the fields that never change
        values["state"] = state = job.state
        values["queued_since"] = job.queued_since
        values["attempt"] = job.attempt
        values["suspensions"] = job.record.suspensions
        values["placement"] = job.placement
        if job.placement:
            running = state is JobState.RUNNING
            remaining = job.remaining
            if running and now > job.progress_from:
                remaining = max(0.0, remaining - (now - job.progress_from) * job.speed)
            values["lease_expires_at"] = job.lease_expires if running else None
            values["running_since"] = job.attempt_start
            values["attained_gpu_s"] = job.record.gpu_s + (now - job.attempt_start) * job.gpus
            values["estimated_remaining_s"] = remaining / max(job.speed, _EPS)
        else:
            values["lease_expires_at"] = None
            values["running_since"] = None
            values["attained_gpu_s"] = job.record.gpu_s
            values["estimated_remaining_s"] = job.remaining
        return _job_view(values)

    def _apply(self, snapshot: ClusterSnapshot, decision: Decision) -> None:
        handled: set[str] = set()
        for item in decision.suspend:
            job = self._active.get(item.job_id)
            if job is not None:
                self._suspend(job)
                handled.add(job.trace.id)
        for item in decision.renew:
            job = self._active.get(item.job_id)
            if job is not None and item.job_id not in handled:
                job.lease_expires = self._now + item.lease_s
                handled.add(item.job_id)
        for view in snapshot.expired():
            job = self._active.get(view.id)
            if job is not None and view.id not in handled:
                self._suspend(job)  # a lease neither renewed nor suspended expires
        for item in decision.launch:
            job = self._queued.get(item.job_id)
            if job is not None and self._fits(item.placement, job):
                self._launch(job, item.placement, item.lease_s)

    def _fits(self, placement: tuple[TaskPlacement, ...], job: _Job) -> bool:
        if sum(len(p.gpu_indices) for p in placement) != job.trace.gpus:
            return False
        taken: set[tuple[str, int]] = set()
        for p in placement:
            free = self._free.get(p.node_id)
            for gpu in p.gpu_indices:
                if free is None or gpu not in free or (p.node_id, gpu) in taken:
                    return False
                taken.add((p.node_id, gpu))
        return True

    # --- job transitions ---------------------------------------------------------------------
    def _launch(self, job: _Job, placement: tuple[TaskPlacement, ...], lease_s: float) -> None:
        now = self._now
        if now < job.trace.submit_s - _EPS:
            raise InvariantViolation(f"{job.trace.id} runs before its submission")
        for p in placement:
            self._free[p.node_id].difference_update(p.gpu_indices)
            self._dirty_nodes.add(p.node_id)
        self._set_busy(self._busy + job.trace.gpus)
        del self._queued[job.trace.id]
        del self._queued_views[job.trace.id]
        self._active[job.trace.id] = job
        nodes = len({p.node_id for p in placement})
        job.record.nodes_used = max(job.record.nodes_used, nodes)
        if job.record.first_start_s is None:
            job.record.first_start_s = now
        overhead = self._model.resume_s(job.trace, job.trace.gpus) if job.attempt else 0.0
        job.attempt += 1
        job.version += 1
        job.state = JobState.RUNNING
        job.placement = placement
        job.speed = self._model.speed(job.trace, job.trace.gpus, nodes)
        job.attempt_start = now
        job.progress_from = now + overhead
        job.lease_expires = now + lease_s
        finish = job.progress_from + job.remaining / max(job.speed, _EPS)
        self._push(finish, _FINISH, self._index(job), job.version)

    def _suspend(self, job: _Job) -> None:
        now = self._now
        job.remaining = job.remaining_at(now)
        job.record.suspensions += 1
        job.version += 1
        job.state = JobState.SUSPENDING
        del self._active[job.trace.id]
        self._releasing[job.trace.id] = job
        release = now + self._model.suspend_s(job.trace, job.trace.gpus)
        self._push(release, _RELEASE, self._index(job), job.version)

    def _released(self, job: _Job) -> None:
        self._free_gpus(job)
        del self._releasing[job.trace.id]
        job.state = JobState.SUSPENDED
        job.queued_since = self._now
        self._enqueue(job)

    def _complete(self, job: _Job) -> None:
        if self._config.check_invariants and job.remaining_at(self._now) > 1e-3 * max(1, job.work):
            raise InvariantViolation(f"{job.trace.id} finished with work left")
        job.remaining = 0.0
        self._free_gpus(job)
        del self._active[job.trace.id]
        job.state = JobState.COMPLETED
        job.record.end_s = self._now
        job.record.final_metric = self._model.metric_at(job.trace, 1.0)
        self._done += 1
        if self._progress is not None:
            self._progress(self._done, len(self._jobs))

    def _free_gpus(self, job: _Job) -> None:
        job.record.gpu_s += (self._now - job.attempt_start) * job.trace.gpus
        for p in job.placement:
            self._free[p.node_id].update(p.gpu_indices)
            self._dirty_nodes.add(p.node_id)
        job.placement = ()
        self._set_busy(self._busy - job.trace.gpus)

    def _set_busy(self, busy: int) -> None:
        if not 0 <= busy <= self._shape.total_gpus:
            raise InvariantViolation(f"{busy} busy GPUs on a {self._shape.total_gpus}-GPU cluster")
        self._busy = busy
        samples = self._result.utilization
        if samples and samples[-1][0] == self._now:
            samples[-1] = (self._now, busy)
        else:
            samples.append((self._now, busy))

    def _index(self, job: _Job) -> int:
        return self._indices[job.trace.id]

    def _check_gpus(self) -> None:
        held: set[tuple[str, int]] = set()
        for job in (*self._active.values(), *self._releasing.values()):
            for p in job.placement:
                for gpu in p.gpu_indices:
                    key = (p.node_id, gpu)
                    if key in held or gpu in self._free[p.node_id]:
                        raise InvariantViolation(f"GPU {key} given twice")
                    held.add(key)
        if len(held) != self._busy:
            raise InvariantViolation(f"{len(held)} GPUs held but {self._busy} counted busy")

    def _finish(self, started: float) -> None:
        ends = [r.end_s for r in self._result.records if r.end_s is not None]
        self._result.makespan_s = max(ends, default=0.0)
        self._result.wall_s = time.perf_counter() - started
