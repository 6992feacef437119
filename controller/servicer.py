"""gRPC servicers: thin adapters from RPCs to controller operations.

Each domain error maps to one status code; see docs/wire.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc

from controller import paging
from controller.agent_events import AgentEvents
from controller.auth.guard import Guard
from controller.auth.peer import certified, is_tls
from controller.auth.spec_limits import check_spec
from controller.auth.visibility import may_see_all, visible, visible_event
from controller.commands import TaskRef, TaskReport
from controller.dispatch import (
    OUTBOX_LIMIT,
    AgentSession,
    AgentSessions,
    migration_request_from_proto,
    node_load_from_proto,
)
from controller.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from controller.fencing import valid_margin_s
from controller.jobs import JobOperations
from controller.report_applier import ReportApplier
from controller.rpc_loop import Abort, Aborts, Bell, abort_with
from controller.state import ControllerState
from mlsched import serde
from mlsched.model import Node
from mlsched.security.names import NODE, Identity
from mlsched.v1 import agent_pb2, agent_pb2_grpc, jobs_pb2, jobs_pb2_grpc

log = logging.getLogger(__name__)

JOIN_TOKEN_KEY = "mlsched-join-token"
DEFAULT_LOG_BYTES = 64 * 1024
LOG_FETCH_TIMEOUT_S = 10.0
REPORTS_IN_FLIGHT = 64  # per agent session, queued for the ReportApplier
FOLLOW_POLL_S = 1.0  # a follower looks at the store at least this often, rung or not

_STATUS = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    serde.WireError: grpc.StatusCode.INVALID_ARGUMENT,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,  # the state disk is full
    TimeoutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    # The store could not write (a full disk, an I/O error): nothing changed, try later.
    sqlite3.OperationalError: grpc.StatusCode.UNAVAILABLE,
}

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def maps_errors(method: F) -> F:
    """Turn domain errors raised by ``method`` into their gRPC status codes."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except tuple(_STATUS) as exc:
            code = next(c for t, c in _STATUS.items() if isinstance(exc, t))
            context.abort(code, str(exc))

    return wrapper  # type: ignore[return-value]


