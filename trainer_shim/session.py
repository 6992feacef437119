"""The background gRPC client of `mlsched.v1.TrainerService/TrainerSession`.

One daemon thread owns the bidirectional stream: it (re)connects with exponential backoff,
re-reading the agent address on each attempt, and hands every command the agent sends to a
callback. gRPC pulls outgoing messages from a generator that sends one-shot notices
(`Restored`, `CheckpointSaved`) right away and the newest `Progress` at most once per
`report_interval`. The training loop only ever swaps a field under a lock, so it never waits
on the network. `close` flushes what is pending within a bounded time and joins the thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from mlsched.v1 import common_pb2, trainer_pb2, trainer_pb2_grpc

__all__ = ["AgentSession"]

log = logging.getLogger(__name__)

_MAX_QUEUED_NOTICES = 64  # notices kept while the agent is unreachable; the oldest go first
_STABLE_STREAM_S = 5.0  # a stream that lived this long resets the reconnect backoff
_HALF_CLOSE_GRACE_S = 1.0  # how long close() lets the agent end the stream after half-close


@dataclass
class _Stream:
    """Per-stream state shared by the reader loop and that stream's request generator."""

    done: bool = False


class AgentSession:
    """Ships progress and notices to the node agent and relays its commands.

    `resolve_addr` is called before every connection attempt; `on_command` runs on the
    session thread for every `TrainerSessionResponse` and must be quick.
    """

    def __init__(
        self,
        *,
        task_id: str,
        token: str,
        resolve_addr: Callable[[], str | None],
        on_command: Callable[[trainer_pb2.TrainerSessionResponse], None],
        report_interval: float = 0.5,
        backoff_initial: float = 0.05,
        backoff_max: float = 5.0,
    ) -> None:
        self._metadata = (("mlsched-task-id", task_id), ("mlsched-task-token", token))
        self._resolve_addr = resolve_addr
        self._on_command = on_command
        self._report_interval = report_interval
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._cond = threading.Condition()
        self._notices: deque[trainer_pb2.TrainerSessionRequest] = deque(maxlen=_MAX_QUEUED_NOTICES)
        self._progress: common_pb2.Progress | None = None  # newest, not yet handed to gRPC
        self._last_progress: common_pb2.Progress | None = None  # replayed after a reconnect
        self._last_progress_at = -math.inf
        self._closing = False
        self._flush_deadline = math.inf
        self._call: grpc.Call | None = None
        self._half_closed = False  # the request stream ended with everything flushed
        self._finished = False  # the session thread is done
        self._thread = threading.Thread(target=self._run, name="trainer-shim-session", daemon=True)

    def start(self) -> None:
        """Start the session thread."""
        self._thread.start()

    def send_progress(self, progress: common_pb2.Progress) -> None:
        """Make `progress` the newest report; an older one not yet sent is dropped."""
        with self._cond:
            idle = self._progress is None
            self._progress = progress
            if idle:  # otherwise the sender is already in a timed wait for the rate limit
                self._cond.notify_all()

    def send_notice(self, request: trainer_pb2.TrainerSessionRequest) -> None:
        """Queue a one-shot notice (Restored, CheckpointSaved); sent in order, unthrottled."""
        with self._cond:
            self._notices.append(request)
            self._cond.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """Flush pending messages for at most `timeout` seconds, end the stream, join.

        After the last message is handed to gRPC the shim half-closes the stream and expects
        the agent to end it; an agent that does not is cancelled after a short grace period.
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._flush_deadline = deadline
            self._cond.notify_all()
            if self._thread.ident is None:  # never started
                return
            self._cond.wait_for(lambda: self._finished or self._half_closed, timeout)
            if not self._finished:
                grace = max(0.0, min(_HALF_CLOSE_GRACE_S, deadline - time.monotonic()))
                self._cond.wait_for(lambda: self._finished, grace)
            call = None if self._finished else self._call
        if call is not None:
            call.cancel()
        self._thread.join(1.0)
        if self._thread.is_alive():
            log.warning("trainer session thread did not stop; abandoning it")

    def _pending(self) -> bool:
        return bool(self._notices) or self._progress is not None

    def _run(self) -> None:
        try:
            self._loop()
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _loop(self) -> None:
        backoff = self._backoff_initial
        failures = 0
        while True:
            with self._cond:
                if self._closing and (
                    not self._pending() or time.monotonic() >= self._flush_deadline
                ):
                    return
            addr = self._resolve_addr()
            started = time.monotonic()
            if addr is None:
                error: str | None = "no agent address (MLSCHED_AGENT_ADDR/_FILE)"
            else:
                error = self._stream_once(addr)
            if time.monotonic() - started >= _STABLE_STREAM_S:
                backoff, failures = self._backoff_initial, 0
            if error is not None:
                failures += 1
                level = logging.WARNING if failures == 1 else logging.DEBUG
                log.log(level, "trainer session to %s: %s; retrying", addr, error)
            with self._cond:
                if self._closing:
                    remaining = self._flush_deadline - time.monotonic()
                    if not self._pending() or remaining <= 0:
                        return
                    self._cond.wait(min(backoff, remaining))
                else:
                    self._cond.wait_for(lambda: self._closing, backoff)
            backoff = min(backoff * 2, self._backoff_max)

    def _stream_once(self, addr: str) -> str | None:
        """Run one stream to its end; returns an error description, None on a clean end."""
        stream = _Stream()
        channel = grpc.insecure_channel(addr)
        try:
            with self._cond:
                timeout = None
                if self._closing:
                    timeout = max(0.0, self._flush_deadline - time.monotonic())
                stub = trainer_pb2_grpc.TrainerServiceStub(channel)
                call = stub.TrainerSession(
                    self._requests(stream), metadata=self._metadata, timeout=timeout
                )
                self._call = call
            try:
                for response in call:
                    try:
                        self._on_command(response)
                    except Exception:
                        log.exception("handling agent command %s failed", response)
            except grpc.RpcError as exc:
                return f"{exc.code().name}: {exc.details()}"
            return None
        finally:
            with self._cond:
                stream.done = True
                self._call = None
                self._cond.notify_all()
            channel.close()

    def _requests(self, stream: _Stream) -> Iterator[trainer_pb2.TrainerSessionRequest]:
        """Outgoing messages of one stream; returning half-closes it (only when closing)."""
        with self._cond:
            if self._progress is None:
                self._progress = self._last_progress  # the agent may have restarted
        while True:
            with self._cond:
                message = self._next_message(stream)
            if message is None:
                return
            yield message

    def _next_message(self, stream: _Stream) -> trainer_pb2.TrainerSessionRequest | None:
        """Wait (holding the condition) for the next message; None ends the stream."""
        while not stream.done:
            if self._notices:
                return self._notices.popleft()
            wait: float | None = None
            if self._progress is not None:
                now = time.monotonic()
                wait = (
                    0.0 if self._closing else self._last_progress_at + self._report_interval - now
                )
                if wait <= 0:
                    progress, self._progress = self._progress, None
                    self._last_progress, self._last_progress_at = progress, now
                    return trainer_pb2.TrainerSessionRequest(progress=progress)
            if self._closing:
                self._half_closed = True  # everything is flushed: the agent may end the stream
                self._cond.notify_all()
                return None
            self._cond.wait(wait)
        return None
