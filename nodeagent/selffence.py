"""Self-fencing: an agent cut off from the controller ends its tasks itself.

The controller declares a node dead after its heartbeat timeout and may then start the node's
jobs elsewhere. So that no two attempts of a job run at once, an agent whose session has been
gone for that timeout suspends every task (SuspendNow, SIGTERM after the grace, SIGKILL after
twice the grace), and tells the controller at registration how long, at most, that takes
past its last heartbeat plus the heartbeat timeout (``self_fence_margin_s``); the controller
holds a dead node's GPUs and jobs that long (``controller.fencing``). docs/architecture.md
has the arithmetic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from mlsched.client import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from nodeagent.model import TaskRef

log = logging.getLogger(__name__)

# A broken connection is noticed at most this long after its last answered ping.
KEEPALIVE_DETECTION_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000


class FencedTasks(Protocol):
    def running(self) -> list[tuple[TaskRef, int]]: ...

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None: ...


def self_fence_margin_s(
    metrics_interval_s: float, suspend_grace_s: float, poll_s: float, save_extension_s: float = 0.0
) -> float:
    """Seconds past (the last heartbeat the controller received + its heartbeat timeout) by
    which every task is gone.

    The session is seen broken at most a heartbeat interval plus keepalive detection after that
    heartbeat; at most the heartbeat timeout later (the agent's fencing delay never exceeds
    it) the tasks are told to suspend, and the last SIGKILL comes twice the grace, plus at most
    the save extension while a checkpoint save is in progress, after that (checked every
    ``poll_s``)."""
    return (
        metrics_interval_s
        + KEEPALIVE_DETECTION_S
        + 2 * suspend_grace_s
        + save_extension_s
        + 2 * poll_s
    )


@dataclass(frozen=True)
class ShimFence:
    """What a task's trainer shim does when it hears nothing from its agent (an agent stopped
    by SIGSTOP or a stalled VM cannot fence its tasks): after ``suspend_after_s`` of silence it
    checkpoints and exits as if suspended; after ``exit_after_s`` it exits at once."""

    suspend_after_s: float
    exit_after_s: float


def shim_fence(fence_after_s: float, suspend_grace_s: float, save_extension_s: float) -> ShimFence:
    """The shim's deadlines: the agent's own self-fencing spans, F then F + 2G + X.

    With a the last message the shim heard (the agent sends one every second) and h the last
    heartbeat the controller received: the agent stopped before its next heartbeat, so
    a <= h + I; the shim is gone by a + F + 2G + X <= h + T + (I + 2G + X) (F <= T), strictly
    before the controller reuses the GPUs at h + T + M, M = I + K + 2G + X + 2P
    (``self_fence_margin_s``): K + 2P of slack for the shim's own polling and exit."""
    suspend_after = max(fence_after_s, 0.0)
    return ShimFence(suspend_after, suspend_after + 2 * suspend_grace_s + save_extension_s)


class SelfFence:
    """Checked periodically: suspends every task while cut off for ``fence_after_s()`` or more.

    ``cut_off_s()`` is how long the agent has been without a registered session (0 while it has
    one). Suspending is idempotent, so every check repeats it for tasks still running.
    """

    def __init__(
        self,
        tasks: FencedTasks,
        cut_off_s: Callable[[], float],
        fence_after_s: Callable[[], float],
        suspend_grace_s: float,
    ) -> None:
        self._tasks = tasks
        self._cut_off_s = cut_off_s
        self._fence_after_s = fence_after_s
        self._grace_s = suspend_grace_s
        self.fencing = False

    def check(self) -> None:
        cut_off, after = self._cut_off_s(), self._fence_after_s()
        if cut_off < after:
            self.fencing = False
            return
        running = self._tasks.running()
        if running and not self.fencing:
            log.warning(
                "cut off from the controller for %.1f s (self-fencing after %.1f s): suspending"
                " %d task(s) so that no other attempt runs beside them",
                cut_off,
                after,
                len(running),
            )
        self.fencing = True
        reason = f"self-fencing: cut off from the controller for {cut_off:.1f} s"
        for ref, _pid in running:
            self._tasks.suspend(ref, self._grace_s, reason)
