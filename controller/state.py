"""The controller's in-memory view of the cluster, written through to the store."""

from __future__ import annotations

import copy
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from controller.clock import Clock
from controller.commands import Command
from controller.fencing import Fences, assumed_margin_s
from controller.resize_book import ResizeBook
from controller.states import check_transition
from controller.store import Store
from mlsched.model import Event, Job, JobState, Node, Task, TaskState

log = logging.getLogger(__name__)

CommandSink = Callable[[str, Command], None]
"""Delivers a command to a node's agent (``dispatch.AgentSessions.send``)."""

LIVE_TASK_STATES = (TaskState.LAUNCHING, TaskState.RUNNING, TaskState.SUSPENDING)


@dataclass
class SrTiming:
    """One suspend-and-resume cycle of a job being timed (UniSched §III-B3's t_sr).

    In memory only: a controller restart in the middle of a cycle loses that one measurement.
    """

    ordered_at: float  # the job entered SUSPENDING
    suspension_s: float | None = None  # SUSPENDING -> SUSPENDED
    launched_at: float | None = None  # the resuming launch
    attempt: int = 0  # the resuming attempt, whose first progress report ends the cycle


@dataclass(frozen=True)
class ControllerSettings:
    lease_s: float = 300.0  # UniSched's BE lease is 5 min; the demo uses seconds
    cycle_s: float = 5.0
    heartbeat_timeout_s: float = 30.0
    suspend_grace_s: float = 30.0
    # Below Linux's ephemeral ports (32768-60999 by default): a port the kernel gives to a
    # listener on port 0 or to an outgoing connection on the node of rank 0 can then never take
    # a job's rendezvous port (seen: a controller on port 0 got 38641, a job's pick in the old
    # 29500-39499 range, and the job failed with EADDRINUSE).
    master_port_range: tuple[int, int] = (29500, 32767)
    # How long a submit's request id is remembered: a retry within it returns the same job.
    submit_request_retention_s: float = 24 * 3600.0
    # Finished jobs and events older than this move to the store's archive and out of memory
    # (controller.retention); None keeps everything live.
    retain_finished_s: float | None = 7 * 24 * 3600.0


