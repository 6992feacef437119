"""Stopping criteria and the commands received from the node agent.

`StoppingCriteria` is pure: given the last reported step and metrics it says whether (and why)
training is done. `ControlState` is the thread-safe mailbox the session thread fills with the
agent's commands and the training loop reads.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ControlState", "StoppingCriteria", "Target"]

_GOALS = ("max", "min")


@dataclass(frozen=True)
class Target:
    """Stop once `metric` reaches `value`: goal "max" means >= value, "min" means <= value."""

    metric: str
    value: float
    goal: str = "max"

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("target metric name must not be empty")
        if self.goal not in _GOALS:
            raise ValueError(f"target goal {self.goal!r} must be 'max' or 'min'")
        if math.isnan(self.value):
            raise ValueError("target value must not be NaN")

    def reached(self, observed: float) -> bool:
        """Whether `observed` meets the target (NaN never does)."""
        if math.isnan(observed):
            return False
        return observed >= self.value if self.goal == "max" else observed <= self.value


@dataclass(frozen=True)
class StoppingCriteria:
    """An iteration budget and/or a target metric (the budget then is the maximum)."""

    max_iterations: int | None = None
    target: Target | None = None

    def check(self, step: int, metrics: Mapping[str, float]) -> str | None:
        """The reason to stop after `step` with the latest `metrics`, or None to keep going."""
        if self.target is not None:
            observed = metrics.get(self.target.metric)
            if observed is not None and self.target.reached(observed):
                op = ">=" if self.target.goal == "max" else "<="
                return (
                    f"target reached: {self.target.metric}={observed:g} {op} {self.target.value:g}"
                )
        if self.max_iterations is not None and step >= self.max_iterations:
            return f"max_iterations reached: step {step} >= {self.max_iterations}"
        return None


class ControlState:
    """Commands from the agent: suspend/stop requests, batch-size changes, lease notices.

    Written by the session thread, read by the training loop; every access takes a lock and
    is O(1). `wait_for` lets a caller (typically a test) block until a condition holds.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._suspend_reason: str | None = None
        self._stop_reason: str | None = None
        self._pending_batch_size: int | None = None
        self._lease_expires_at: float | None = None
        self._lease_renewed = False

    def request_suspend(self, reason: str) -> None:
        """Record a suspend request; the first reason wins."""
        with self._cond:
            if self._suspend_reason is None:
                self._suspend_reason = reason
            self._cond.notify_all()

    def request_stop(self, reason: str) -> None:
        """Record a stop request; the first reason wins."""
        with self._cond:
            if self._stop_reason is None:
                self._stop_reason = reason
            self._cond.notify_all()

    def request_batch_size(self, batch_size: int) -> None:
        """Record a batch-size change; a newer one replaces a change not yet taken."""
        if batch_size <= 0:
            return
        with self._cond:
            self._pending_batch_size = batch_size
            self._cond.notify_all()

    def set_lease(self, expires_at: float, renewed: bool) -> None:
        """Record the latest lease notice."""
        with self._cond:
            self._lease_expires_at = expires_at
            self._lease_renewed = renewed
            self._cond.notify_all()

    def take_batch_size(self) -> int | None:
        """Return the pending batch-size change once, then None until the next change."""
        with self._cond:
            value, self._pending_batch_size = self._pending_batch_size, None
            return value

    @property
    def suspend_reason(self) -> str | None:
        with self._cond:
            return self._suspend_reason

    @property
    def stop_reason(self) -> str | None:
        with self._cond:
            return self._stop_reason

    @property
    def pending_batch_size(self) -> int | None:
        """The batch-size change not yet taken, without taking it."""
        with self._cond:
            return self._pending_batch_size

    @property
    def lease_expires_at(self) -> float | None:
        with self._cond:
            return self._lease_expires_at

    @property
    def lease_renewed(self) -> bool:
        with self._cond:
            return self._lease_renewed

    def wait_for(self, predicate: Callable[[ControlState], bool], timeout: float) -> bool:
        """Block until `predicate(self)` holds or `timeout` seconds pass; returns the outcome."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)
