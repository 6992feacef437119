"""Reacting to what node agents report: registration and reconciliation, heartbeats, task
status changes and trainer progress.

Rank 0's progress reports also feed the observations UniSched's estimator needs (§III-B),
kept on the job and persisted with it:

- ``speed_samples``: one :class:`SpeedSample` per allocation shape (GPUs held by the job's live
  tasks, distinct nodes), the running means of the reported iteration and compute times over
  ``count`` reports. Non-positive times are ignored (a report without an iteration time does
  not count; the compute mean is over the reports that carried one). The first report of each
  attempt is skipped: it includes warm-up and the restore. Only while the job is STARTING or
  RUNNING.
- ``metric_history``: for jobs stopping at a target metric, ``(iteration, value)`` of that
  metric (of ``accuracy`` for a job MLF-C may stop early: ``jobspec.tracked_metric``),
  appended when the iteration passed the last recorded one and the value changed (the
  shim repeats the latest value of a metric evaluated every N steps in every report, so a
  repeated value is normally a stale one). Past ``METRIC_HISTORY_MAX`` points every other point
  of the oldest half is dropped: the first and the latest are always kept and old history
  gets sparser, never lost entirely.
- ``sr_overheads_s``: t_sr (§III-B3), suspension plus resumption. Suspension: the job entering
  SUSPENDING to SUSPENDED (timed by ``lifecycle``); resumption: the next launch to the first
  progress report of that attempt. The last ``SR_OVERHEADS_KEPT`` are kept.

The per-attempt report counts live in memory: after a controller restart one more report per
running job is skipped.

For MLFS (§3.3) the controller also keeps:

- ``losses``: the first, the previous and the latest loss rank 0 reported (Eq. 2's loss
  reductions), from reports whose iteration is past the previous report's (the first report
  of a resumed attempt, back at its checkpoint, is skipped); non-finite losses are ignored.
- each node's latest load report (``Node.load``, in memory only), from the metrics reports.
- ``migration_requested_at``: a node agent found its server overloaded and asks to move a task
  of the job (:meth:`AgentEvents.migration_requested`). Only for a live task of the job's
  current attempt on that node while the job is STARTING or RUNNING; a request while one is
  pending or the job is already being moved changes nothing (the latter is still recorded as
  a ``migration_requested`` event: what the agent asked). ``lifecycle`` clears it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager

from controller import lifecycle, resize
from controller.commands import AckCommand, KillCommand, SuspendCommand, TaskReport
from controller.state import LIVE_TASK_STATES, ControllerState
from mlsched.jobspec import tracked_metric
from mlsched.model import (
    Job,
    JobState,
    MigrationRequest,
    Node,
    NodeLoad,
    NodeMetrics,
    Progress,
    SpeedSample,
    Task,
    TaskState,
)

log = logging.getLogger(__name__)

METRIC_HISTORY_MAX = 256
SR_OVERHEADS_KEPT = 16


@contextmanager
def unless_store_fails(what: str) -> Iterator[None]:
    """Swallow (and log) a store write that fails, a full disk: the agent's session goes on.
    Used around ``ControllerState.atomic`` blocks, so memory was put back as on disk and no
    ack went out (the agent reports an unacknowledged end again at its next registration)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        log.error("cannot store %s (%s); going on without it", what, exc)


