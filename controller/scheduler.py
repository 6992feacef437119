"""The scheduling cycle: liveness, snapshot, policy, and applying its decision.

A decision is applied in this order: suspensions, migrations, resizes of elastic jobs
(``controller.resize``: in place, or by suspend/resume onto GPUs reserved for the job),
renewals, the suspension of expired leases nobody renewed, launches, the agents' priorities
(``controller.priority_sender``: sent only when they change), early stops
(``controller.stops``: MLF-C's ``Stop`` orders, sent only to jobs still STARTING or RUNNING).
A job named by an earlier part is left alone by the later ones (a migrated or resized job is
neither renewed nor expired). Launches and migrations whose GPUs were taken meanwhile (or are
reserved for a migration or a resize) are skipped; malformed ones are refused with a logged
reason.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

from controller import lifecycle, ps_placement, resize, retention
from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    Launch,
    Migrate,
    Policy,
    Stop,
)
from controller.policy.retreat import RETREAT_REASONS
from controller.priority_sender import PrioritySender
from controller.retreats import record_retreat
from controller.snapshot import build_snapshot
from controller.state import LIVE_TASK_STATES, ControllerState
from controller.stops import StopOrders
from mlsched.model import JobEstimate, JobSpec, TaskState

log = logging.getLogger(__name__)

# Launches applied before their store transaction commits and their commands go out.
LAUNCH_SLICE_S = 0.01


def placement_problem(spec: JobSpec, placement: tuple[TaskPlacement, ...]) -> str | None:
    """Why ``placement`` cannot run a job of ``spec``; None when it can.

    A launch runs 1 to ``spec.num_tasks`` whole processes (fewer for a profiling run; an
    elastic job up to its ``max_gpus``), ranked 0..k-1, each on ``gpus_per_process`` distinct
    GPUs of one node, no GPU given twice. A PS job's two roles:
    :func:`controller.ps_placement.placement_problem`.
    """
    if spec.ps.enabled:
        return ps_placement.placement_problem(spec, placement)
    k, per = len(placement), spec.gpus_per_process
    most = max(spec.num_tasks, spec.elastic.max_gpus // per if spec.elastic.enabled else 0)
    if not 1 <= k <= most:
        return (
            f"{k} processes placed; the job runs 1 to {most} ({spec.gpus} GPUs, {per} per process)"
        )
    ranks = sorted(p.rank for p in placement)
    if ranks != list(range(k)):
        return f"ranks {ranks} are not 0..{k - 1}"
    taken: set[tuple[str, int]] = set()
    for p in placement:
        if len(p.gpu_indices) != per or len(set(p.gpu_indices)) != per:
            return (
                f"rank {p.rank} holds GPUs {list(p.gpu_indices)}; every process needs "
                f"{per} distinct GPU(s)"
            )
        for gpu in p.gpu_indices:
            if (p.node_id, gpu) in taken:
                return f"GPU {gpu} of {p.node_id} is given to more than one process"
            taken.add((p.node_id, gpu))
    return None


class Scheduler:
    """One cycle = expire dead nodes, ask the policy, apply what is still valid."""

    def __init__(
        self,
        state: ControllerState,
        policy: Policy,
        disconnect: Callable[[str], None] = lambda node_id: None,
        launch_slice_s: float = LAUNCH_SLICE_S,
    ) -> None:
        self.state = state
        self.launch_slice_s = launch_slice_s
        self.policy = policy
        self._disconnect = disconnect
        self.last_decision_s = 0.0
        # Called after each cycle with its decision, the cycle's and decide()'s seconds
        # (the controller's metrics: controller.http_metrics).
        self.on_cycle: Callable[[Decision, float, float], None] | None = None
        self._stops = StopOrders()
        self._disk_full: set[str] = set()  # nodes last reported with a full state disk
        self.priorities = PrioritySender()

    def run_cycle(self) -> Decision:
        """Two store transactions a cycle (before and after the policy), commands sent after
        each commits; the lazy commits of agent reports are made durable at the end."""
        state = self.state
        cycle_started = time.perf_counter()
        with state.lock:
            with state.holding_commands():
                self.check_liveness()
                self.note_full_disks()
                lifecycle.resume_pending_migrations(state)
                resize.resume_ready(state, state.resizes)
                retention.archive_finished(state)
            snapshot = reserve(build_snapshot(state), state.resizes.reserved())
        started = time.perf_counter()
        decision = self.policy.decide(snapshot)
        self.last_decision_s = time.perf_counter() - started
        with state.lock:
            self.apply(snapshot, decision)
        state.store.flush()
        if self.on_cycle is not None:
            self.on_cycle(decision, time.perf_counter() - cycle_started, self.last_decision_s)
        return decision

    def note_full_disks(self) -> None:
        """An event when a node's agent starts or stops reporting its state disk full (it gets
        no new tasks meanwhile: ``Node.accepts_new_tasks``)."""
        state = self.state
        for node in state.nodes.values():
            full = not node.accepts_new_tasks
            if full == (node.id in self._disk_full):
                continue
            if full:
                self._disk_full.add(node.id)
                free = node.metrics.state_disk_free_bytes if node.metrics is not None else 0
                state.emit(
                    "node_disk_full",
                    f"the agent's state disk is full ({free} bytes free): no new tasks here,"
                    " running ones go on",
                    node_id=node.id,
                )
            else:
                self._disk_full.discard(node.id)
                state.emit("node_disk_ok", "the agent's state disk has room again", node_id=node.id)

    def check_liveness(self) -> None:
        """Declare nodes dead after the heartbeat timeout; their tasks are lost."""
        state = self.state
        now = state.clock.now()
        for node in list(state.nodes.values()):
            silent = now - node.last_seen
            if not node.alive or silent <= state.settings.heartbeat_timeout_s:
                continue
            node.alive = False
            state.connected.discard(node.id)
            state.save_node(node)
            state.emit("node_dead", f"no heartbeat for {silent:.0f} s", node_id=node.id)
            self._disconnect(node.id)
            until = state.fence_until(node)
            for task in list(state.tasks_on_node(node.id)):
                if task.state in LIVE_TASK_STATES:
                    state.fences.hold(task, until)
                    lifecycle.task_ended(state, task, TaskState.LOST, 0, "node died")
        for fence in state.fences.expire(now):
            state.emit(
                "task_fence_expired",
                f"rank {fence.rank} attempt {fence.attempt}: past the agent's self-fencing"
                f" deadline; GPUs {list(fence.gpu_indices)} are free",
                job_id=fence.job_id,
                node_id=fence.node_id,
            )

    def apply(self, snapshot: ClusterSnapshot, decision: Decision) -> None:
        """Apply a decision made on ``snapshot``, skipping parts the world has overtaken.

        A few store transactions (commands go out as each commits): up to the launches, the
        launches in slices of ``launch_slice_s`` (a launch waits for its slice's commit, not
        for the whole decision), the rest."""
        with self.state.holding_commands():
            self._apply_orders(snapshot, decision)
        launches = iter(decision.launch)
        item = next(launches, None)
        while item is not None:
            started = time.perf_counter()
            with self.state.holding_commands():
                free = self._free_gpus()
                while item is not None and time.perf_counter() - started < self.launch_slice_s:
                    self._launch(item, *free)
                    item = next(launches, None)
        with self.state.holding_commands():
            self._apply_rest(decision)

    def _apply_orders(self, snapshot: ClusterSnapshot, decision: Decision) -> None:
        """Suspensions, migrations, renewals and expired leases, each job once."""
        state = self.state
        handled: set[str] = set()
        for item in decision.suspend:
            job = state.job(item.job_id)
            if job is not None and job.state.active:
                if item.reason in RETREAT_REASONS:  # remember where it left (retreats.py)
                    record_retreat(state, job)
                lifecycle.suspend(state, job, item.reason)
                handled.add(job.id)
        for item in decision.migrate:
            if item.job_id not in handled and self._migrate(item):
                handled.add(item.job_id)
        for item in decision.resize:
            if item.job_id not in handled and resize.order(state, state.resizes, item):
                handled.add(item.job_id)
        for item in decision.renew:
            job = state.job(item.job_id)
            if job is not None and job.state.active and job.id not in handled:
                lifecycle.renew(state, job, item.lease_s)
                handled.add(job.id)
        for view in snapshot.expired():
            job = state.job(view.id)
            if view.id not in handled and job is not None and job.state.active:
                lifecycle.suspend(state, job, "lease expired and was not renewed")

    def _apply_rest(self, decision: Decision) -> None:
        state = self.state
        self.priorities.apply(state, decision.priorities)  # after the launches they follow
        self._keep_estimates(decision.estimates)
        self._stops.apply(state, (*decision.stop, *user_stops(state)))

    def _keep_estimates(self, estimates: Mapping[str, JobEstimate]) -> None:
        """Store each estimate on its job (for ``mlsched describe``), in one transaction and
        without events: they change every cycle."""
        state = self.state
        if not estimates:
            return
        with state.store.transaction(durable=False):
            for job_id, estimate in estimates.items():
                job = state.job(job_id)
                if job is not None and not job.state.terminal and job.estimate != estimate:
                    job.estimate = estimate
                    state.save_job(job)

    def _free_gpus(self) -> tuple[dict[str, set[int]], dict[str, set[int]]]:
        """GPUs held or reserved, and the GPUs of the nodes that take new tasks, per node: once
        per launch slice, kept up to date by ``_launch`` (per launch, these scans of every job,
        task and node made a cycle O(launches x jobs); issue 12, docs/scale.md)."""
        state = self.state
        busy = state.busy_gpus()
        reserved = (lifecycle.reserved_gpus(state), state.resizes.reserved())
        for node_id, gpus in (kv for r in reserved for kv in r.items()):
            busy.setdefault(node_id, set()).update(gpus)
        schedulable = {
            n.id: {g.index for g in n.gpus}
            for n in state.schedulable_nodes()
            if n.accepts_new_tasks  # not on a full state disk
        }
        return busy, schedulable

    def _launch(
        self, item: Launch, busy: dict[str, set[int]], schedulable: dict[str, set[int]]
    ) -> None:
        """Launch ``item`` if its GPUs are free in ``busy``, then count them in it."""
        state = self.state
        job = state.job(item.job_id)
        if job is None or not job.state.queued:
            return
        problem = placement_problem(job.spec, item.placement)
        if problem is not None:
            log.error("launch of %s refused: %s", job.id, problem)
            return
        placement = tuple(sorted(item.placement, key=lambda p: p.rank))
        wanted: dict[str, set[int]] = {}
        for p in placement:
            gpus = set(p.gpu_indices)
            if (
                p.node_id not in schedulable
                or not gpus <= schedulable[p.node_id]
                or (gpus & busy.get(p.node_id, set()))
                or (gpus & wanted.get(p.node_id, set()))
            ):
                log.info("launch of %s skipped: %s:%s no longer free", job.id, p.node_id, gpus)
                return
            wanted.setdefault(p.node_id, set()).update(gpus)
        resize.launch(state, state.resizes, job, placement, item.lease_s)
        for node_id, gpus in wanted.items():  # held now (or, if it did not launch, next cycle)
            busy.setdefault(node_id, set()).update(gpus)

    def _migrate(self, item: Migrate) -> bool:
        """Order a migration (``lifecycle.migrate``); True when ordered."""
        state = self.state
        job = state.job(item.job_id)
        if job is None or not job.state.active:
            state_name = "unknown" if job is None else job.state.value
            log.info("migration of %s skipped: the job is %s", item.job_id, state_name)
            return False
        problem = placement_problem(job.spec, item.placement)
        if problem is None and not (math.isfinite(item.lease_s) and item.lease_s > 0):
            problem = f"lease of {item.lease_s} s; it must be a positive number of seconds"
        placement = tuple(sorted(item.placement, key=lambda p: p.rank))
        current = tuple(
            TaskPlacement(t.rank, t.node_id, t.gpu_indices)
            for t in sorted(state.live_tasks(job.id), key=lambda t: t.rank)
        )
        if problem is None and placement == current:
            problem = "the target is where the job runs now"
        if problem is not None:
            log.error("migration of %s refused: %s", job.id, problem)
            return False
        taken = lifecycle.unavailable(state, placement, job.id)
        reserved = state.resizes.reserved()
        if taken is None and any(
            set(p.gpu_indices) & reserved.get(p.node_id, set()) for p in placement
        ):
            taken = "a target GPU is reserved for a resize"
        if taken is not None:
            log.info("migration of %s skipped: %s", job.id, taken)
            return False
        lifecycle.migrate(state, job, placement, item.lease_s, item.reason)
        return True


class SchedulerLoop:
    """Runs cycles every ``interval_s`` and whenever :meth:`trigger` is called."""

    def __init__(self, scheduler: Scheduler, interval_s: float) -> None:
        self._scheduler = scheduler
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=False)

    def start(self) -> None:
        self._thread.start()

    def trigger(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            started = time.perf_counter()
            try:
                self._scheduler.run_cycle()
            except Exception:  # one bad cycle must not stop scheduling
                log.exception("scheduling cycle failed")
            # Triggers (every submit and task report) would otherwise run cycles back to back,
            # holding the state lock nearly all the time: agents' reports waited seconds for it
            # (docs/scale.md). The lock is left free at least as long as a cycle took.
            self._stop.wait(min(time.perf_counter() - started, self._interval_s))


def reserve(snapshot: ClusterSnapshot, reserved: Mapping[str, set[int]]) -> ClusterSnapshot:
    """``snapshot`` with ``reserved`` GPUs (per node) no longer free."""
    if not reserved:
        return snapshot
    nodes = tuple(
        replace(n, free_gpu_indices=tuple(g for g in n.free_gpu_indices if g not in held))
        if (held := reserved.get(n.id))
        else n
        for n in snapshot.nodes
    )
    return replace(snapshot, nodes=nodes)


def user_stops(state: ControllerState) -> list[Stop]:
    """``mlsched stop`` requests of active jobs, carried out like a policy's stops (a stopped
    job that reaches SUSPENDED instead is completed by :func:`lifecycle.finish_stopped`)."""
    return [
        Stop(job.id, job.stop_requested)
        for job in state.jobs.values()
        if job.stop_requested and job.state.active
    ]