class ControllerState:
    """Jobs, tasks and nodes, guarded by one lock; every change is persisted before it is used.

    Callers hold ``lock`` around any sequence of reads and writes that must be consistent.
    """

    def __init__(
        self, store: Store, clock: Clock, send: CommandSink, settings: ControllerSettings
    ) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every new event
        self.store = store
        self.clock = clock
        self.send = send
        self.settings = settings
        loaded = store.load()
        self.jobs: dict[str, Job] = loaded.jobs
        self.tasks: dict[str, list[Task]] = loaded.tasks
        self.nodes: dict[str, Node] = loaded.nodes
        self.connected: set[str] = set()
        self.sr_timings: dict[str, SrTiming] = {}  # job id -> suspend/resume being timed
        self.resizes = ResizeBook()  # elastic resizes under way (controller.resize)
        self.fences = Fences()  # LOST tasks whose process may still run (controller.fencing)
        self.agent_fence_margin_s: dict[str, float] = {}  # node id -> its self_fence_margin_s
        self.last_event_seq = 0
        now = clock.now()
        for node in self.nodes.values():
            node.last_seen = now  # a restarted controller gives every agent a full timeout
        self._restore_fences()
        with self.lock:
            for row in loaded.quarantined:
                message = (
                    f"quarantined unreadable {row.source} row {row.key!r} ({row.error});"
                    " the controller starts without it (kept in the store's quarantine table)"
                )
                log.error("%s", message)
                self.emit("state_row_quarantined", message, row.job_id, row.node_id)

    def _restore_fences(self) -> None:
        """Fence again the LOST tasks of dead nodes whose job waits for a new attempt: when
        their fence would have ended is not stored, so it ends one fencing time after now."""
        for job_id, tasks in self.tasks.items():
            job = self.jobs.get(job_id)
            if job is None or not job.state.queued:
                continue
            for task in tasks:
                node = self.nodes.get(task.node_id)
                if task.state is TaskState.LOST and node is not None and not node.alive:
                    self.fences.hold(task, self.fence_until(node))

    # --- persistence -------------------------------------------------------------------
    @contextmanager
    def atomic(self, job: Job, durable: bool = True) -> Iterator[None]:
        """One store transaction for a change to ``job``: commands sent inside are held back
        until it commits; when it fails (a full disk) the job, its tasks and the event counter
        are put back as they were, so memory never runs ahead of the disk. Caller holds
        ``lock``. ``durable=False`` (progress, a task now running) commits lazily unless a
        command was sent: what an agent or a client is told is on disk first."""
        saved_job = copy.deepcopy(job)
        saved_tasks = copy.deepcopy(self.tasks.get(job.id))
        saved_seq = self.last_event_seq
        try:
            with self.holding_commands(durable):
                yield
        except BaseException:
            vars(job).update(vars(saved_job))
            if saved_tasks is None:
                self.tasks.pop(job.id, None)
            else:
                self.tasks[job.id] = saved_tasks
            self.last_event_seq = saved_seq
            raise

    @contextmanager
    def holding_commands(self, durable: bool = True) -> Iterator[None]:
        """One store transaction; commands sent inside go out after it commits (durably when
        there is one), none when it fails. Memory is not put back (see ``atomic``). Caller
        holds ``lock``."""
        held: list[tuple[str, Command]] = []
        send, self.send = self.send, lambda node_id, command: held.append((node_id, command))
        try:
            with self.store.transaction(durable):
                yield
                if held:
                    self.store.mark_durable()
        finally:
            self.send = send
        for node_id, command in held:
            send(node_id, command)

    def save_job(self, job: Job) -> None:
        self.store.save_job(job)

    def save_tasks(self, job_id: str) -> None:
        self.store.save_tasks(job_id, self.tasks.get(job_id, []))

    def save_node(self, node: Node) -> None:
        self.store.save_node(node)

    def emit(self, kind: str, message: str, job_id: str = "", node_id: str = "") -> Event:
        event = self.store.append_event(self.clock.now(), kind, message, job_id, node_id)
        self.last_event_seq = event.seq
        self.changed.notify_all()
        return event

    def set_job_state(self, job: Job, new: JobState, message: str = "") -> None:
        """Move a job through the state machine, persist it and record an event."""
        check_transition(job.id, job.state, new)
        old, job.state = job.state, new
        if message:
            job.message = message
        if new.terminal:
            job.end_time = self.clock.now()
            job.lease_expires_at = None
            self.sr_timings.pop(job.id, None)
        self.save_job(job)
        text = f"{old.value} -> {new.value}" + (f": {message}" if message else "")
        self.emit("job_state", text, job_id=job.id)

    # --- queries -----------------------------------------------------------------------
    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def job_tasks(self, job_id: str) -> list[Task]:
        return self.tasks.get(job_id, [])

    def live_tasks(self, job_id: str) -> list[Task]:
        return [t for t in self.job_tasks(job_id) if t.state in LIVE_TASK_STATES]

    def attempt_gpus(self, job_id: str) -> int:
        """GPUs the job's current (or last) attempt was launched on; fewer than the spec asks
        for in a profiling run."""
        return sum(len(t.gpu_indices) for t in self.job_tasks(job_id))

    def tasks_on_node(self, node_id: str) -> Iterable[Task]:
        for tasks in self.tasks.values():
            for task in tasks:
                if task.node_id == node_id:
                    yield task

    def fence_until(self, node: Node) -> float:
        """When a node declared dead has surely ended its tasks: its agent's self-fencing margin
        (or the assumed one) past its last heartbeat plus the heartbeat timeout."""
        settings = self.settings
        margin_s = self.agent_fence_margin_s.get(node.id) or assumed_margin_s(
            settings.suspend_grace_s
        )
        return node.last_seen + settings.heartbeat_timeout_s + margin_s

    def busy_gpus(self) -> dict[str, set[int]]:
        """GPUs held by tasks that have not ended, and by fenced LOST tasks, per node."""
        busy: dict[str, set[int]] = self.fences.gpus()
        for tasks in self.tasks.values():
            for task in tasks:
                if task.state in LIVE_TASK_STATES:
                    busy.setdefault(task.node_id, set()).update(task.gpu_indices)
        return busy

    def schedulable_nodes(self) -> list[Node]:
        """Alive nodes whose agent is connected now."""
        return [n for nid, n in sorted(self.nodes.items()) if n.alive and nid in self.connected]
