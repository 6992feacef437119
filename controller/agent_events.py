"""Reacting to what node agents report: registration and reconciliation, heartbeats, task
status changes and trainer progress."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from controller import lifecycle
from controller.commands import AckCommand, KillCommand, SuspendCommand, TaskReport
from controller.state import LIVE_TASK_STATES, ControllerState
from mlsched.model import JobState, Node, NodeMetrics, Progress, Task, TaskState

log = logging.getLogger(__name__)


class AgentEvents:
    def __init__(self, state: ControllerState) -> None:
        self.state = state

    def register(self, node: Node, reports: Sequence[TaskReport]) -> None:
        """A (re)connecting agent: record the node and reconcile the tasks it reports."""
        state = self.state
        with state.lock:
            node.alive = True
            node.last_seen = state.clock.now()
            known = state.nodes.get(node.id)
            state.nodes[node.id] = node
            state.connected.add(node.id)
            state.save_node(node)
            verb = "re-registered" if known else "registered"
            gpus = f"{len(node.gpus)} {'virtual ' if any(g.virtual for g in node.gpus) else ''}GPUs"
            state.emit("node_registered", f"{verb} with {gpus} at {node.address}", node_id=node.id)
            reported = set()
            for report in reports:
                reported.add((report.task.job_id, report.task.rank, report.task.attempt))
                self._apply_report(node.id, report)
            for task in list(state.tasks_on_node(node.id)):
                if task.state in LIVE_TASK_STATES and (
                    (task.job_id, task.rank, task.attempt) not in reported
                ):
                    lifecycle.task_ended(
                        state, task, TaskState.LOST, 0, "agent no longer knows this task"
                    )
            self._resend_pending(node.id)

    def disconnected(self, node_id: str) -> None:
        with self.state.lock:
            self.state.connected.discard(node_id)
            self.state.emit("node_disconnected", "agent session closed", node_id=node_id)

    def heartbeat(self, node_id: str, metrics: NodeMetrics | None = None) -> None:
        with self.state.lock:
            node = self.state.nodes.get(node_id)
            if node is None:
                return
            node.last_seen = self.state.clock.now()
            if metrics is not None:
                node.metrics = metrics

    def task_status(self, node_id: str, report: TaskReport) -> None:
        with self.state.lock:
            self.heartbeat(node_id)
            self._apply_report(node_id, report)

    def progress(
        self, node_id: str, job_id: str, rank: int, attempt: int, progress: Progress
    ) -> None:
        with self.state.lock:
            task = self._current_task(job_id, rank, attempt)
            job = self.state.job(job_id)
            if task is None or job is None or task.node_id != node_id or rank != 0:
                return
            job.iteration = progress.iteration
            if progress.iteration_time_s > 0:
                job.iteration_time_s = progress.iteration_time_s
            job.metrics = {**job.metrics, **progress.metrics, "loss": progress.loss}
            self.state.save_job(job)

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
        if task is None or job is None or task.node_id != node_id:
            # Unknown, stale attempt or placed elsewhere: it must not keep running.
            if report.state.ended:
                state.send(node_id, AckCommand(ref))
            else:
                state.send(node_id, KillCommand(ref, "not a current task of this cluster"))
            return
        self._record_steps(job, task, report)
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
                    SuspendCommand(ref, state.settings.suspend_grace_s, job.message or "suspend"),
                )
