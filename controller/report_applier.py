"""Agents' reports applied by one thread, many per hold of the state lock (issue 12 #1/#2).

The agent sessions' coroutines (controller/servicer.py) hand each report here in the order it
arrived; one thread takes what has queued up and applies it under ``ControllerState.lock``,
releasing the lock every ``hold_s`` so the scheduling cycle and users' calls get their turn.
Before, every report was a thread of its own waiting for the lock (bench_control_plane.py: the
reader threads queued behind it), then an executor call per report. Each report keeps its own
store transaction: what it sends an agent must be on disk first (``ControllerState.atomic``).

Completion callbacks (a session's credit back, a registration's future) run on the event loop,
one ``call_soon_threadsafe`` per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger(__name__)

Done = Callable[[BaseException | None], None]
"""Called on the loop once a report was applied: None, or the exception it raised."""

Call = tuple[Callable[..., object], tuple[Any, ...], Done | None]

_STOP = object()


class ReportApplier:
    """A serial executor that batches its calls under one lock."""

    def __init__(
        self,
        lock: AbstractContextManager[Any],
        loop: asyncio.AbstractEventLoop,
        max_batch: int = 512,
        hold_s: float = 0.005,
    ) -> None:
        self._lock = lock
        self._loop = loop
        self._max_batch = max_batch
        self._hold_s = hold_s
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="reports", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., object], args: tuple[Any, ...], done: Done | None) -> None:
        """Queue ``fn(*args)`` behind everything submitted before it (from any thread)."""
        self._queue.put((fn, args, done))

    def stop(self) -> None:
        """End the thread; what is still queued is dropped (a stopping controller's agents
        report their tasks again when they register with the next one)."""
        self._stopping = True
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        while True:
            batch, stopping = self._take()
            dones = self._apply(batch)
            if dones:
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    self._loop.call_soon_threadsafe(_call_all, dones)
            if stopping:
                return

    def _take(
        self,
    ) -> tuple[list[tuple[Callable[..., object], tuple[Any, ...], Done | None]], bool]:
        """The next batch (waiting for its first item); True when stop() was asked for."""
        batch: list[Call] = []
        item = self._queue.get()
        while item is not _STOP:
            batch.append(item)
            if len(batch) >= self._max_batch:
                return batch, False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, False
        return batch, True

    def _apply(self, batch: list[Call]) -> list[tuple[Done, BaseException | None]]:
        dones: list[tuple[Done, BaseException | None]] = []
        i = 0
        while i < len(batch) and not self._stopping:
            if i:
                time.sleep(0)  # let a thread waiting for the lock take it
            started = time.perf_counter()
            with self._lock:
                while (
                    i < len(batch)
                    and time.perf_counter() - started < self._hold_s
                    and not self._stopping
                ):
                    fn, args, done = batch[i]
                    i += 1
                    error: BaseException | None = None
                    try:
                        fn(*args)
                    except Exception as exc:
                        error = exc
                        if done is None:
                            log.exception("%s%r failed", getattr(fn, "__name__", fn), args)
                    if done is not None:
                        dones.append((done, error))
        return dones


def _call_all(dones: list[tuple[Done, BaseException | None]]) -> None:
    for done, error in dones:
        try:
            done(error)
        except Exception:
            log.exception("a report's completion callback failed")
