"""The AgentSession stream to the controller: registration, reports, commands, reconnection."""

from __future__ import annotations

import logging
import random
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

import grpc

from mlsched.client import KEEPALIVE_OPTIONS, controller_addresses, leader_hint, next_address
from mlsched.v1 import agent_pb2, agent_pb2_grpc
from nodeagent import convert
from nodeagent.clock import Clock, SystemClock
from nodeagent.model import (
    LaunchRequest,
    LogsResult,
    NodeMetrics,
    ProgressInfo,
    Registration,
    RegroupRequest,
    TaskMetrics,
    TaskRef,
    TaskStatusInfo,
    TrainerCommand,
)
from nodeagent.overload import MigrationWish, NodeLoadReport

log = logging.getLogger(__name__)

JOIN_TOKEN_KEY = "mlsched-join-token"
MAX_PENDING = 10_000
FATAL_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# Reconnect back-off: a wait is the current delay times a factor drawn in [1 - JITTER,
# 1 + JITTER]; the delay doubles up to a cap of at most HEARTBEAT_TIMEOUT_SHARE of the
# controller's heartbeat timeout (learnt at registration). So the longest wait is 40 % of the
# timeout, and an agent whose controller restarted re-registers with more than half of the
# timeout to spare (a restarted controller gives every known node one timeout).
JITTER = 0.2
HEARTBEAT_TIMEOUT_SHARE = 1 / 3


class ControllerHandler(Protocol):
    """What the link asks of the agent."""

    def registration(self) -> Registration:
        """The RegisterAgent content, built at (re)connection time."""
        ...

    def on_registered(self, node_id: str, heartbeat_interval_s: float) -> None:
        """The controller accepted the registration."""
        ...

    def launch(self, request: LaunchRequest) -> None:
        """LaunchTask."""
        ...

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None:
        """SuspendTask."""
        ...

    def kill(self, ref: TaskRef, reason: str) -> None:
        """KillTask."""
        ...

    def trainer_command(self, ref: TaskRef, command: TrainerCommand) -> None:
        """A command to relay to the task's trainer (also LeaseUpdate as LeaseNotice)."""
        ...

    def fetch_logs(self, ref: TaskRef, max_bytes: int) -> LogsResult:
        """FetchLogs."""
        ...

    def regroup(self, request: RegroupRequest) -> None:
        """RegroupTask: change a running attempt's process count in place."""
        ...

    def ack(self, ref: TaskRef) -> None:
        """TaskStatusAck."""
        ...

    def priority(self, ref: TaskRef, priority: float) -> None:
        """TaskPriority: the task's priority in the policy's order (docs/overload.md)."""
        ...


class Outbox:
    """The request iterator of one session: a queue that can be closed.

    It holds back everything until ``start(first)`` puts the first message (RegisterAgent) in
    front, so messages queued meanwhile follow it. Iteration ends when closed.
    """

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        self._cond = threading.Condition()
        self._queue: deque[agent_pb2.AgentSessionRequest] = deque()
        self._held = True
        self._closed = False
        self._max_pending = max_pending

    def put(self, message: agent_pb2.AgentSessionRequest, *, droppable: bool = False) -> bool:
        """Queue a message; ``droppable`` ones are dropped when the queue is full."""
        with self._cond:
            if self._closed or (droppable and len(self._queue) >= self._max_pending):
                return False
            self._queue.append(message)
            self._cond.notify()
            return True

    def start(self, first: agent_pb2.AgentSessionRequest) -> None:
        """Put ``first`` in front and release the queue."""
        with self._cond:
            self._queue.appendleft(first)
            self._held = False
            self._cond.notify()

    def close(self) -> None:
        """End the iteration (the client half-closes the stream)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __iter__(self) -> Outbox:
        return self

    def __next__(self) -> agent_pb2.AgentSessionRequest:
        with self._cond:
            while not self._closed and (self._held or not self._queue):
                self._cond.wait()
            if self._closed:
                raise StopIteration
            return self._queue.popleft()


class Backoff:
    """Capped exponential back-off with jitter, kept below the controller's heartbeat timeout.

    The cap is ``max_s``, lowered to ``HEARTBEAT_TIMEOUT_SHARE`` of the heartbeat timeout once
    the controller has said it (``heartbeat_timeout_s``, from ``Registered``).
    """

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng or random.Random()
        self._timeout_s = 0.0
        self._delay_s = initial_s

    def set_heartbeat_timeout(self, timeout_s: float) -> None:
        """The controller's heartbeat timeout; 0 (an older controller) leaves ``max_s``."""
        self._timeout_s = timeout_s if timeout_s > 0 else 0.0

    @property
    def cap_s(self) -> float:
        if self._timeout_s <= 0:
            return self._max_s
        return min(self._max_s, self._timeout_s * HEARTBEAT_TIMEOUT_SHARE)

    def reset(self) -> None:
        self._delay_s = self._initial_s

    def next_wait(self) -> float:
        """The wait before the next attempt; the delay after it doubles (up to the cap)."""
        delay = min(self._delay_s, self.cap_s)
        self._delay_s = min(delay * 2, self.cap_s)
        return delay * self._rng.uniform(1 - JITTER, 1 + JITTER)