def thin_history(history: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Drop every other point of the oldest half (the first point stays)."""
    half = len(history) // 2
    return history[:half:2] + history[half:]


class AgentEvents:
    def __init__(self, state: ControllerState) -> None:
        self.state = state
        self._reports: dict[str, tuple[int, int]] = {}  # job id -> (attempt, rank-0 reports)
        # Reports that carried a compute time, per (job id, gpus, nodes): the compute mean's n.
        self._compute_counts: dict[tuple[str, int, int], int] = {}

    def register(
        self, node: Node, reports: Sequence[TaskReport], fence_margin_s: float = 0.0
    ) -> None:
        """A (re)connecting agent: record the node and reconcile the tasks it reports.

        ``fence_margin_s``: the agent's self-fencing margin (``controller.fencing``); 0 when it
        did not say."""
        state = self.state
        with state.lock:
            if fence_margin_s > 0:
                state.agent_fence_margin_s[node.id] = fence_margin_s
            else:
                state.agent_fence_margin_s.pop(node.id, None)
            node.alive = True
            node.last_seen = state.clock.now()
            known = state.nodes.get(node.id)
            state.nodes[node.id] = node
            state.connected.add(node.id)
            verb = "re-registered" if known else "registered"
            gpus = f"{len(node.gpus)} {'virtual ' if any(g.virtual for g in node.gpus) else ''}GPUs"
            # A full disk must not keep an agent out: the node row (static facts and the alive
            # flag) is written when it can be; the node serves from memory meanwhile.
            with unless_store_fails(f"the registration of {node.id}"), state.store.transaction():
                state.save_node(node)
                state.emit("node_registered", f"{verb} with {gpus} at {node.address}", "", node.id)
            reported = set()
            live = set()
            for report in reports:
                key = (report.task.job_id, report.task.rank, report.task.attempt)
                reported.add(key)
                if not report.state.ended:
                    live.add(key)
                with unless_store_fails(f"a report of {key}"), self._atomic(report.task.job_id):
                    self._apply_report(node.id, report)
            for fence in state.fences.release_unreported(node.id, live):
                with unless_store_fails("a fence release"):
                    self._fence_released(fence.node_id, fence.job_id, fence.rank, fence.attempt)
            for task in list(state.tasks_on_node(node.id)):
                if task.state in LIVE_TASK_STATES and (
                    (task.job_id, task.rank, task.attempt) not in reported
                ):
                    with unless_store_fails("a lost task"), self._atomic(task.job_id):
                        lifecycle.task_ended(
                            state, task, TaskState.LOST, 0, "agent no longer knows this task"
                        )
            self._resend_pending(node.id)

    def _atomic(self, job_id: str, durable: bool = True) -> AbstractContextManager[None]:
        """``ControllerState.atomic`` for a known job; a plain transaction otherwise."""
        job = self.state.job(job_id)
        if job is None:
            return self.state.store.transaction(durable)
        return self.state.atomic(job, durable)

    def disconnected(self, node_id: str) -> None:
        with self.state.lock, unless_store_fails("a disconnection event"):
            self.state.connected.discard(node_id)
            self.state.emit("node_disconnected", "agent session closed", node_id=node_id)

    def heartbeat(
        self, node_id: str, metrics: NodeMetrics | None = None, load: NodeLoad | None = None
    ) -> None:
        """Without the state lock (issue 12: a heartbeat waited for it behind every other
        report, bench_control_plane.py): three reference assignments on the node, each atomic;
        a cycle sees the old or the new value of each, as it would have before or after."""
        node = self.state.nodes.get(node_id)
        if node is None:
            return
        node.last_seen = self.state.clock.now()
        if metrics is not None:
            node.metrics = metrics
        if load is not None:
            node.load = load

    def migration_requested(self, node_id: str, request: MigrationRequest) -> bool:
        """A node agent asks to move a task off its overloaded server; True when the job was
        marked (module docstring)."""
        state = self.state
        with state.lock:
            self.heartbeat(node_id)
            where = f"{request.job_id}/{request.rank}/{request.attempt}"
            task = self._current_task(request.job_id, request.rank, request.attempt)
            job = state.job(request.job_id)
            if (
                task is None
                or job is None
                or task.node_id != node_id
                or task.state not in LIVE_TASK_STATES
            ):
                log.info("migration request for %s from %s ignored: not live there", where, node_id)
                return False
            demand = ", ".join(f"{k} {v:.2f}" for k, v in sorted(request.demand.items()))
            message = (
                f"requested by node {node_id} for rank {request.rank}"
                + (f" (demand {demand})" if demand else "")
                + (f": {request.reason}" if request.reason else "")
            )
            if job.migration_target is not None:
                # already on its way (MLF-H's own cycle may move it on the node's reported load
                # first): the request changes nothing, but what the agent asked is recorded
                if job.migration_requested_at is None:
                    message += "; the job is already being moved"
                    state.emit("migration_requested", message, job_id=job.id, node_id=node_id)
                return False
            if not job.state.active:
                log.info(
                    "migration request for %s from %s ignored: job %s",
                    where,
                    node_id,
                    job.state.value,
                )
                return False
            if job.migration_requested_at is not None:
                return False
            job.migration_requested_at = state.clock.now()
            state.save_job(job)
            state.emit("migration_requested", message, job_id=job.id, node_id=node_id)
            return True

    def task_status(self, node_id: str, report: TaskReport) -> None:
        with self.state.lock:
            self.heartbeat(node_id)
            # Lazy unless an ack or a kill goes out (batched with the next durable commit).
            with (
                unless_store_fails(f"a report of {report.task}"),
                self._atomic(report.task.job_id, durable=False),
            ):
                self._apply_report(node_id, report)

    def progress(
        self, node_id: str, job_id: str, rank: int, attempt: int, progress: Progress
    ) -> None:
        with self.state.lock:
            task = self._current_task(job_id, rank, attempt)
            job = self.state.job(job_id)
            if task is None or job is None or task.node_id != node_id or rank != 0:
                return
            # Lazy: on disk with the next durable commit or the cycle's flush (issue 12 #2).
            with unless_store_fails(f"progress of {job_id}"), self.state.atomic(job, False):
                self._progress(job, attempt, progress)

    def _progress(self, job: Job, attempt: int, progress: Progress) -> None:
        first = self._count_report(job.id, attempt)
        if job.training_started_at is None and job.attempt_started_at is not None:
            job.training_started_at = self.state.clock.now()
        self._record_loss(job, progress)
        job.iteration = progress.iteration
        if progress.iteration_time_s > 0:
            job.iteration_time_s = progress.iteration_time_s
        job.metrics = {**job.metrics, **progress.metrics, "loss": progress.loss}
        if not first:
            self._record_speed(job, progress)
        self._record_metric(job, progress)
        self._record_sr_overhead(job, attempt)
        resize.note_progress(self.state, self.state.resizes, job, attempt, progress.batch_size)
        self.state.save_job(job)

    # --- observations for the estimator ---------------------------------------------------
    def _count_report(self, job_id: str, attempt: int) -> bool:
        """Count a rank-0 report; True for the first of its attempt."""
        seen_attempt, count = self._reports.get(job_id, (attempt, 0))
        if seen_attempt != attempt:
            count = 0
        self._reports[job_id] = (attempt, count + 1)
        return count == 0

    def _record_speed(self, job: Job, progress: Progress) -> None:
        if progress.iteration_time_s <= 0 or not job.state.active:
            return
        tasks = self.state.live_tasks(job.id)
        gpus = sum(len(t.gpu_indices) for t in tasks)
        nodes = len({t.node_id for t in tasks})
        if gpus == 0:
            return
        key = (job.id, gpus, nodes)
        compute = progress.compute_time_s
        index = next(
            (i for i, s in enumerate(job.speed_samples) if (s.gpus, s.nodes) == (gpus, nodes)),
            None,
        )
        if index is None:
            self._compute_counts[key] = 1 if compute > 0 else 0
            sample = SpeedSample(gpus, nodes, progress.iteration_time_s, max(compute, 0.0), 1)
            job.speed_samples.append(sample)
            job.speed_samples.sort(key=lambda s: (s.gpus, s.nodes))
            return
        old = job.speed_samples[index]
        count = old.count + 1
        iteration_time = (
            old.iteration_time_s + (progress.iteration_time_s - old.iteration_time_s) / count
        )
        compute_time = old.compute_time_s
        if compute > 0:
            # After a controller restart the compute count is unknown: take the sample's.
            n = self._compute_counts.get(key, old.count if old.compute_time_s > 0 else 0) + 1
            self._compute_counts[key] = n
            compute_time += (compute - compute_time) / n
        job.speed_samples[index] = SpeedSample(gpus, nodes, iteration_time, compute_time, count)

    def _record_loss(self, job: Job, progress: Progress) -> None:
        """Keep (first, previous, latest) loss; called before ``job.iteration`` moves on."""
        if not math.isfinite(progress.loss):
            return
        if job.losses and progress.iteration <= job.iteration:
            return
        first, latest = job.losses[:1], job.losses[1:][-1:]
        job.losses = (*first, *latest, progress.loss)

    def _record_metric(self, job: Job, progress: Progress) -> None:
        metric = tracked_metric(job.spec)
        if metric is None:
            return
        value = progress.metrics.get(metric)
        if value is None or not math.isfinite(value):
            return
        history = job.metric_history
        if history and (progress.iteration <= history[-1][0] or value == history[-1][1]):
            return
        history.append((progress.iteration, value))
        if len(history) > METRIC_HISTORY_MAX:
            job.metric_history = thin_history(history)

    def _record_sr_overhead(self, job: Job, attempt: int) -> None:
        timing = self.state.sr_timings.get(job.id)
        if timing is None or timing.launched_at is None or timing.attempt != attempt:
            return
        del self.state.sr_timings[job.id]
        assert timing.suspension_s is not None  # set before launched_at (lifecycle)
        resumption_s = self.state.clock.now() - timing.launched_at
        job.sr_overheads_s.append(timing.suspension_s + resumption_s)
        del job.sr_overheads_s[:-SR_OVERHEADS_KEPT]

    # --- internals -----------------------------------------------------------------------
    def _current_task(self, job_id: str, rank: int, attempt: int) -> Task | None:
        for task in self.state.job_tasks(job_id):
            if task.rank == rank and task.attempt == attempt:
                return task
        return None

    def _apply_report(self, node_id: str, report: TaskReport) -> None:
        state = self.state
        ref = report.task
        task = self._current_task(ref.job_id, ref.rank, ref.attempt)
        job = state.job(ref.job_id)
        if report.state.ended and state.fences.release(node_id, ref.job_id, ref.rank, ref.attempt):
            self._fence_released(node_id, ref.job_id, ref.rank, ref.attempt)
        if task is None or job is None or task.node_id != node_id:
            # Unknown, stale attempt or placed elsewhere: it must not keep running.
            if report.state.ended:
                state.send(node_id, AckCommand(ref))
            else:
                state.send(node_id, KillCommand(ref, "not a current task of this cluster"))
            return
        self._record_steps(job, task, report)
        self._record_last_progress(job, task, report)
        if report.state.ended:
            if task.state in LIVE_TASK_STATES:
                lifecycle.task_ended(state, task, report.state, report.exit_code, report.message)
            state.send(node_id, AckCommand(ref))
            return
        if task.state.ended:  # we gave it up (e.g. node declared dead) but it still runs
            state.send(node_id, KillCommand(ref, f"task already {task.state.value}"))
            return
        if report.state is TaskState.RUNNING and task.state is TaskState.LAUNCHING:
            task.state = TaskState.RUNNING
            state.save_tasks(job.id)
            self._maybe_running(job.id)

    def _record_last_progress(self, job: Job, task: Task, report: TaskReport) -> None:
        """Progress a status carries, where it is newer than the job's (progress reports sent
        while the controller was away are lost; the agent's statuses, which it sends again on
        registration, carry the attempt's newest). A live rank-0 attempt only."""
        progress = report.progress
        if progress is None or task.rank != 0 or task.state not in LIVE_TASK_STATES:
            return
        if progress.iteration > job.iteration:
            self._progress(job, report.task.attempt, progress)

    def _fence_released(self, node_id: str, job_id: str, rank: int, attempt: int) -> None:
        self.state.emit(
            "task_fence_released",
            f"rank {rank} attempt {attempt}: the agent reports the process gone",
            job_id=job_id,
            node_id=node_id,
        )

    def _record_steps(self, job, task: Task, report: TaskReport) -> None:
        changed = False
        if report.checkpoint_step > task.checkpoint_step:
            task.checkpoint_step = report.checkpoint_step
            changed = True
            if report.checkpoint_step > job.checkpoint_step:
                job.checkpoint_step = report.checkpoint_step
                self.state.emit(
                    "checkpoint_saved",
                    f"step {report.checkpoint_step}",
                    job_id=job.id,
                    node_id=task.node_id,
                )
        if report.restored and report.restored_step != task.restored_step:
            task.restored_step = report.restored_step
            changed = True
            if task.rank == 0:
                job.restored_step = report.restored_step
                if job.resumes and job.resumes[-1].resumed_at is not None:
                    job.resumes[-1].restored_step = report.restored_step
                if job.attempt > 1 or report.restored_step > 0:
                    self.state.emit(
                        "job_restored",
                        f"resumed from step {report.restored_step}",
                        job_id=job.id,
                        node_id=task.node_id,
                    )
        if changed:
            self.state.save_tasks(job.id)
            self.state.save_job(job)

    def _maybe_running(self, job_id: str) -> None:
        job = self.state.jobs[job_id]
        tasks = self.state.job_tasks(job_id)
        if job.state is JobState.STARTING and all(t.state is TaskState.RUNNING for t in tasks):
            self.state.set_job_state(job, JobState.RUNNING, "all tasks running")

    def _resend_pending(self, node_id: str) -> None:
        """After a reconnect, repeat suspensions and kills the agent may have missed."""
        state = self.state
        for task in state.tasks_on_node(node_id):
            job = state.jobs.get(task.job_id)
            if job is None or task.state not in LIVE_TASK_STATES:
                continue
            ref = lifecycle.ref(task)
            if job.state in (JobState.CANCELLING, JobState.FAILED, JobState.CANCELLED):
                state.send(node_id, KillCommand(ref, job.message or "job ended"))
            elif task.state is TaskState.SUSPENDING:
                state.send(
                    node_id,
                    SuspendCommand(
                        ref, lifecycle.suspend_grace_s(state, job), job.message or "suspend"
                    ),
                )