def _metadata(context: grpc.ServicerContext) -> dict[str, str]:
    return {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(
        self,
        ops: JobOperations,
        state: ControllerState,
        sessions: AgentSessions,
        on_change: Callable[[], None],
        bell: Bell,
        blocking: Executor,
        guard: Guard | None = None,
    ) -> None:
        self._bell = bell
        self._blocking = blocking
        self._ops = ops
        self._state = state
        self._sessions = sessions
        self._on_change = on_change
        self._guard = guard or Guard()

    @maps_errors
    def SubmitJob(
        self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.SubmitJobResponse:
        user = self._guard.person(context).name
        if not request.HasField("spec"):
            raise InvalidArgument("spec is required")
        spec = serde.spec_from_proto(request.spec)
        check_spec(spec)
        job = self._ops.submit(user, spec, request.request_id)
        self._on_change()
        return jobs_pb2.SubmitJobResponse(job=serde.job_to_proto(job, []))

    @maps_errors
    def GetJob(
        self, request: jobs_pb2.GetJobRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.GetJobResponse:
        who = self._guard.person(context)
        job, tasks = visible(who, *self._ops.get(request.job_id))
        return jobs_pb2.GetJobResponse(job=serde.job_to_proto(job, tasks))

    @maps_errors
    def ListJobs(
        self, request: jobs_pb2.ListJobsRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.ListJobsResponse:
        who = self._guard.person(context)
        states = [serde.job_state_from_proto(s) for s in request.states]
        size = paging.page_size(request.page_size)
        after = paging.decode_token(request.page_token)
        jobs = self._ops.list_page(states, request.user, after, size + 1)
        msgs, token = paging.fill(jobs, size, lambda j, t: serde.job_to_proto(*visible(who, j, t)))
        return jobs_pb2.ListJobsResponse(jobs=msgs, next_page_token=token)

    @maps_errors
    def CancelJob(
        self, request: jobs_pb2.CancelJobRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.CancelJobResponse:
        who = self._guard.person(context)
        job = self._ops.cancel(who.name, request.job_id, admin=who.is_admin)
        self._on_change()
        _, tasks = self._ops.get(job.id)
        return jobs_pb2.CancelJobResponse(job=serde.job_to_proto(job, tasks))

    @maps_errors
    def StopJob(
        self, request: jobs_pb2.StopJobRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.StopJobResponse:
        who = self._guard.person(context)
        job = self._ops.stop(who.name, request.job_id, request.reason, admin=who.is_admin)
        self._on_change()
        _, tasks = self._ops.get(job.id)
        return jobs_pb2.StopJobResponse(job=serde.job_to_proto(job, tasks))

    @maps_errors
    def ListNodes(
        self, request: jobs_pb2.ListNodesRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.ListNodesResponse:
        self._guard.person(context)
        return jobs_pb2.ListNodesResponse(
            nodes=[serde.node_to_proto(n, busy) for n, busy in self._ops.nodes()]
        )

    @maps_errors
    def GetJobLogs(
        self, request: jobs_pb2.GetJobLogsRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.GetJobLogsResponse:
        who = self._guard.person(context)
        if request.max_bytes < 0:
            raise InvalidArgument("max_bytes must not be negative")
        job, _ = self._ops.get(request.job_id)
        if not may_see_all(who, job):
            raise PermissionDenied(f"job {job.id} belongs to {job.user!r}; its logs are theirs")
        node_id, task = self._ops.log_location(request.job_id, request.rank)
        with self._guard.stream(who, context):  # it may wait LOG_FETCH_TIMEOUT_S for the node
            reply = self._sessions.fetch_logs(
                node_id,
                TaskRef(task.job_id, task.rank, task.attempt),
                request.max_bytes or DEFAULT_LOG_BYTES,
                LOG_FETCH_TIMEOUT_S,
            )
        if reply.error:
            raise NotFound(f"node {node_id}: {reply.error}")
        return jobs_pb2.GetJobLogsResponse(
            node_id=node_id, content=reply.content, truncated=reply.truncated
        )

    async def WatchEvents(
        self, request: jobs_pb2.WatchEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jobs_pb2.WatchEventsResponse]:
        """A coroutine on the server's loop, not a thread: the store is read in the blocking
        pool, a follower waits for the event bell (issue 12 #1)."""
        checks = Aborts(context)
        with contextlib.ExitStack() as slot:
            try:
                who = self._guard.person(checks)
                slot.enter_context(self._guard.stream(who, checks))
            except Abort as abort:
                await abort_with(context, abort)
            async for reply in self._events(request, who):
                yield reply

    async def _events(
        self, request: jobs_pb2.WatchEventsRequest, who: Identity
    ) -> AsyncIterator[jobs_pb2.WatchEventsResponse]:
        loop = asyncio.get_running_loop()
        after = request.after_seq
        while True:
            ticket = self._bell.ticket()  # before reading: a later event rings it
            events = await loop.run_in_executor(
                self._blocking, self._state.store.events_after, after, request.job_id
            )
            for event in events:
                seen = visible_event(who, event)
                yield jobs_pb2.WatchEventsResponse(event=serde.event_to_proto(seen))
                after = event.seq
            if events:
                continue
            if not request.follow:
                return
            await self._bell.wait(ticket, FOLLOW_POLL_S)


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(
        self,
        join_token: str,
        events: AgentEvents,
        sessions: AgentSessions,
        on_change: Callable[[], None],
        heartbeat_interval_s: float,
        applier: ReportApplier,
    ) -> None:
        self._applier = applier
        self._join_token = join_token
        self._events = events
        self._sessions = sessions
        self._on_change = on_change
        self._heartbeat_interval_s = heartbeat_interval_s

    async def AgentSession(
        self,
        request_iterator: AsyncIterator[agent_pb2.AgentSessionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[agent_pb2.AgentSessionResponse]:
        """A coroutine on the server's loop (issue 12 #1): reports are read by a task of the
        loop and applied in arrival order by the ``ReportApplier`` (heartbeats, which take no
        lock, on the loop); commands come from ``AgentSessions`` through an asyncio queue."""
        try:
            node, first = await self._admit(request_iterator, Aborts(context))
        except Abort as abort:
            await abort_with(context, abort)
        if node is None:
            return
        loop = asyncio.get_running_loop()
        session = self._sessions.open(node.id, loop)
        try:
            await self._applied(self._events.register, node, first[1], first[0].self_fence_margin_s)
        except BaseException:
            self._sessions.remove(session)
            raise
        self._on_change()
        reader = loop.create_task(self._read(request_iterator, node.id, session))
        try:
            yield agent_pb2.AgentSessionResponse(
                registered=agent_pb2.Registered(
                    node_id=node.id,
                    heartbeat_interval_s=self._heartbeat_interval_s,
                    heartbeat_timeout_s=self._events.state.settings.heartbeat_timeout_s,
                )
            )
            while True:
                yield await session.next()
        except EOFError:
            if session.overflowed:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"node {node.id} left {OUTBOX_LIMIT} commands unread; reconnect",
                )
        finally:
            reader.cancel()
            if self._sessions.remove(session):
                self._applier.submit(self._events.disconnected, (node.id,), None)

    async def _admit(
        self, requests: AsyncIterator[agent_pb2.AgentSessionRequest], checks: Aborts
    ) -> tuple[Node | None, tuple[agent_pb2.RegisterAgent, list[TaskReport]]]:
        """The registering node and its report; (None, ...) when the agent sent nothing.
        Raises ``Abort`` for a caller or a first message that is refused."""
        certified_node = self._authenticate(checks)
        first = await anext(aiter(requests), None)
        if first is None:
            return None, (agent_pb2.RegisterAgent(), [])
        if first.WhichOneof("message") != "register":
            checks.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be register")
        node, reports = _registration(first.register, checks)
        if certified_node is not None and node.id != certified_node:
            log.warning("node %s tried to register as %s: refused", certified_node, node.id)
            checks.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"this agent's certificate names node {certified_node!r}, not {node.id!r}",
            )
        return node, (first.register, reports)

    async def _applied(self, fn: Callable[..., object], *args: Any) -> None:
        """``fn(*args)`` applied by the ReportApplier, in turn with every report before it."""
        applied: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(error: BaseException | None) -> None:
            if applied.done():  # the caller was cancelled meanwhile
                return
            if error is None:
                applied.set_result(None)
            else:
                applied.set_exception(error)

        self._applier.submit(fn, args, done)
        await applied

    def _authenticate(self, context: grpc.ServicerContext) -> str | None:
        """The node id the caller's certificate names (TLS), or None once a plaintext caller
        (a controller started --insecure) showed the join token; aborts otherwise."""
        if is_tls(context):
            who = certified(context)
            if who is None or who.kind != NODE:
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED, "only a node's certificate opens a session"
                )
            return who.name
        token = _metadata(context).get(JOIN_TOKEN_KEY, "")
        if not self._join_token or not hmac.compare_digest(
            token.encode(), self._join_token.encode()
        ):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong or missing cluster join token")
        return None

    async def _read(
        self,
        requests: AsyncIterator[agent_pb2.AgentSessionRequest],
        node_id: str,
        session: AgentSession,
    ) -> None:
        """Hand the session's reports to the applier; at most REPORTS_IN_FLIGHT wait there
        (then this stops reading and gRPC's flow control holds the agent back)."""
        credit = asyncio.Semaphore(REPORTS_IN_FLIGHT)

        def done(error: BaseException | None) -> None:
            credit.release()
            if error is not None:
                log.error(
                    "agent %s sent a message the controller could not handle: %r", node_id, error
                )
                session.close()

        try:
            async for request in requests:
                if request.WhichOneof("message") == "metrics":
                    self._handle(node_id, request)  # no lock taken (AgentEvents.heartbeat)
                    continue
                await credit.acquire()
                self._applier.submit(self._handle, (node_id, request), done)
        except (grpc.RpcError, asyncio.CancelledError):
            pass  # the agent went away or the session ended; it closes below
        except Exception:
            log.exception("agent %s sent a message the controller could not handle", node_id)
        finally:
            session.close()

    def _handle(self, node_id: str, request: agent_pb2.AgentSessionRequest) -> None:
        kind = request.WhichOneof("message")
        if kind == "metrics":
            self._events.heartbeat(
                node_id,
                serde.node_metrics_from_proto(request.metrics.node),
                node_load_from_proto(request.metrics),
            )
        elif kind == "task_status":
            self._events.task_status(node_id, task_report_from_proto(request.task_status))
            self._on_change()
        elif kind == "progress":
            t = request.progress.task
            self._events.progress(
                node_id,
                t.job_id,
                t.rank,
                t.attempt,
                serde.progress_from_proto(request.progress.progress),
            )
        elif kind == "logs":
            self._sessions.logs_arrived(request.logs)
        elif kind == "migration_request":
            wanted = migration_request_from_proto(request.migration_request)
            if self._events.migration_requested(node_id, wanted):
                self._on_change()
        else:
            log.warning("agent %s sent an unexpected %s message", node_id, kind)


def task_report_from_proto(msg: agent_pb2.TaskStatus) -> TaskReport:
    return TaskReport(
        task=TaskRef(msg.task.job_id, msg.task.rank, msg.task.attempt),
        state=serde.task_state_from_proto(msg.state),
        exit_code=msg.exit_code,
        message=msg.message,
        checkpoint_step=msg.checkpoint_step,
        restored_step=msg.restored_step,
        restored=msg.restored,
        progress=(
            serde.progress_from_proto(msg.last_progress) if msg.HasField("last_progress") else None
        ),
    )


def _registration(
    msg: agent_pb2.RegisterAgent, context: grpc.ServicerContext
) -> tuple[Node, list[TaskReport]]:
    if not msg.node_id:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register.node_id is required")
    indices = [g.index for g in msg.gpus]
    if len(set(indices)) != len(indices) or any(i < 0 for i in indices):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "GPU indices must be unique and >= 0")
    if not valid_margin_s(msg.self_fence_margin_s):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "register.self_fence_margin_s must be >= 0")
    try:
        reports = [task_report_from_proto(t) for t in msg.tasks]
    except serde.WireError as exc:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    node = Node(
        id=msg.node_id,
        address=msg.address or "127.0.0.1",
        hostname=msg.hostname,
        gpus=tuple(serde.gpu_info_from_proto(g) for g in msg.gpus),
        cpu_count=msg.cpu_count,
        memory_total_bytes=msg.memory_total_bytes,
        alive=True,
        last_seen=0.0,
    )
    return node, reports
