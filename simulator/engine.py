"""The discrete-event simulation engine.

The simulated cluster is driven exactly like the live one: at each scheduling cycle the engine
builds a :class:`ClusterSnapshot`, asks the *same* policy object the controller uses for a
:class:`Decision`, and applies it. Cycles happen at every lease boundary (leases are aligned to
a grid of ``lease_s``, as UniSched schedules at lease boundaries) and, like the live
controller's triggered cycles, at most every ``cycle_s`` after a job arrives or ends.

Job progress is measured in *work seconds*: seconds of training at the requested GPU count on
one node. A running job makes ``speed`` work seconds per second (the job model's factor for the
GPUs it holds, which may be fewer than it requested, and the nodes they span); suspension keeps
all progress (the trainer checkpoints at the lease boundary) and costs ``suspend_s`` of held
GPUs, resumption costs ``resume_s`` before progress restarts.

Policies see what a live controller would have measured by then: the iteration time of every
allocation shape a job has trained on, the mean suspend + resume overhead of its past
resumptions and, for performance-based jobs, the accuracy history of the points of a fixed
iteration grid already passed (see ``docs/simulator.md``, *Observations*).

MLFS (``docs/simulator.md``, *MLFS features*): jobs with a :class:`ResourceDemand` load their
servers; nodes report the resulting utilisation, a job on a server loaded beyond its capacity
(some resource type above 1) is slowed by that excess, cross-server traffic is counted, and
``Decision.migrate`` / ``Decision.stop`` are carried out. Without demands none of this costs
anything. Deterministic: no randomness, ties broken by insertion order.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType

from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobTruth,
    JobView,
    NodeView,
    Policy,
    needs_job_truth,
)
from controller.policy.mlfs.jobs import task_graph
from controller.policy.retreat import RETREAT_REASONS
from mlsched.model import (
    BatchRule,
    ElasticSpec,
    IterationStop,
    JobSpec,
    JobState,
    MetricGoal,
    MlfsSpec,
    OverloadRetreat,
    SpeedSample,
    TargetMetricStop,
)
from simulator.elastic import BatchProfile, batch_metrics
from simulator.interference import Interference
from simulator.resize_cost import BATCH, NO_REGROUP, REGROUP, RENEW, ResizeCosts, mechanism
from simulator.types import RESOURCES, JobModel, JobRecord, SimResult, TraceJob

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
    interference: Interference | None = None  # slowdown from co-located load (None: none)
    resize: ResizeCosts = NO_REGROUP  # pauses per resize mechanism (simulator/resize_cost)


_NO_METRICS: Mapping[str, float] = MappingProxyType({})
_VIEW_FIELDS = frozenset(f.name for f in fields(JobView))
_RUNNING = JobState.RUNNING
HISTORY_POINTS = 20  # metric-history grid of a performance-based job: every 5 % of its budget
_ITERATION_EPS = 1e-6  # absorbs rounding when progress is converted to whole iterations


class InvariantViolation(AssertionError):
    """The simulation broke one of its own rules (a bug, never a property of the trace)."""


class _Job:
    """Mutable simulation state of one job.

    ``fields`` holds every JobView field as of the last event (launch, renewal, suspension,
    release, new observation); a view copies it and fills in the few fields that move with the
    clock while the job holds GPUs.
    """

    __slots__ = (
        "attempt",
        "attempt_start",
        "base_speed",
        "batch",
        "batch_samples",
        "cross_mb",
        "deadline_at",
        "factor",
        "fields",
        "gpus",
        "grid",
        "grid_values",
        "history",
        "iteration_scale",
        "left_nodes",
        "losses_at",
        "next_point",
        "passed",
        "placement",
        "progress_from",
        "record",
        "remaining",
        "samples",
        "shape",
        "spec",
        "speed",
        "sr_count",
        "sr_pending",
        "sr_total",
        "state",
        "trace",
        "unobserved",
        "version",
        "work",
    )

    def __init__(self, trace: TraceJob, work: float, target: float | None) -> None:
        self.trace = trace
        budget = max(1, trace.iterations)
        stopping: IterationStop | TargetMetricStop = IterationStop(budget)
        # Progress in iterations is measured against the whole iteration budget: the job's work
        # for an iteration-based job, its full trace duration for a performance-based one (its
        # work ends where the learning curve reaches the target, before the budget).
        full = work
        if trace.performance_based:
            full = max(work, trace.duration_s)
            if target is not None:
                stopping = TargetMetricStop("accuracy", target, MetricGoal.MAXIMIZE, budget)
        self.iteration_scale = budget / full if full > 0 else 0.0
        # (work seconds, iteration) of each point of the accuracy history, in order
        self.grid: tuple[tuple[float, int], ...] = ()
        # MLFS jobs report their accuracy too, whatever their stopping criterion (MLF-C, §3.5)
        if isinstance(stopping, TargetMetricStop) or trace.mlfs is not None:
            points, last = [], 0
            for k in range(1, HISTORY_POINTS + 1):
                iteration = round(k * budget / HISTORY_POINTS)
                if iteration > last:
                    points.append((iteration / budget * full, iteration))
                    last = iteration
            self.grid = tuple(points)
        self.grid_values: tuple[float, ...] = ()
        self.history: list[tuple[int, float]] = []
        elastic = ElasticSpec()
        if trace.elastic is not None:  # its measured loss curve, reported point by point
            profile = trace.elastic
            points = [(f * work, round(f * budget), v) for f, v in profile.loss if f > 0]
            self.grid = tuple((w, k) for w, k, _ in points)
            self.grid_values = tuple(v for _, _, v in points)
            self.history = [(0, profile.loss[0][1])]
            elastic = ElasticSpec(profile.min_gpus, profile.max_gpus, BatchRule.FIXED_GLOBAL)
        # issue 15: the scheduler picks the batch (Resize.batch_size); 0 for other jobs
        self.batch = trace.elastic.batch if isinstance(trace.elastic, BatchProfile) else 0
        self.batch_samples = 0.0  # samples processed up to the last change of course
        if self.batch:
            elastic = ElasticSpec(
                elastic.min_gpus,
                elastic.max_gpus,
                BatchRule.SCHEDULER,
                trace.elastic.max_batch,
                True,
            )
        self.passed = 0  # grid points passed
        self.next_point = self.grid[0][0] if self.grid else math.inf
        self.spec = spec = JobSpec(
            name=trace.id,
            command=("simulated",),
            gpus=trace.gpus,
            stopping=stopping,
            job_class=trace.job_class,
            deadlines=trace.deadlines,
            mlfs=trace.mlfs or MlfsSpec(),
            elastic=elastic,
            batch_size=self.batch,
        )
        self.record = JobRecord(job=trace)
        self.fields: dict[str, object] = {
            "id": trace.id,
            "user": trace.user,
            "spec": spec,
            "state": JobState.PENDING,
            "submit_time": trace.submit_s,
            "queued_since": trace.submit_s,
            "attempt": 0,
            "suspensions": 0,
            "iteration": 0,
            "metrics": _NO_METRICS,
            "lease_expires_at": None,
            "placement": (),
            "running_since": None,
            "training_since": None,
            "attained_gpu_s": 0.0,
            "estimated_remaining_s": work,
            "model": trace.model,
            "speed_samples": (),
            "metric_history": tuple(self.history),
            "sr_overhead_s": None,
            "losses": (),
            "migration_requested": False,
            "overload_retreat": None,  # set by an overload retreat, cleared by the next launch
            "resource_usage": _NO_METRICS,
            "truth": None,
        }
        self.state = JobState.PENDING
        self.work = work
        self.remaining = work
        self.gpus = trace.gpus  # GPUs held in the current (or last) attempt
        self.shape = (trace.gpus, 1)  # (GPUs, nodes) of the current (or last) attempt
        self.placement: tuple[TaskPlacement, ...] = ()
        self.left_nodes: frozenset[str] = frozenset()  # the nodes of its last attempt
        self.speed = 1.0
        self.base_speed = 1.0  # the job model's speed for the allocation, before any slowdown
        self.factor = 1.0  # overload slowdown: speed = base_speed * factor
        self.cross_mb = 0.0  # MB sent between servers per iteration on the current placement
        self.losses_at = 0  # iteration of the losses last put in the view
        first = min((d.seconds_after_submit for d in trace.deadlines), default=None)
        self.deadline_at = None if first is None else trace.submit_s + first
        self.progress_from = 0.0  # when progress (re)starts after the resume overhead
        self.attempt_start = 0.0
        self.version = 0
        self.attempt = 0
        self.unobserved = False  # the current attempt has not yet been sampled
        self.samples: dict[tuple[int, int], SpeedSample] = {}
        self.sr_pending = 0.0  # suspend overhead of the suspension awaiting its resumption
        self.sr_total = 0.0
        self.sr_count = 0

    def remaining_at(self, now: float) -> float:
        if self.state is not _RUNNING or now <= self.progress_from:
            return self.remaining
        return max(0.0, self.remaining - (now - self.progress_from) * self.speed)

    def iteration_at(self, remaining: float) -> int:
        """Whole iterations done when ``remaining`` work seconds are left."""
        return int((self.work - remaining) * self.iteration_scale + _ITERATION_EPS)


def _most_gpus(job: _Job) -> int:
    """The most GPUs a job may hold: its request, or an elastic job's maximum."""
    elastic = job.trace.elastic
    return job.trace.gpus if elastic is None else max(elastic.max_gpus, job.trace.gpus)


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
        ordered = sorted(jobs, key=lambda j: j.submit_s)
        self._jobs = [_Job(t, model.work_s(t), self._target(t)) for t in ordered]
        if needs_job_truth(policy):
            for job in self._jobs:
                job.fields["truth"] = self._truth(job, shape.gpus_per_node)
        self._free = {f"n{i:03d}": set(range(shape.gpus_per_node)) for i in range(shape.nodes)}
        self._all_gpus = tuple(range(shape.gpus_per_node))
        self._node_views: dict[str, NodeView] = {}
        self._dirty_nodes: set[str] = set(self._free)
        # MLFS load model, only when some job has a resource demand: progressing jobs per node
        # (job -> its tasks there), the summed load per resource type, the load of each GPU.
        self._loads_on = any(j.demand is not None for j in jobs)
        self._on_node: dict[str, dict[str, tuple[_Job, int]]] = {n: {} for n in self._free}
        self._load: dict[str, tuple[float, ...]] = {n: (0.0,) * len(RESOURCES) for n in self._free}
        self._gpu_load: dict[str, dict[int, float]] = {n: {} for n in self._free}
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

    def _truth(self, job: _Job, node_gpus: int) -> JobTruth:
        """What an oracle knows at submission: the iteration the job stops at, its iteration
        time on every spread from its consolidated node count to one node more than that,
        and its suspend plus resume overhead."""
        gpus = job.trace.gpus
        least = -(-gpus // node_gpus)
        times = {
            (gpus, nodes): self._model.iteration_time(job.trace, gpus, nodes)[0]
            for nodes in range(least, min(gpus, least + 1) + 1)
        }
        sr = self._model.suspend_s(job.trace, gpus) + self._model.resume_s(job.trace, gpus)
        iterations = max(1, round(job.work * job.iteration_scale))
        return JobTruth(iterations, times, sr)

    def _target(self, trace: TraceJob) -> float | None:
        """The accuracy a performance-based job stops at (the model's metric at the end of its
        work), None for other jobs or when the model has no metric."""
        return self._model.metric_at(trace, 1.0) if trace.performance_based else None

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
                stopped = self._cycle()
                last_cycle = self._now
                trigger_at = last_cycle + gap if stopped else None
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
                stopped = self._cycle()
                last_cycle = t
                trigger_at = t + gap if stopped else None  # GPUs freed by a stop: as an end's
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
    def _cycle(self) -> bool:
        """One decision, applied; True when it stopped a job (MLF-C), whose GPUs are free
        now: like a completion, that is worth a cycle (live, the trainer's exit is one)."""
        snapshot = self._snapshot()
        started = time.perf_counter()
        decision = self._policy.decide(snapshot)
        self._result.decision_times_s.append(time.perf_counter() - started)
        stopped = self._apply(snapshot, decision)
        if self._config.check_invariants:
            self._check_gpus()
        return stopped

    def _snapshot(self) -> ClusterSnapshot:
        now = self._now
        for node_id in self._dirty_nodes:
            if self._loads_on:
                # what an agent measures: each share capped at the capacity (MLFS §3.3.2 u_m)
                load = zip(RESOURCES, self._load[node_id], strict=True)
                gpu_load = self._gpu_load[node_id]
                self._node_views[node_id] = NodeView(
                    node_id,
                    self._all_gpus,
                    tuple(sorted(self._free[node_id])),
                    MappingProxyType({r: min(1.0, u) for r, u in load}),
                    MappingProxyType({g: gpu_load.get(g, 0.0) for g in self._all_gpus}),
                )
            else:
                self._node_views[node_id] = NodeView(
                    node_id, self._all_gpus, tuple(sorted(self._free[node_id]))
                )
        self._dirty_nodes.clear()
        nodes = tuple(self._node_views.values())
        return ClusterSnapshot(
            now=now,
            nodes=nodes,
            queued=tuple(self._queued_views.values()),
            active=tuple(map(self._view, self._active.values())),
            busy=tuple(map(self._view, self._releasing.values())),
            default_lease_s=self._config.lease_s,
        )

    def _enqueue(self, job: _Job) -> None:
        self._queued[job.trace.id] = job
        self._queued_views[job.trace.id] = self._view(job)

    def _view(self, job: _Job) -> JobView:
        """The job as a policy sees it now. Observations made since the last view (a first
        sample of the current shape, passed history points) are recorded on the way."""
        # Built without running ``__init__``: the frozen dataclass's field-by-field
        # ``object.__setattr__`` dominated simulation time. The result equals
        # ``JobView(**view.__dict__)`` (a test checks it).
        view = object.__new__(JobView)
        values = view.__dict__
        if not job.placement:
            values.update(job.fields)  # nothing moves while queued
            return view
        now = self._now
        if job.state is _RUNNING and now > job.progress_from:
            if job.unobserved:
                self._observe(job)
            remaining = job.remaining - (now - job.progress_from) * job.speed
            if remaining < 0.0:
                remaining = 0.0
            done = job.work - remaining
            if done >= job.next_point:
                self._pass_points(job, done)
            iteration = int(done * job.iteration_scale + _ITERATION_EPS)
            if job.trace.mlfs is not None and iteration != job.losses_at:
                self._update_losses(job, iteration)
            values.update(job.fields)
            values["iteration"] = iteration
            if job.batch:
                values["metrics"] = self._batch_metrics(job, remaining, training=True)
        else:
            values.update(job.fields)
            remaining = job.remaining
        values["attained_gpu_s"] = job.record.gpu_s + (now - job.attempt_start) * job.gpus
        values["estimated_remaining_s"] = remaining / job.speed
        return view

    def _observe(self, job: _Job) -> None:
        """Record that the current attempt trained on its shape: one more attempt of a known
        shape, or a new sample with the iteration time the trainer would have measured."""
        job.unobserved = False
        gpus, nodes = shape = job.shape
        known = job.samples.get(shape)
        if known is None:
            t_iter, t_comp = self._model.iteration_time(job.trace, gpus, nodes)
            job.samples[shape] = SpeedSample(gpus, nodes, t_iter, t_comp, 1)
        else:
            job.samples[shape] = SpeedSample(
                gpus, nodes, known.iteration_time_s, known.compute_time_s, known.count + 1
            )
        job.fields["speed_samples"] = tuple(job.samples.values())

    def _update_losses(self, job: _Job, iteration: int) -> None:
        """``losses`` as a trainer reports them: the loss after the first, the previous and the
        latest finished iteration, loss = 1 - accuracy of the learning curve (MLFS Eq. 2 reads
        δl_{I-1} and Σ δl_j from them)."""
        job.losses_at = iteration
        scale = job.iteration_scale * job.work
        if iteration < 1 or scale <= 0:
            job.fields["losses"] = ()
            return
        points = (1, iteration - 1, iteration) if iteration >= 2 else (1,)
        losses = []
        for i in points:
            accuracy = self._model.metric_at(job.trace, i / scale)
            if accuracy is None:
                job.fields["losses"] = ()
                return
            losses.append(1.0 - accuracy)
        job.fields["losses"] = tuple(losses)

    def _pass_points(self, job: _Job, done: float) -> None:
        """Add the history points at or before ``done`` work seconds (accuracy from the model
        at that fraction of the job's work)."""
        grid, passed, history = job.grid, job.passed, job.history
        while passed < len(grid) and grid[passed][0] <= done:
            at, iteration = grid[passed]
            if job.grid_values:
                value = job.grid_values[passed]
            else:
                value = self._model.metric_at(job.trace, at / job.work if job.work > 0 else 1.0)
            if value is not None:
                history.append((iteration, value))
            passed += 1
        job.passed = passed
        job.next_point = grid[passed][0] if passed < len(grid) else math.inf
        if history:
            job.fields["metric_history"] = tuple(history)
            name = "loss" if job.grid_values else "accuracy"
            job.fields["metrics"] = MappingProxyType({name: history[-1][1]})

    def _apply(self, snapshot: ClusterSnapshot, decision: Decision) -> bool:
        """Carry out the decision; True when it stopped a job."""
        handled: set[str] = set()
        for item in decision.stop:
            job = self._active.get(item.job_id)
            if job is not None:
                self._stop(job)
                handled.add(item.job_id)
        stopped = bool(handled)
        for item in decision.suspend:
            job = self._active.get(item.job_id)
            if job is not None:
                if item.reason in RETREAT_REASONS:
                    self._record_retreat(job)
                self._suspend(job)
                handled.add(job.trace.id)
        for item in decision.migrate:
            job = self._active.get(item.job_id)
            gpus = 0 if job is None or item.job_id in handled else self._fits(item.placement, job)
            if job is not None and gpus:
                self._migrate(job, item.placement, item.lease_s, gpus)
                handled.add(item.job_id)
            else:
                self._result.refused_migrations += 1
        costs = self._config.resize
        for item in decision.resize:
            job = self._active.get(item.job_id)
            gpus = batch = 0
            if job is not None and job.trace.elastic is not None and item.job_id not in handled:
                gpus = self._fits(item.placement, job)
                gpus = gpus if gpus >= job.trace.elastic.min_gpus else 0
                batch = self._batch_for(job, item.batch_size, gpus)
            if job is not None and gpus and batch >= 0:
                how = mechanism(job.placement, item.placement, batch != job.batch, costs)
                if how == RENEW:
                    job.fields["lease_expires_at"] = self._now + item.lease_s
                elif how == BATCH:
                    self._rebatch(job, batch, item.lease_s)
                else:
                    job.batch = batch
                    pause = costs.regroup_s if how == REGROUP else None
                    self._migrate(job, item.placement, item.lease_s, gpus, True, pause)
                handled.add(item.job_id)
            else:
                self._result.refused_resizes += 1
        for item in decision.renew:
            job = self._active.get(item.job_id)
            if job is not None and item.job_id not in handled:
                job.fields["lease_expires_at"] = self._now + item.lease_s
                handled.add(item.job_id)
        for view in snapshot.expired():
            job = self._active.get(view.id)
            if job is not None and view.id not in handled:
                self._suspend(job)  # a lease neither renewed nor suspended expires
        for item in decision.launch:
            job = self._queued.get(item.job_id)
            gpus = 0 if job is None else self._fits(item.placement, job)
            if job is not None and gpus:
                self._launch(job, item.placement, item.lease_s, gpus)
            else:
                self._result.refused_launches += 1
        return stopped

    def _batch_for(self, job: _Job, asked: int, gpus: int) -> int:
        """The global batch a resize to ``gpus`` GPUs leaves a job at (issue 15): ``asked``, or
        its current one (at least one sample per GPU) when 0; -1 when the order is invalid (a
        batch for a job whose batch is not the scheduler's, or outside ``gpus..max_batch``)."""
        if not job.batch:
            return -1 if asked else 0
        if not asked:
            return max(job.batch, gpus)
        return asked if gpus <= asked <= job.spec.elastic.max_batch_size else -1

    def _speed(self, job: _Job, gpus: int, nodes: int) -> float:
        """The job model's speed, or a scheduler-batched job's at its batch (issue 15)."""
        if job.batch:
            return job.trace.elastic.speed(gpus, job.batch)
        return self._model.speed(job.trace, gpus, nodes)

    def _rebatch(self, job: _Job, batch: int, lease_s: float) -> None:
        """Change a running job's batch in place (ONES §3.3.1): training pauses the config's
        ``resize.batch_s`` (ONES Fig. 16: about 1 s), then goes on at the new batch's speed on the
        same GPUs."""
        self._settle(job)
        job.batch = batch
        job.record.resizes += 1
        job.base_speed = max(self._speed(job, *job.shape), _EPS)
        job.speed = max(job.base_speed * job.factor, _EPS)
        job.progress_from = max(job.progress_from, self._now) + self._config.resize.batch_s
        job.fields["training_since"] = job.progress_from
        job.fields["lease_expires_at"] = self._now + lease_s
        self._mark(job, job.progress_from, job.work - job.remaining)
        job.version += 1
        finish = job.progress_from + job.remaining / job.speed
        self._push(finish, _FINISH, self._index(job), job.version)

    def _batch_metrics(self, job: _Job, remaining: float, training: bool) -> Mapping[str, float]:
        """What a scheduler-batched job's trainer reports (ONES §3.1: processed samples, loss,
        validation accuracy at each epoch's end; its batch and measured throughput)."""
        done = (job.remaining - remaining) / job.work if job.work > 0 else 0.0
        samples = job.batch_samples + done * job.trace.elastic.samples_needed(job.batch)
        fraction = (job.work - remaining) / job.work if job.work > 0 else 1.0
        return batch_metrics(
            job.trace.elastic,
            job.fields["metrics"],
            fraction,
            samples,
            job.batch,
            job.gpus if training else 0,
        )

    def _fits(self, placement: tuple[TaskPlacement, ...], job: _Job) -> int:
        """The GPU count of ``placement`` if the job may launch (or, active, move) onto it, else
        0: between one process and the requested count, whole processes per task, every GPU
        named once and free (or, for a move, held by the job itself)."""
        per_process = job.spec.gpus_per_process
        count = 0
        taken: set[tuple[str, int]] = set()
        own = {(p.node_id, g) for p in job.placement for g in p.gpu_indices}
        for p in placement:
            free = self._free.get(p.node_id)
            if free is None or not p.gpu_indices or len(p.gpu_indices) % per_process:
                return 0
            for gpu in p.gpu_indices:
                key = (p.node_id, gpu)
                if (gpu not in free and key not in own) or key in taken:
                    return 0
                taken.add(key)
            count += len(p.gpu_indices)
        return count if count <= _most_gpus(job) else 0

    # --- job transitions ---------------------------------------------------------------------
    def _launch(
        self, job: _Job, placement: tuple[TaskPlacement, ...], lease_s: float, gpus: int
    ) -> None:
        now = self._now
        if now < job.trace.submit_s - _EPS:
            raise InvariantViolation(f"{job.trace.id} runs before its submission")
        self._note_deadline(job)
        for p in placement:
            self._free[p.node_id].difference_update(p.gpu_indices)
            self._dirty_nodes.add(p.node_id)
        self._set_busy(self._busy + gpus)
        del self._queued[job.trace.id]
        del self._queued_views[job.trace.id]
        self._active[job.trace.id] = job
        nodes = len({p.node_id for p in placement})
        job.record.nodes_used = max(job.record.nodes_used, nodes)
        if job.record.first_start_s is None:
            job.record.first_start_s = now
        fields = job.fields
        overhead = 0.0
        if job.attempt and job.left_nodes != {p.node_id for p in placement}:
            job.record.resumed_elsewhere += 1  # a move by suspension (as UniSched moves jobs)
        if job.attempt:  # a resumption: its suspend + resume overhead is now known
            overhead = self._model.resume_s(job.trace, gpus)
            job.sr_total += job.sr_pending + overhead
            job.sr_count += 1
            fields["sr_overhead_s"] = job.sr_total / job.sr_count
        job.attempt += 1
        job.version += 1
        job.state = JobState.RUNNING
        job.placement = placement
        job.gpus = gpus
        job.shape = (gpus, nodes)
        job.unobserved = True
        job.base_speed = job.speed = max(self._speed(job, gpus, nodes), _EPS)
        job.attempt_start = now
        job.progress_from = now + overhead
        self._mark(job, now, job.work - job.remaining)
        self._mark(job, job.progress_from, job.work - job.remaining)
        fields["state"] = JobState.RUNNING
        fields["attempt"] = job.attempt
        fields["placement"] = placement
        fields["overload_retreat"] = None  # it runs again: the nodes it left are not kept from it
        fields["running_since"] = now
        fields["training_since"] = job.progress_from
        fields["lease_expires_at"] = now + lease_s
        if self._loads_on:
            self._occupy(job)
        finish = job.progress_from + job.remaining / job.speed
        self._push(finish, _FINISH, self._index(job), job.version)

    def _record_retreat(self, job: _Job) -> None:
        """What the controller records when an overload request sends a job back to the queue
        (``controller/retreats.py``): the nodes it leaves, its load per task on each (the
        modelled demand shares, what an agent there would measure; none without a demand) and
        the time, so :func:`~controller.policy.retreat.keep_off` keeps it off them."""
        nodes = tuple(dict.fromkeys(p.node_id for p in job.placement))
        demand = job.trace.demand
        per_task: dict[str, float] = {}
        if demand is not None:
            shares = demand.shares(job.spec.gpus_per_process, len(self._all_gpus))
            per_task = dict(zip(RESOURCES, shares, strict=True))
        job.fields["overload_retreat"] = OverloadRetreat(
            nodes=nodes,
            demand={n: MappingProxyType(per_task) for n in nodes if per_task},
            at=self._now,
        )
        job.record.overload_retreats += 1

    def _suspend(self, job: _Job) -> None:
        now = self._now
        if job.unobserved and now > job.progress_from:
            self._observe(job)
        self._settle(job)
        remaining = job.remaining
        done = job.work - remaining
        if done >= job.next_point:
            self._pass_points(job, done)
        job.record.suspensions += 1
        job.version += 1
        job.state = JobState.SUSPENDING
        fields = job.fields
        fields["state"] = JobState.SUSPENDING
        fields["suspensions"] = job.record.suspensions
        fields["lease_expires_at"] = None
        fields["iteration"] = iteration = job.iteration_at(remaining)
        if job.trace.mlfs is not None and iteration != job.losses_at:
            self._update_losses(job, iteration)
        del self._active[job.trace.id]
        self._releasing[job.trace.id] = job
        if self._loads_on:
            self._vacate(job)
        job.sr_pending = self._model.suspend_s(job.trace, job.gpus)
        self._push(now + job.sr_pending, _RELEASE, self._index(job), job.version)

    def _released(self, job: _Job) -> None:
        self._free_gpus(job)
        del self._releasing[job.trace.id]
        job.state = JobState.SUSPENDED
        fields = job.fields
        fields["state"] = JobState.SUSPENDED
        fields["queued_since"] = self._now
        fields["placement"] = ()
        fields["running_since"] = None
        fields["training_since"] = None
        fields["attained_gpu_s"] = job.record.gpu_s
        fields["estimated_remaining_s"] = job.remaining
        if job.batch:
            fields["metrics"] = self._batch_metrics(job, job.remaining, training=False)
        self._enqueue(job)

    def _complete(self, job: _Job) -> None:
        now = self._now
        if self._config.check_invariants and job.remaining_at(now) > 1e-3 * max(1, job.work):
            raise InvariantViolation(f"{job.trace.id} finished with work left")
        if job.unobserved and now > job.progress_from:
            self._observe(job)
        self._settle(job)
        job.remaining = 0.0
        self._mark(job, self._now, job.work)
        self._end(job, self._model.metric_at(job.trace, 1.0))

    def _stop(self, job: _Job) -> None:
        """End the job now, COMPLETED at its current progress (MLF-C, MLFS §3.5)."""
        if job.unobserved and self._now > job.progress_from:
            self._observe(job)
        self._settle(job)
        job.version += 1  # its pending finish no longer happens
        job.record.stopped = True
        self._end(job, self._accuracy(job, job.remaining))

    def _end(self, job: _Job, accuracy: float | None) -> None:
        if self._loads_on:
            self._vacate(job)
        self._free_gpus(job)
        del self._active[job.trace.id]
        job.state = JobState.COMPLETED
        job.fields["state"] = JobState.COMPLETED
        job.record.end_s = self._now
        job.record.final_metric = accuracy
        if job.record.accuracy_by_deadline is None:  # no deadline, or ended by it
            job.record.accuracy_by_deadline = accuracy
        self._done += 1
        if self._progress is not None:
            self._progress(self._done, len(self._jobs))

    def _migrate(
        self,
        job: _Job,
        placement: tuple[TaskPlacement, ...],
        lease_s: float,
        gpus: int,
        resize: bool = False,
        pause_s: float | None = None,
    ) -> None:
        """Move a running job (MLFS §3.3.3), or resize an elastic one (issue 14): checkpoint,
        release its GPUs, resume on ``placement`` at once; progress pauses for the suspend and
        resume overheads, or ``pause_s`` for a resize in place (a regroup: same attempt, no
        t_sr sample)."""
        now = self._now
        if job.unobserved and now > job.progress_from:
            self._observe(job)
        self._settle(job)
        if self._loads_on:
            self._vacate(job)
        old_gpus = job.gpus
        self._free_gpus(job)
        for p in placement:
            self._free[p.node_id].difference_update(p.gpu_indices)
            self._dirty_nodes.add(p.node_id)
        self._set_busy(self._busy + gpus)
        nodes = len({p.node_id for p in placement})
        record = job.record
        if resize:
            record.resizes += 1
        else:
            record.migrations += 1
        record.nodes_used = max(record.nodes_used, nodes)
        if pause_s is None:
            overhead = self._model.suspend_s(job.trace, old_gpus) + self._model.resume_s(
                job.trace, gpus
            )
            job.sr_total += overhead
            job.sr_count += 1
            job.attempt += 1
        else:
            overhead = pause_s
        job.version += 1
        job.placement = placement
        job.gpus = gpus
        job.shape = (gpus, nodes)
        job.unobserved = True
        job.base_speed = job.speed = max(self._speed(job, gpus, nodes), _EPS)
        job.attempt_start = now
        job.progress_from = now + overhead
        self._mark(job, job.progress_from, job.work - job.remaining)
        fields = job.fields
        if job.sr_count:
            fields["sr_overhead_s"] = job.sr_total / job.sr_count
        fields["attempt"] = job.attempt
        fields["placement"] = placement
        fields["running_since"] = now
        fields["training_since"] = job.progress_from
        fields["lease_expires_at"] = now + lease_s
        if self._loads_on:
            self._occupy(job)
        finish = job.progress_from + job.remaining / job.speed
        self._push(finish, _FINISH, self._index(job), job.version)

    # --- MLFS: progress accounting, load and slowdown -----------------------------------------
    def _settle(self, job: _Job) -> None:
        """Bring a job's remaining work up to now before its progress changes course: the
        accuracy at its deadline if that passed, and the traffic it sent between servers."""
        self._note_deadline(job)
        if job.state is not _RUNNING:
            return
        remaining = job.remaining_at(self._now)
        if job.batch and job.work > 0:  # samples at the batch trained since the last change
            needed = job.trace.elastic.samples_needed(job.batch)
            job.batch_samples += (job.remaining - remaining) / job.work * needed
        if job.cross_mb:
            iterations = (job.remaining - remaining) * job.iteration_scale
            job.record.bandwidth_gb += iterations * job.cross_mb / 1000.0
        job.remaining = remaining
        job.progress_from = max(job.progress_from, self._now)
        self._mark(job, self._now, job.work - remaining)

    def _mark(self, job: _Job, t: float, done: float) -> None:
        """Note progress for the loss metrics (only elastic jobs have a loss curve)."""
        if job.trace.elastic is not None:
            job.record.progress.append((t, done))

    def _note_deadline(self, job: _Job) -> None:
        """Record the accuracy reached by the job's earliest deadline once that has passed;
        called before every change of course, so the current segment holds the deadline."""
        at = job.deadline_at
        if at is None or self._now < at or job.record.accuracy_by_deadline is not None:
            return
        remaining = job.remaining_at(at) if job.state is _RUNNING else job.remaining
        job.record.accuracy_by_deadline = self._accuracy(job, remaining)

    def _accuracy(self, job: _Job, remaining: float) -> float | None:
        """The model's accuracy with ``remaining`` work seconds left."""
        fraction = (job.work - remaining) / job.work if job.work > 0 else 1.0
        return self._model.metric_at(job.trace, fraction)

    def _occupy(self, job: _Job) -> None:
        """Add a launched (or moved) job's load to its nodes, price its cross-server traffic
        and apply the slowdown of overloaded nodes to it and its neighbours."""
        per_node: dict[str, int] = {}
        for p in job.placement:
            per_node[p.node_id] = per_node.get(p.node_id, 0) + 1
        demand = job.trace.demand
        for node_id, tasks in per_node.items():
            self._on_node[node_id][job.trace.id] = (job, tasks)
            if demand is not None:
                gpu_load = self._gpu_load[node_id]
                for p in job.placement:
                    if p.node_id == node_id:
                        for g in p.gpu_indices:
                            gpu_load[g] = demand.gpu
        job.cross_mb = self._cross_mb(job) if demand is not None else 0.0
        usage: dict[str, float] = {}
        if demand is not None:
            shares = demand.shares(job.spec.gpus_per_process, len(self._all_gpus))
            tasks = len(job.placement)
            usage = {r: share * tasks for r, share in zip(RESOURCES, shares, strict=True)}
        job.fields["resource_usage"] = MappingProxyType(usage)
        self._reload(per_node, moved=job)

    def _vacate(self, job: _Job) -> None:
        """Remove a job's load from its nodes (it stopped progressing)."""
        nodes = {p.node_id for p in job.placement}
        for node_id in nodes:
            self._on_node[node_id].pop(job.trace.id, None)
            gpu_load = self._gpu_load[node_id]
            for p in job.placement:
                if p.node_id == node_id:
                    for g in p.gpu_indices:
                        gpu_load.pop(g, None)
        self._reload(nodes)

    def _reload(self, nodes: Iterable[str], moved: _Job | None = None) -> None:
        """Re-sum the load of ``nodes`` and re-time every job on them whose slowdown changed;
        ``moved`` (just placed there) only gets its new speed: its caller times it."""
        gpus_per_node = len(self._all_gpus)
        affected: dict[str, _Job] = {}
        for node_id in nodes:
            sums = [0.0] * len(RESOURCES)
            for job, tasks in self._on_node[node_id].values():
                affected[job.trace.id] = job
                demand = job.trace.demand
                if demand is not None:
                    shares = demand.shares(job.spec.gpus_per_process, gpus_per_node)
                    for i, share in enumerate(shares):
                        sums[i] += share * tasks
            self._load[node_id] = tuple(sums)
            self._dirty_nodes.add(node_id)
        for job in affected.values():
            factor = self._slowdown(job)
            if job is moved:
                job.factor = factor
                job.speed = max(job.base_speed * factor, _EPS)
            elif factor != job.factor:
                self._settle(job)
                job.factor = factor
                job.speed = max(job.base_speed * factor, _EPS)
                job.version += 1
                finish = job.progress_from + job.remaining / job.speed
                self._push(finish, _FINISH, self._index(job), job.version)

    def _slowdown(self, job: _Job) -> float:
        """1 / the largest load (above 1) of a resource type on any of the job's nodes: a
        synchronous job runs at the pace of its most overloaded server. With
        ``SimConfig.interference``, each node's term is that load times the slowdown from
        the other jobs' load there (``simulator/interference.py``)."""
        interference = self._config.interference
        if interference is not None:
            return 1.0 / self._interfered(job, interference)
        peak = 1.0
        for p in job.placement:
            peak = max(peak, *self._load[p.node_id])
        return 1.0 / peak

    def _interfered(self, job: _Job, interference: Interference) -> float:
        """The largest (overload x interference) time multiplier over the job's nodes."""
        demand = job.trace.demand
        shares = (
            demand.shares(job.spec.gpus_per_process, len(self._all_gpus))
            if demand is not None
            else (0.0,) * len(RESOURCES)
        )
        worst = 1.0
        for node_id in {p.node_id for p in job.placement}:
            load = self._load[node_id]
            held = self._on_node[node_id].get(job.trace.id)
            tasks = held[1] if held is not None else 0
            others = [max(0.0, u - share * tasks) for u, share in zip(load, shares, strict=True)]
            worst = max(worst, max(1.0, *load) * interference.slowdown(others))
        return worst

    def _cross_mb(self, job: _Job) -> float:
        """MB sent between servers per iteration: ring edges between consecutive ranks
        (``ring_mb``) and model-partition edges (``pipeline_mb``) whose ends are on two nodes."""
        demand = job.trace.demand
        node = {p.rank: p.node_id for p in job.placement}
        ranks = sorted(node)
        count = len(ranks)
        if demand is None or count < 2:
            return 0.0
        ring = sum(node[ranks[i]] != node[ranks[(i + 1) % count]] for i in range(count))
        _, children = task_graph(count, job.spec.mlfs)
        pipeline = sum(node[ranks[k]] != node[ranks[c]] for k in range(count) for c in children[k])
        return ring * demand.ring_mb + pipeline * demand.pipeline_mb

    def _free_gpus(self, job: _Job) -> None:
        job.record.gpu_s += (self._now - job.attempt_start) * job.gpus
        for p in job.placement:
            self._free[p.node_id].update(p.gpu_indices)
            self._dirty_nodes.add(p.node_id)
        job.left_nodes = frozenset(p.node_id for p in job.placement)
        job.placement = ()
        self._set_busy(self._busy - job.gpus)

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
            count = sum(len(p.gpu_indices) for p in job.placement)
            if not 1 <= count == job.gpus <= _most_gpus(job):
                raise InvariantViolation(f"{job.trace.id} holds {count} GPUs, counted {job.gpus}")
            for p in job.placement:
                for gpu in p.gpu_indices:
                    key = (p.node_id, gpu)
                    if key in held or gpu in self._free[p.node_id]:
                        raise InvariantViolation(f"GPU {key} given twice")
                    held.add(key)
        if len(held) != self._busy:
            raise InvariantViolation(f"{len(held)} GPUs held but {self._busy} counted busy")

    def _finish(self, started: float) -> None:
        for job in self._jobs:  # unfinished jobs: accuracy by the deadline, else by now
            if job.record.end_s is None and job.trace.submit_s <= self._now:
                self._note_deadline(job)
                if job.record.accuracy_by_deadline is None:
                    job.record.accuracy_by_deadline = self._accuracy(
                        job, job.remaining_at(self._now)
                    )
        ends = [r.end_s for r in self._result.records if r.end_s is not None]
        self._result.makespan_s = max(ends, default=0.0)
        self._result.wall_s = time.perf_counter() - started
