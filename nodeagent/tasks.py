"""The task table: launches, suspensions, kills, exits, records and trainer callbacks."""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from nodeagent.clock import Clock, SystemClock
from nodeagent.endstate import decide_end, read_exit_record
from nodeagent.launcher import (
    ChildProcess,
    TaskProcess,
    adopt_process,
    find_free_port,
    spawn_task,
)
from nodeagent.logtail import fetch_size, tail_bytes, tail_lines
from nodeagent.model import (
    LaunchRequest,
    LogsResult,
    ProgressInfo,
    RegroupCommand,
    RegroupRequest,
    RunningTask,
    StopCommand,
    SuspendCommand,
    TaskRef,
    TaskState,
    TaskStatusInfo,
    TrainerCommand,
)
from nodeagent.paths import AgentPaths, is_safe_component
from nodeagent.peercheck import Peer, peer_is_task
from nodeagent.progress import ProgressRelay
from nodeagent.records import RecordStore, TaskRecord
from nodeagent.regroup import joining_launch, regroup_refusal
from nodeagent.selffence import ShimFence
from nodeagent.taskenv import DEFAULT_MASTER_ADDR, TaskContext, build_task_env
from nodeagent.taskuser import TaskIdentity, TaskUserError, TaskUsers, prepare_task_dirs
from nodeagent.trainer_channel import TrainerChannel

log = logging.getLogger(__name__)

FAILURE_LOG_LINES = 20


class SpawnFn(Protocol):
    """Starts a task process (nodeagent.launcher.spawn_task's signature)."""

    def __call__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        header: str,
        identity: TaskIdentity | None = None,
    ) -> ChildProcess:
        """Start ``argv``; ``identity``: the uid to run it as (None: the agent's)."""
        ...


class TaskEvents(Protocol):
    """Where the task table reports to (the controller link)."""

    def task_status(self, status: TaskStatusInfo) -> None:
        """A task changed state (or its checkpoint/restored step changed)."""
        ...

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        """A (rate-limited) progress report from a trainer."""
        ...


class TrainerAuthError(Exception):
    """A trainer session presented an unknown task, a stale attempt or a wrong token."""


@dataclass
class _LiveTask:
    record: TaskRecord
    process: TaskProcess
    channel: TrainerChannel
    term_at: float | None = None  # monotonic time to send SIGTERM
    kill_at: float | None = None  # monotonic time to send SIGKILL
    term_sent: bool = False
    kill_sent: bool = False
    saving: bool = False  # the trainer said a checkpoint save is in progress
    save_cap: float | None = None  # monotonic: a save holds back escalation until then at most


@dataclass(frozen=True)
class NodeShape:
    """What the task environment needs to know about the node."""

    node_id: str
    virtual_gpu_indices: frozenset[int]
    gpu_slots: int
    cpu_count: int
    gpu_slices: int = 1  # slots per physical GPU: slot s is on GPU s // gpu_slices


