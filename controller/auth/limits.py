"""Per-user limits that keep one client from starving the controller: a token bucket of
requests per second, and a cap on concurrent streams (WatchEvents) per user and in all.

Log fetches wait in the unary RPC thread pool; the stream caps keep users' long calls to a
bounded part of it (docs/wire.md, "Limits")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class UserLimits:
    requests_per_s: float = 50.0
    burst: float = 200.0
    streams_per_user: int = 8
    streams_total: int = 64


class RateLimiter:
    """A token bucket per user: ``burst`` requests at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: float, monotonic: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = burst
        self._now = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)

    def allow(self, user: str) -> bool:
        now = self._now()
        with self._lock:
            tokens, at = self._buckets.get(user, (self._burst, now))
            tokens = min(self._burst, tokens + (now - at) * self._rate)
            allowed = tokens >= 1.0
            self._buckets[user] = (tokens - 1.0 if allowed else tokens, now)
            return allowed


class StreamSlots:
    """Counts open streams per user against a per-user and a total cap."""

    def __init__(self, per_user: int, total: int) -> None:
        self._per_user = per_user
        self._total = total
        self._lock = threading.Lock()
        self._open: dict[str, int] = {}

    def take(self, user: str) -> str:
        """'' when a slot was taken; else why not (the caller must not stream)."""
        with self._lock:
            mine = self._open.get(user, 0)
            if mine >= self._per_user:
                return f"{user} already has {mine} open streams (at most {self._per_user})"
            if sum(self._open.values()) >= self._total:
                return f"the controller serves {self._total} streams already; try later"
            self._open[user] = mine + 1
            return ""

    def give_back(self, user: str) -> None:
        with self._lock:
            left = self._open.get(user, 0) - 1
            if left > 0:
                self._open[user] = left
            else:
                self._open.pop(user, None)
