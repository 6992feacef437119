"""Periodic events (skylet style): each with its own interval; a failing one is only logged."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.clock import Clock, SystemClock

log = logging.getLogger(__name__)


@dataclass
class PeriodicEvent:
    """``action`` runs every ``interval_s`` seconds (first run one interval after start)."""

    name: str
    interval_s: float
    action: Callable[[], None]


class EventLoop:
    """Runs periodic events in one thread until stopped."""

    def __init__(self, events: list[PeriodicEvent], clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._events = {e.name: e for e in events}
        self._lock = threading.Lock()
        now = self._clock.monotonic()
        self._due = {e.name: now + e.interval_s for e in events}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def set_interval(self, name: str, interval_s: float) -> None:
        """Change an event's interval; the next run is rescheduled from now."""
        with self._lock:
            event = self._events[name]
            if event.interval_s == interval_s:
                return
            event.interval_s = interval_s
            self._due[name] = min(self._due[name], self._clock.monotonic() + interval_s)
        self._wake.set()

    def run_due(self) -> float:
        """Run every event that is due; returns seconds until the next one is."""
        now = self._clock.monotonic()
        with self._lock:
            due = [self._events[n] for n, t in self._due.items() if t <= now]
        for event in due:
            try:
                event.action()
            except Exception:
                log.exception("periodic event %s failed", event.name)
            with self._lock:
                self._due[event.name] = max(
                    self._due[event.name] + event.interval_s, self._clock.monotonic()
                )
        with self._lock:
            return max(0.0, min(self._due.values(), default=now + 1.0) - self._clock.monotonic())

    def run(self) -> None:
        """Run until ``stop()``."""
        while not self._stop.is_set():
            wait = self.run_due()
            self._wake.wait(wait)
            self._wake.clear()

    def start(self) -> None:
        """Run in a background thread."""
        self._thread = threading.Thread(target=self.run, name="agent-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop and wait for the thread (an event already running finishes first)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
