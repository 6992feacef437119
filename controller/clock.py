"""Injected time sources: the controller never calls ``time.time()`` directly."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to (tests and the simulator)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time never goes backwards")
        with self._lock:
            self._now += seconds