class TaskManager:
    """Owns every task attempt on this node.

    Thread-safe: called from the controller link (commands), the event loop (``poll``, metrics)
    and trainer sessions. Status events are emitted while holding the table lock, so they reach
    the controller link in order; the link must not call back into the table from ``task_status``.
    """

    def __init__(
        self,
        *,
        paths: AgentPaths,
        node: NodeShape,
        events: TaskEvents,
        suspend_grace_s: float,
        kill_grace_s: float,
        progress_min_interval_s: float = 1.0,
        clock: Clock | None = None,
        spawn: SpawnFn = spawn_task,
        base_env: Mapping[str, str] | None = None,
        save_extension_s: float = 0.0,
        shim_fence: Callable[[], ShimFence] | None = None,
        task_users: TaskUsers | None = None,
    ) -> None:
        """``save_extension_s``: how much longer than twice the grace a suspension may wait
        for a checkpoint save in progress; ``shim_fence``: the deadlines given to each new
        task's shim for when it hears nothing from this agent (None: the shim never
        fences itself); ``task_users``: which uid each job's tasks run under (None: the
        agent's)."""
        self._paths = paths
        self._task_users = task_users
        self._node = node
        self._events = events
        self._suspend_grace_s = suspend_grace_s
        self._kill_grace_s = kill_grace_s
        self._clock = clock or SystemClock()
        self._spawn = spawn
        self._base_env = base_env
        self._save_extension_s = save_extension_s
        self._shim_fence = shim_fence
        self._store = RecordStore(paths)
        self._lock = threading.RLock()
        self._live: dict[TaskRef, _LiveTask] = {}
        self._finals: dict[TaskRef, TaskRecord] = {}
        self._trainer_address = ""
        self._relay = ProgressRelay(events.task_progress, progress_min_interval_s, self._clock)

    # ----------------------------------------------------------------- setup

    def set_trainer_address(self, address: str) -> None:
        """The TrainerService target given to new tasks (``MLSCHED_AGENT_ADDR``)."""
        self._trainer_address = address

    def adopt_existing(self) -> int:
        """Load the records of a previous run: re-adopt live processes, settle the others.

        Returns the number of processes re-adopted.
        """
        adopted = 0
        with self._lock:
            for record in self._store.load_all():
                ref = record.ref
                if record.task_state.is_final:
                    if record.final_unacked:
                        self._finals[ref] = record
                    else:
                        self._store.delete(ref)
                    continue
                process = adopt_process(record.pid, record.create_time) if record.pid else None
                if process is None:
                    log.info("task %s (pid %d) exited while the agent was down", ref, record.pid)
                    self._finish(record, None, None)
                    continue
                task = _LiveTask(record, process, TrainerChannel(self._clock))
                self._restore_deadlines(task)
                if record.suspend_requested:
                    task.channel.push(SuspendCommand(record.suspend_reason), sticky=True)
                if record.stop_reason:
                    task.channel.push(StopCommand(record.stop_reason), sticky=True)
                self._live[ref] = task
                adopted += 1
                log.info("re-adopted task %s (pid %d, %s)", ref, record.pid, record.state)
        return adopted

    def _restore_deadlines(self, task: _LiveTask) -> None:
        record = task.record
        now_wall, now_mono = self._clock.time(), self._clock.monotonic()
        if record.suspend_requested:
            grace = record.suspend_grace_s
            started = now_mono - (now_wall - record.suspend_started_at)
            task.term_at, task.kill_at = started + grace, started + 2 * grace
            task.save_cap = task.kill_at + self._save_extension_s
        if record.kill_requested:
            started = now_mono - (now_wall - record.kill_started_at)
            task.term_at = started if task.term_at is None else min(task.term_at, started)
            kill_at = started + self._kill_grace_s
            task.kill_at = kill_at if task.kill_at is None else min(task.kill_at, kill_at)

    # -------------------------------------------------------------- commands

    def launch(self, request: LaunchRequest) -> None:
        """Start a task attempt; a repeated launch of a known attempt re-reports its status."""
        ref = request.ref
        with self._lock:
            known = self._status_of(ref)
            if known is not None:
                log.info("launch of %s again: already %s", ref, known.state.name)
                self._events.task_status(known)
                return
            record = TaskRecord(
                job_id=ref.job_id,
                rank=ref.rank,
                attempt=ref.attempt,
                token=secrets.token_urlsafe(32),
                gpu_indices=list(request.gpu_indices),
                node_id=self._node.node_id,
                user=request.user,
                launched_at=self._clock.time(),
            )
            if not is_safe_component(ref.job_id):
                self._fail_launch(record, f"invalid job id {ref.job_id!r}", persist=False)
                return
            for other in self._live:
                if (other.job_id, other.rank) == (ref.job_id, ref.rank):
                    log.warning("launching %s while %s is still running here", ref, other)
            try:
                self._store.save(record)
            except OSError as exc:
                self._fail_launch(record, f"cannot write the task record: {exc}", persist=False)
                return
            self._events.task_status(record.status())
            if not request.command:
                self._fail_launch(record, "the job spec has an empty command")
                return
            if request.working_dir and not Path(request.working_dir).is_dir():
                self._fail_launch(
                    record, f"working directory {request.working_dir!r} does not exist here"
                )
                return
            try:
                process = self._start(request, record)
            except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte (Popen refuses)
                self._fail_launch(record, f"cannot start {request.command[0]!r}: {exc}")
                return
            record.pid, record.create_time = process.pid, process.create_time
            record.state = TaskState.RUNNING.name
            self._store.save(record)
            self._live[ref] = _LiveTask(record, process, TrainerChannel(self._clock))
            log.info(
                "started task %s: pid %d, gpus %s, %s",
                ref,
                process.pid,
                list(request.gpu_indices),
                " ".join(request.command),
            )
            self._events.task_status(record.status())

    def _exit_file(self, record: TaskRecord) -> Path:
        """Where the attempt's shim writes its exit record: in its own run directory when it
        runs under its user's uid."""
        if record.run_uid >= 0:
            return self._paths.run_dir(record.ref) / "exit.json"
        return self._paths.exit_file(record.ref)

    def _identity(self, request: LaunchRequest) -> TaskIdentity | None:
        if self._task_users is None:
            return None
        try:
            return self._task_users.identity(request.user)
        except TaskUserError as exc:
            raise OSError(str(exc)) from exc

    def _start(self, request: LaunchRequest, record: TaskRecord) -> ChildProcess:
        ref = request.ref
        identity = self._identity(request)
        checkpoint_dir = self._paths.checkpoint_dir(ref.job_id)
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if identity is not None:
            record.run_uid = identity.uid
            self._store.save(record)
            prepare_task_dirs(self._paths, ref, identity, checkpoint_dir)
        exit_file = self._exit_file(record)
        exit_file.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            exit_file.unlink()
        context = TaskContext(
            token=record.token,
            agent_addr=self._trainer_address,
            agent_addr_file=str(self._paths.trainer_address_file),
            checkpoint_dir=str(checkpoint_dir),
            exit_file=str(exit_file),
            virtual_gpus=any(i in self._node.virtual_gpu_indices for i in request.gpu_indices),
            cpu_count=self._node.cpu_count,
            node_gpu_slots=self._node.gpu_slots,
            master_port=request.master_port or find_free_port(),
            gpu_slices=self._node.gpu_slices,
        )
        base_env = self._base_env if self._base_env is not None else os.environ
        env = build_task_env(request, context, base_env)
        if self._shim_fence is not None:
            fence = self._shim_fence()
            env["MLSCHED_FENCE_SUSPEND_AFTER_S"] = repr(fence.suspend_after_s)
            env["MLSCHED_FENCE_EXIT_AFTER_S"] = repr(fence.exit_after_s)
        cwd = Path(request.working_dir) if request.working_dir else self._paths.state_dir
        header = f"=== attempt {ref.attempt} on node {self._node.node_id} ==="
        log_path = self._paths.log_file(ref.job_id, ref.rank)
        if identity is not None:
            run_dir = str(self._paths.run_dir(ref))
            env["HOME"] = identity.home or run_dir
            env["USER"] = env["LOGNAME"] = request.user
            if cwd == self._paths.state_dir:
                cwd = Path(run_dir)
            return self._spawn(request.command, env, cwd, log_path, header, identity=identity)
        return self._spawn(request.command, env, cwd, log_path, header)

    def _fail_launch(self, record: TaskRecord, message: str, *, persist: bool = True) -> None:
        log.error("task %s failed to launch: %s", record.ref, message)
        record.state = TaskState.FAILED.name
        record.message = message
        record.final_unacked = True
        if persist:
            self._store.save(record)
        self._finals[record.ref] = record
        self._events.task_status(record.status())

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None:
        """SuspendNow to the trainer; SIGTERM after the grace; SIGKILL after the grace again.

        ``grace_s`` <= 0 uses the configured default.
        """
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                self._report_not_live(ref, "suspend")
                return
            record = task.record
            if record.suspend_requested or record.kill_requested:
                return
            grace = grace_s if grace_s > 0 else self._suspend_grace_s
            record.suspend_requested = True
            record.suspend_started_at = self._clock.time()
            record.suspend_grace_s = grace
            record.suspend_reason = reason
            record.state = TaskState.SUSPENDING.name
            self._store.save(record)
            task.channel.push(SuspendCommand(reason), sticky=True)
            now = self._clock.monotonic()
            task.term_at = now + grace
            task.kill_at = now + 2 * grace if task.kill_at is None else task.kill_at
            task.save_cap = now + 2 * grace + self._save_extension_s
            log.info("suspending task %s (grace %.1fs): %s", ref, grace, reason or "no reason")
            self._events.task_status(record.status())

    def kill(self, ref: TaskRef, reason: str) -> None:
        """SIGTERM the task now and SIGKILL it after the kill grace; it ends KILLED."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                self._report_not_live(ref, "kill")
                return
            record = task.record
            if record.kill_requested:
                return
            record.kill_requested = True
            record.kill_started_at = self._clock.time()
            record.kill_reason = reason
            self._store.save(record)
            now = self._clock.monotonic()
            task.process.terminate()
            task.term_sent = True
            kill_at = now + self._kill_grace_s
            task.kill_at = kill_at if task.kill_at is None else min(task.kill_at, kill_at)
            log.info("killing task %s: %s", ref, reason or "no reason")

    def regroup(self, request: RegroupRequest) -> bool:
        """Change a running attempt's process count in place (nodeagent/regroup.py): start the
        new ranks and send every running rank the new rendezvous. False (logged) when it
        cannot be done here; the controller then falls back to checkpoint-restart."""
        with self._lock:
            ranks = {
                ref.rank: task
                for ref, task in self._live.items()
                if (ref.job_id, ref.attempt) == (request.job_id, request.attempt)
            }
            leaving = [
                rank
                for rank, task in ranks.items()
                if task.record.suspend_requested
                or task.record.kill_requested
                or task.record.stop_reason
            ]
            refusal = regroup_refusal(request, ranks, leaving)
            if refusal is not None:
                log.error("regroup %d refused: %s", request.generation, refusal)
                return False
            port = request.master_port or find_free_port()
            for launch in request.launches:
                self.launch(joining_launch(launch, request, port))
            command = RegroupCommand(
                request.generation,
                request.world_size,
                DEFAULT_MASTER_ADDR,
                port,
                request.batch_size,
            )
            for task in ranks.values():
                task.channel.push(command, sticky=True)  # a re-sent one is ignored by the shim
            log.info(
                "regroup %d of %s attempt %d: %d -> %d ranks, rendezvous port %d",
                request.generation,
                request.job_id,
                request.attempt,
                len(ranks),
                request.world_size,
                port,
            )
            return True

    def trainer_command(self, ref: TaskRef, command: TrainerCommand) -> bool:
        """Queue a command for the task's trainer; False when the task is not running here."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                log.warning("trainer command %s for %s, which is not running here", command, ref)
                return False
            sticky = isinstance(command, StopCommand)
            if sticky:
                task.record.stop_reason = command.reason or "stop requested"
                self._store.save(task.record)
            task.channel.push(command, sticky=sticky)
            return True

    def ack(self, ref: TaskRef) -> None:
        """The controller recorded the end of this attempt: forget it."""
        with self._lock:
            if self._finals.pop(ref, None) is not None:
                self._store.delete(ref)
                log.debug("final status of %s acknowledged", ref)
            elif ref in self._live:
                log.warning("ack for %s, which is still running: ignored", ref)

    def _report_not_live(self, ref: TaskRef, what: str) -> None:
        final = self._finals.get(ref)
        if final is not None:
            self._events.task_status(final.status())
            return
        log.warning("%s of %s, which this node does not know: reporting it LOST", what, ref)
        self._events.task_status(
            TaskStatusInfo(
                ref, TaskState.LOST, message=f"task unknown on node {self._node.node_id}"
            )
        )

    # ---------------------------------------------------------------- polling

    def poll(self) -> None:
        """Notice exits and run due SIGTERM/SIGKILL escalations (called periodically)."""
        with self._lock:
            now = self._clock.monotonic()
            for task in list(self._live.values()):
                exited = task.process.poll()
                if exited is not None:
                    self._finish(task.record, task.channel, exited.returncode)
                    continue
                if self._held_by_save(task, now):
                    continue
                if task.term_at is not None and now >= task.term_at and not task.term_sent:
                    log.info("task %s still running after the grace: SIGTERM", task.record.ref)
                    task.process.terminate()
                    task.term_sent = True
                if task.kill_at is not None and now >= task.kill_at and not task.kill_sent:
                    log.warning("task %s still running after SIGTERM: SIGKILL", task.record.ref)
                    task.process.kill()
                    task.kill_sent = True

    @staticmethod
    def _held_by_save(task: _LiveTask, now: float) -> bool:
        """A suspension (not a kill) waits for a save in progress, until its cap."""
        if not task.saving or task.record.kill_requested or task.save_cap is None:
            return False
        return now < task.save_cap

    def _finish(
        self, record: TaskRecord, channel: TrainerChannel | None, returncode: int | None
    ) -> None:
        ref = record.ref
        exit_record = read_exit_record(self._exit_file(record))
        decision = decide_end(
            returncode,
            exit_record,
            suspend_requested=record.suspend_requested,
            kill_requested=record.kill_requested,
            kill_reason=record.kill_reason,
            log_tail=tail_lines(self._paths.log_file(ref.job_id, ref.rank), FAILURE_LOG_LINES),
        )
        record.state = decision.state.name
        record.exit_code = decision.exit_code
        record.message = decision.message
        if exit_record is not None:
            record.checkpoint_step = max(record.checkpoint_step, exit_record.checkpoint_step)
        record.final_unacked = True
        self._store.save(record)
        if channel is not None:
            channel.close()
        self._live.pop(ref, None)
        self._finals[ref] = record
        self._relay.forget(ref)
        level = logging.WARNING if decision.state is TaskState.FAILED else logging.INFO
        log.log(level, "task %s ended %s: %s", ref, decision.state.name, decision.message)
        self._events.task_status(record.status())

    def flush_progress(self) -> None:
        """Send held progress reports that are due (called periodically)."""
        self._relay.flush()

    # ------------------------------------------------------------------ views

    def _status_of(self, ref: TaskRef) -> TaskStatusInfo | None:
        task = self._live.get(ref)
        if task is not None:
            return task.record.status()
        final = self._finals.get(ref)
        return final.status() if final is not None else None

    def statuses(self) -> list[TaskStatusInfo]:
        """Running attempts and ended attempts whose end is not acknowledged yet."""
        with self._lock:
            records = [t.record for t in self._live.values()] + list(self._finals.values())
            return [r.status() for r in sorted(records, key=lambda r: r.ref)]

    def running(self) -> list[tuple[TaskRef, int]]:
        """``(task, pid)`` of every running attempt."""
        with self._lock:
            return [(ref, t.process.pid) for ref, t in self._live.items()]

    def running_tasks(self) -> list[RunningTask]:
        """Every running attempt with its GPUs and start; ``movable`` unless it is being
        suspended, stopped or killed."""
        with self._lock:
            out = []
            for ref, task in sorted(self._live.items()):
                r = task.record
                leaving = r.suspend_requested or r.kill_requested or bool(r.stop_reason)
                out.append(
                    RunningTask(
                        ref, task.process.pid, tuple(r.gpu_indices), r.launched_at, not leaving
                    )
                )
            return out

    def busy_gpus(self) -> set[int]:
        """GPU indices held by running attempts."""
        with self._lock:
            return {i for t in self._live.values() for i in t.record.gpu_indices}

    def fetch_logs(self, job_id: str, rank: int, max_bytes: int) -> LogsResult:
        """The tail of a rank's log (all attempts on this node); ``max_bytes`` <= 0: 64 KiB."""
        if not is_safe_component(job_id):
            return LogsResult(error=f"invalid job id {job_id!r}")
        path = self._paths.log_file(job_id, rank)
        try:
            content, truncated = tail_bytes(path, fetch_size(max_bytes))
        except FileNotFoundError:
            return LogsResult(error=f"no log for {job_id} rank {rank} on node {self._node.node_id}")
        except OSError as exc:
            return LogsResult(error=f"cannot read the log of {job_id} rank {rank}: {exc}")
        return LogsResult(content=content, truncated=truncated)

    # ------------------------------------------------------- trainer sessions

    def authenticate(
        self, task_id: str, token: str, peer: Peer | None = None
    ) -> tuple[TaskRef, TrainerChannel]:
        """Check a trainer's credentials; raises TrainerAuthError unless it is a running attempt
        and, given ``peer`` (who holds the connection), the socket is the task's: owned by its
        uid when it runs as its user, else by a process in its own session. A token read by
        another job opens nothing (nodeagent/peercheck.py)."""
        try:
            ref = TaskRef.parse(task_id)
        except ValueError as exc:
            raise TrainerAuthError(str(exc)) from None
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                raise TrainerAuthError(f"task {task_id} is not running on this node")
            if not token or not hmac.compare_digest(token.encode(), task.record.token.encode()):
                raise TrainerAuthError(f"wrong token for task {task_id}")
            if peer is not None and not peer_is_task(peer, task.record.run_uid, task.record.pid):
                raise TrainerAuthError(
                    f"the connecting socket (processes {sorted(peer.pids)}, uids "
                    f"{sorted(peer.uids)}) is not task {task_id}'s"
                )
            return ref, task.channel

    def on_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        """A trainer reported progress."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                return
            task.record.last_progress = progress
        self._relay.offer(ref, progress)

    def on_checkpoint(self, ref: TaskRef, step: int, path: str) -> None:
        """A trainer saved a checkpoint."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                return
            task.record.checkpoint_step = step
            self._store.save(task.record)
            log.info("task %s saved checkpoint step %d (%s)", ref, step, path)
            self._events.task_status(task.record.status())

    def on_save(self, ref: TaskRef, in_progress: bool, step: int) -> None:
        """A trainer started (``in_progress``) or ended a checkpoint save.

        A suspension's SIGTERM and SIGKILL wait while a save is in progress, at most the save
        extension past twice the grace; a save that ends past the grace leaves the trainer
        the kill grace to exit before SIGKILL (within that cap)."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                return
            task.saving = in_progress
            if in_progress:
                log.info("task %s is saving checkpoint step %d", ref, step)
                return
            now = self._clock.monotonic()
            if task.save_cap is not None and task.kill_at is not None and not task.kill_sent:
                task.kill_at = max(task.kill_at, min(task.save_cap, now + self._kill_grace_s))

    def on_restored(self, ref: TaskRef, step: int) -> None:
        """A trainer restored a checkpoint (step 0: fresh start)."""
        with self._lock:
            task = self._live.get(ref)
            if task is None:
                return
            task.record.restored_step = step
            task.record.restored = True
            self._store.save(task.record)
            log.info("task %s restored from step %d", ref, step)
            self._events.task_status(task.record.status())