class ControllerLink:
    """Keeps one AgentSession open, reconnecting with capped exponential backoff.

    Messages sent while disconnected are dropped: every (re)registration carries the current
    status of every task, including ended ones not acknowledged yet. ``address`` may list the
    controllers of an HA pair (``host1:port,host2:port``): a lost session goes on at the next
    one, or at the leader a standby names (it refuses the session UNAVAILABLE meanwhile). A
    session refused with UNAUTHENTICATED or PERMISSION_DENIED (wrong join token) is fatal:
    ``on_fatal`` is called and the link stops.
    """

    def __init__(
        self,
        address: str,
        join_token: str,
        handler: ControllerHandler,
        on_fatal: Callable[[str], None],
        *,
        reconnect_initial_s: float = 0.5,
        reconnect_max_s: float = 10.0,
        clock: Clock | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self._addresses = controller_addresses(address)
        self._index = 0
        self._credentials = credentials  # None: plaintext (a controller started --insecure)
        self._join_token = join_token
        self._handler = handler
        self._on_fatal = on_fatal
        self._initial_s = reconnect_initial_s
        self.backoff = Backoff(reconnect_initial_s, reconnect_max_s)
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._outbox: Outbox | None = None
        self._call: grpc.Future | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # Monotonic time since when no registered session: None while registered.
        self._cut_off_since: float | None = self._clock.monotonic()
        self._heartbeat_timeout_s = 0.0

    # ------------------------------------------------------------- sending

    @property
    def connected(self) -> bool:
        """True while a session is open (or opening)."""
        with self._lock:
            return self._outbox is not None

    def send(self, message: agent_pb2.AgentSessionRequest, *, droppable: bool = False) -> bool:
        """Queue a message on the current session; False when there is none."""
        with self._lock:
            outbox = self._outbox
            return outbox.put(message, droppable=droppable) if outbox is not None else False

    def send_status(self, status: TaskStatusInfo) -> None:
        """Report a task status."""
        self.send(convert.status_request(status))

    def send_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        """Relay a progress report."""
        self.send(convert.progress_request(ref, progress), droppable=True)

    def send_metrics(
        self, node: NodeMetrics, tasks: list[TaskMetrics], load: NodeLoadReport | None = None
    ) -> bool:
        """Send a MetricsReport (the heartbeat), with the node's load when measured."""
        return self.send(convert.metrics_request(node, tasks, load), droppable=True)

    def send_migration_request(self, wish: MigrationWish) -> bool:
        """Ask the controller to move a task off this overloaded node; False when not sent."""
        return self.send(convert.migration_request(wish))

    def cut_off_s(self) -> float:
        """How long this agent has been without a registered session (0 while it has one)."""
        with self._lock:
            since = self._cut_off_since
        return 0.0 if since is None else max(0.0, self._clock.monotonic() - since)

    @property
    def heartbeat_timeout_s(self) -> float:
        """The controller's heartbeat timeout, once registered (0 before)."""
        return self._heartbeat_timeout_s

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect in a background thread."""
        self._thread = threading.Thread(target=self._run, name="controller-link", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the session and stop reconnecting."""
        self._stopping.set()
        with self._lock:
            outbox, call = self._outbox, self._call
        if outbox is not None:
            outbox.close()
        if call is not None:
            call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.is_set():
            started = self._clock.monotonic()
            try:
                healthy = self._session()
            except _FatalError as exc:
                log.error("%s", exc)
                self._on_fatal(str(exc))
                return
            except Exception:
                log.exception("controller session crashed")
                healthy = False
            if self._stopping.is_set():
                return
            if healthy or self._clock.monotonic() - started >= self.backoff.cap_s:
                self.backoff.reset()
            wait = self.backoff.next_wait()
            log.info("reconnecting to the controller at %s in %.1fs", self._address, wait)
            self._stopping.wait(wait)

    @property
    def _address(self) -> str:
        return self._addresses[self._index]

    def _session(self) -> bool:
        """One session; returns True when the controller answered at all, or when a standby
        named the leader to go to next."""
        options = [
            *KEEPALIVE_OPTIONS,
            ("grpc.initial_reconnect_backoff_ms", int(self._initial_s * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(self._initial_s * 1000)),
            ("grpc.max_reconnect_backoff_ms", max(1, int(self.backoff.cap_s * 1000))),
        ]
        address = self._address
        if self._credentials is not None:
            channel = grpc.secure_channel(address, self._credentials, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        outbox = Outbox()
        with self._lock:
            self._outbox = outbox
        healthy = False
        try:
            outbox.start(convert.register_request(self._handler.registration()))
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            call = stub.AgentSession(outbox, metadata=((JOIN_TOKEN_KEY, self._join_token),))
            with self._lock:
                self._call = call
            if self._stopping.is_set():
                call.cancel()
            for response in call:
                healthy = True
                self._dispatch(response)
            log.warning("the controller closed the session")
            self._index = (self._index + 1) % len(self._addresses)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            self._index = next_address(self._addresses, self._index, exc)
            hint = leader_hint(exc)
            healthy = healthy or bool(hint and hint in self._addresses)
            if code in FATAL_CODES:
                raise _FatalError(
                    f"the controller at {address} refused this agent "
                    f"({code.name}: {details}); check the join token "
                    "(--join-token, --join-token-file or MLSCHED_JOIN_TOKEN)"
                ) from None
            if not self._stopping.is_set():
                name = code.name if code is not None else "error"
                log.warning("controller session at %s lost: %s: %s", address, name, details)
        finally:
            with self._lock:
                self._outbox = None
                self._call = None
                if self._cut_off_since is None:
                    self._cut_off_since = self._clock.monotonic()
            outbox.close()
            channel.close()
        return healthy

    # ------------------------------------------------------------ commands

    def _dispatch(self, response: agent_pb2.AgentSessionResponse) -> None:
        kind = response.WhichOneof("message")
        try:
            self._handle(kind, response)
        except Exception:
            log.exception("cannot handle %s from the controller", kind)

    def _handle(self, kind: str | None, response: agent_pb2.AgentSessionResponse) -> None:
        handler = self._handler
        if kind == "registered":
            reg = response.registered
            log.info("registered with the controller at %s as %s", self._address, reg.node_id)
            self.backoff.set_heartbeat_timeout(reg.heartbeat_timeout_s)
            with self._lock:
                self._cut_off_since = None
                self._heartbeat_timeout_s = max(0.0, reg.heartbeat_timeout_s)
            handler.on_registered(reg.node_id, reg.heartbeat_interval_s)
        elif kind == "launch":
            handler.launch(convert.launch_from_pb(response.launch))
        elif kind == "suspend":
            msg = response.suspend
            handler.suspend(convert.task_ref_from_pb(msg.task), msg.grace_s, msg.reason)
        elif kind == "kill":
            handler.kill(convert.task_ref_from_pb(response.kill.task), response.kill.reason)
        elif kind == "lease":
            ref = convert.task_ref_from_pb(response.lease.task)
            handler.trainer_command(ref, convert.lease_from_pb(response.lease))
        elif kind == "regroup":
            handler.regroup(convert.regroup_from_pb(response.regroup))
        elif kind == "trainer_command":
            command = convert.trainer_command_from_pb(response.trainer_command)
            if command is not None:
                handler.trainer_command(
                    convert.task_ref_from_pb(response.trainer_command.task), command
                )
        elif kind == "fetch_logs":
            msg = response.fetch_logs
            result = handler.fetch_logs(convert.task_ref_from_pb(msg.task), msg.max_bytes)
            self.send(convert.logs_request(msg.request_id, result))
        elif kind == "ack":
            handler.ack(convert.task_ref_from_pb(response.ack.task))
        elif kind == "priority":
            handler.priority(*convert.priority_from_pb(response.priority))
        else:
            log.warning("ignoring an unknown message from the controller (%s)", kind)


class _FatalError(Exception):
    """The controller refused this agent; retrying cannot help."""
