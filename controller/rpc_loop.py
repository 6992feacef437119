"""The asyncio side of the controller's gRPC server (issue 12 #1): one thread runs the event loop
that serves every stream, so a stream costs a coroutine, not a thread.

``RpcLoop`` owns that thread; ``Bell`` lets the scheduler's threads wake the coroutines that wait
for new events (``ControllerState.changed``) without a thread per waiter; ``Aborts`` lets the
synchronous checks in ``controller.auth`` abort an asyncio call.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import grpc

T = TypeVar("T")


class RpcLoop:
    """An asyncio event loop on its own daemon thread; ``run`` waits for a coroutine there."""

    def __init__(self, name: str = "rpc-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        """Stop the loop (what still runs on it is dropped) and wait for its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Bell:
    """Rung from any thread, awaited on the loop: every waiter wakes at the next ring."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._rung = asyncio.Event()  # created for ``loop``; only touched on it

    def ring(self) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        rung, self._rung = self._rung, asyncio.Event()
        rung.set()

    def ticket(self) -> asyncio.Event:
        """Taken before looking (on the loop): a ring after it wakes ``wait(ticket)`` at once."""
        return self._rung

    async def wait(self, ticket: asyncio.Event, timeout_s: float) -> None:
        """Return at the first ring since ``ticket`` or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ticket.wait(), timeout_s)


class EventForwarder:
    """One thread for all followers: it waits on ``condition`` (notified on every new event)
    and rings ``bell`` whenever ``last_seq()`` moved."""

    def __init__(self, condition: threading.Condition, last_seq: Callable[[], int], bell: Bell):
        self._condition = condition
        self._last_seq = last_seq
        self._bell = bell
        self._stopped = False
        self._seen = 0
        self._thread = threading.Thread(target=self._forward, name="event-bell", daemon=True)
        self._thread.start()

    def _forward(self) -> None:
        with self._condition:
            self._seen = self._last_seq()
            while True:
                self._condition.wait_for(self._moved)
                if self._stopped:
                    return
                self._seen = self._last_seq()
                self._bell.ring()

    def _moved(self) -> bool:
        return self._stopped or self._last_seq() != self._seen

    def stop(self) -> None:
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
        self._thread.join()


class Abort(Exception):
    """Raised by ``Aborts.abort``: the asyncio handler ends the call with this code."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class Aborts:
    """An asyncio call's context as the synchronous checks expect one: ``abort`` raises
    ``Abort`` (the handler awaits the real abort); the rest is the context's own."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self._context = context

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Abort(code, details)

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._context.auth_context()

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()

    def peer(self) -> str:
        return self._context.peer()


async def abort_with(context: grpc.aio.ServicerContext, abort: Abort) -> NoReturn:
    await context.abort(abort.code, abort.details)
    raise AssertionError("unreachable: context.abort raises")  # pragma: no cover
