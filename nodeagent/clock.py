"""Time source used wherever the agent has timing logic, so tests can substitute a fake one."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock and monotonic time, in seconds."""

    def time(self) -> float:
        """Unix time (seconds since the epoch); may jump when the system clock is adjusted."""
        ...

    def monotonic(self) -> float:
        """A clock that never goes backwards; only differences are meaningful."""
        ...


class SystemClock:
    """The real clock (``time.time`` and ``time.monotonic``)."""

    def time(self) -> float:
        """Return the current unix time."""
        return time.time()

    def monotonic(self) -> float:
        """Return the current monotonic time."""
        return time.monotonic()
