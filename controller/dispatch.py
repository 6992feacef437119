"""Connected agent sessions: each has an outbound queue of encoded commands. Also the decoding
of the agents' load reports and migration requests (MLFS)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controller.commands import (
    AckCommand,
    BatchSizeCommand,
    Command,
    KillCommand,
    LaunchCommand,
    LeaseCommand,
    PriorityCommand,
    RegroupCommand,
    StopTrainingCommand,
    SuspendCommand,
    TaskRef,
)
from controller.errors import Unavailable
from mlsched import serde
from mlsched.model import MigrationRequest, NodeLoad, TaskUsage
from mlsched.v1 import agent_pb2


def task_ref_to_proto(ref: TaskRef) -> agent_pb2.TaskRef:
    return agent_pb2.TaskRef(job_id=ref.job_id, rank=ref.rank, attempt=ref.attempt)


def encode(command: Command) -> agent_pb2.AgentSessionResponse:
    """Domain command → the message sent on the agent session."""
    task = task_ref_to_proto(command.task)
    if isinstance(command, LaunchCommand):
        return agent_pb2.AgentSessionResponse(
            launch=agent_pb2.LaunchTask(
                task=task,
                spec=serde.spec_to_proto(command.spec),
                gpu_indices=command.gpu_indices,
                world_size=command.world_size,
                local_rank=command.local_rank,
                local_world_size=command.local_world_size,
                master_addr=command.master_addr,
                master_port=command.master_port,
                resume=command.resume,
                user=command.user,
                ps_workers=command.ps_workers,
            )
        )
    if isinstance(command, SuspendCommand):
        return agent_pb2.AgentSessionResponse(
            suspend=agent_pb2.SuspendTask(task=task, grace_s=command.grace_s, reason=command.reason)
        )
    if isinstance(command, KillCommand):
        return agent_pb2.AgentSessionResponse(
            kill=agent_pb2.KillTask(task=task, reason=command.reason)
        )
    if isinstance(command, LeaseCommand):
        status = (
            agent_pb2.LEASE_STATUS_RENEWED if command.renewed else agent_pb2.LEASE_STATUS_EXPIRED
        )
        return agent_pb2.AgentSessionResponse(
            lease=agent_pb2.LeaseUpdate(task=task, status=status, expires_at=command.expires_at)
        )
    if isinstance(command, StopTrainingCommand):
        return agent_pb2.AgentSessionResponse(
            trainer_command=agent_pb2.TrainerCommand(
                task=task, stop=agent_pb2.StopTraining(reason=command.reason)
            )
        )
    if isinstance(command, BatchSizeCommand):
        return agent_pb2.AgentSessionResponse(
            trainer_command=agent_pb2.TrainerCommand(
                task=task, set_batch_size=agent_pb2.SetBatchSize(batch_size=command.batch_size)
            )
        )
    if isinstance(command, AckCommand):
        return agent_pb2.AgentSessionResponse(ack=agent_pb2.TaskStatusAck(task=task))
    if isinstance(command, PriorityCommand):
        return agent_pb2.AgentSessionResponse(
            priority=agent_pb2.TaskPriority(task=task, priority=command.priority)
        )
    if isinstance(command, RegroupCommand):
        return agent_pb2.AgentSessionResponse(
            regroup=agent_pb2.RegroupTask(
                job_id=command.task.job_id,
                attempt=command.task.attempt,
                generation=command.generation,
                world_size=command.world_size,
                new_ranks=[
                    agent_pb2.RegroupRank(rank=rank, gpu_indices=gpus)
                    for rank, gpus in command.new_ranks
                ],
                spec=serde.spec_to_proto(command.spec),
                user=command.user,
                batch_size=command.batch_size,
            )
        )
    raise TypeError(f"unknown command {command!r}")


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def _shares(values: Mapping[str, float]) -> dict[str, float]:
    """A share map off the wire: non-finite values dropped, the rest clamped to [0, 1]."""
    return {str(k): _clamp(v) for k, v in values.items() if math.isfinite(v)}


def node_load_from_proto(report: agent_pb2.MetricsReport) -> NodeLoad | None:
    """The load in a metrics report; None when the agent sent none (an older agent)."""
    if not report.HasField("load"):
        return None
    load = report.load
    gpus = {int(i): _clamp(u) for i, u in load.gpu_utilization.items() if math.isfinite(u)}
    tasks = tuple(
        TaskUsage(
            job_id=t.task.job_id,
            rank=t.task.rank,
            attempt=t.task.attempt,
            demand=_shares(t.demand),
            gpu_index=t.gpu_index,
            gpu_utilization=_clamp(t.gpu_utilization) if math.isfinite(t.gpu_utilization) else 0.0,
        )
        for t in load.tasks
    )
    return NodeLoad(
        utilization=_shares(load.utilization),
        gpu_utilization=gpus,
        tasks=tasks,
        cpu_cores=load.capacity.cpu_cores,
        memory_bytes=load.capacity.memory_bytes,
        bandwidth_bytes_per_s=load.capacity.bandwidth_bytes_per_s,
    )


def migration_request_from_proto(msg: agent_pb2.MigrationRequest) -> MigrationRequest:
    return MigrationRequest(
        job_id=msg.task.job_id,
        rank=msg.task.rank,
        attempt=msg.task.attempt,
        server_utilization=_shares(msg.server_utilization),
        demand=_shares(msg.demand),
        reason=msg.reason,
    )


_CLOSED = object()
# Commands queued for one agent before its session is cut (RESOURCE_EXHAUSTED): an agent that
# stopped reading must not grow the controller's memory; on its next registration the
# reconciliation repeats what still matters. A cycle sends a node a few commands per task.
OUTBOX_LIMIT = 10_000


class AgentSession:
    """One agent's outbound queue. ``put`` and ``close`` may be called from any thread; the
    queue lives on the server's event loop and ``next`` is awaited there."""

    def __init__(
        self, node_id: str, loop: asyncio.AbstractEventLoop, limit: int = OUTBOX_LIMIT
    ) -> None:
        self.node_id = node_id
        self.overflowed = False  # closed because ``limit`` messages were waiting
        self._loop = loop
        self._limit = limit
        self._outbox: asyncio.Queue[object] = asyncio.Queue()
        self._closed = False

    def put(self, message: agent_pb2.AgentSessionResponse) -> None:
        self._soon(self._put, message)

    def close(self) -> None:
        self._soon(self._close)

    def _soon(self, callback: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server has stopped
            self._loop.call_soon_threadsafe(callback, *args)

    def _put(self, message: agent_pb2.AgentSessionResponse) -> None:
        if self._closed:
            return
        if self._outbox.qsize() >= self._limit:
            self.overflowed = True
            self._close()
            return
        self._outbox.put_nowait(message)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put_nowait(_CLOSED)

    async def next(self) -> agent_pb2.AgentSessionResponse:
        """The next message; raises ``EOFError`` once closed."""
        item = await self._outbox.get()
        if item is _CLOSED:
            raise EOFError
        return item  # type: ignore[return-value]


@dataclass
class _PendingLogs:
    done: threading.Event = field(default_factory=threading.Event)
    reply: agent_pb2.LogsReply | None = None


class AgentSessions:
    """The registry of live sessions, one per node; a new session replaces an older one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, AgentSession] = {}
        self._pending: dict[str, _PendingLogs] = {}

    def open(self, node_id: str, loop: asyncio.AbstractEventLoop) -> AgentSession:
        session = AgentSession(node_id, loop)
        with self._lock:
            old = self._sessions.get(node_id)
            self._sessions[node_id] = session
        if old is not None:
            old.close()
        return session

    def remove(self, session: AgentSession) -> bool:
        """Forget ``session``; True when it was still the node's current one."""
        session.close()
        with self._lock:
            if self._sessions.get(session.node_id) is session:
                del self._sessions[session.node_id]
                return True
        return False

    def disconnect(self, node_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(node_id, None)
        if session is not None:
            session.close()

    def send(self, node_id: str, command: Command) -> None:
        """Queue a command; dropped when the node is not connected (reconciliation on its
        next registration repeats what still matters)."""
        with self._lock:
            session = self._sessions.get(node_id)
        if session is not None:
            session.put(encode(command))

    def fetch_logs(
        self, node_id: str, task: TaskRef, max_bytes: int, timeout_s: float
    ) -> agent_pb2.LogsReply:
        request_id = uuid.uuid4().hex
        pending = _PendingLogs()
        with self._lock:
            session = self._sessions.get(node_id)
            if session is None:
                raise Unavailable(f"node {node_id} is not connected; its logs are unreachable")
            self._pending[request_id] = pending
        session.put(
            agent_pb2.AgentSessionResponse(
                fetch_logs=agent_pb2.FetchLogs(
                    request_id=request_id, task=task_ref_to_proto(task), max_bytes=max_bytes
                )
            )
        )
        try:
            if not pending.done.wait(timeout_s):
                raise TimeoutError(f"node {node_id} did not send the logs within {timeout_s} s")
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        assert pending.reply is not None
        return pending.reply

    def logs_arrived(self, reply: agent_pb2.LogsReply) -> None:
        with self._lock:
            pending = self._pending.get(reply.request_id)
        if pending is not None:
            pending.reply = reply
            pending.done.set()
