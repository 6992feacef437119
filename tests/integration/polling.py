"""Waiting on a condition that signals nothing (a log line, a file): polled, never slept on."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float) -> None:
    """Poll ``predicate`` until it holds (a state, never a duration, is what is waited for)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout} s")
        time.sleep(0.1)
