"""Rate-limited relay of trainer progress to the controller (latest report wins)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from nodeagent.clock import Clock, SystemClock
from nodeagent.model import ProgressInfo, TaskRef


class ProgressRelay:
    """Forwards at most one progress report per task per ``min_interval_s``.

    A report arriving too early is held; a newer one replaces it; ``flush()`` (called
    periodically) sends held reports once their task's interval has passed.
    """

    def __init__(
        self,
        send: Callable[[TaskRef, ProgressInfo], None],
        min_interval_s: float,
        clock: Clock | None = None,
    ) -> None:
        self._send = send
        self._min_interval_s = min_interval_s
        self._clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._last_sent: dict[TaskRef, float] = {}
        self._pending: dict[TaskRef, ProgressInfo] = {}

    def offer(self, ref: TaskRef, progress: ProgressInfo) -> None:
        """A new report from a trainer."""
        with self._lock:
            now = self._clock.monotonic()
            last = self._last_sent.get(ref)
            if last is None or now - last >= self._min_interval_s:
                self._pending.pop(ref, None)
                self._last_sent[ref] = now
                self._send(ref, progress)
            else:
                self._pending[ref] = progress

    def flush(self) -> None:
        """Send held reports that are due."""
        with self._lock:
            now = self._clock.monotonic()
            for ref, progress in list(self._pending.items()):
                if now - self._last_sent.get(ref, now) >= self._min_interval_s:
                    del self._pending[ref]
                    self._last_sent[ref] = now
                    self._send(ref, progress)

    def forget(self, ref: TaskRef) -> None:
        """Drop state of a task that ended (a held report is sent first)."""
        with self._lock:
            progress = self._pending.pop(ref, None)
            self._last_sent.pop(ref, None)
            if progress is not None:
                self._send(ref, progress)
