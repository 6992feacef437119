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
from typing import Protocol

from mlsched.client import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from nodeagent.model import TaskRef

log = logging.getLogger(__name__)

# A broken connection is noticed at most this long after its last answered ping.
KEEPALIVE_DETECTION_S = (KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS) / 1000


class FencedTasks(Protocol):
    def running(self) -> list[tuple[TaskRef, int]]: ...

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None: ...


def self_fence_margin_s(metrics_interval_s: float, suspend_grace_s: float, poll_s: float) -> float:
    """Seconds past (the last heartbeat the controller received + its heartbeat timeout) by
    which every task is gone.

    The session is seen broken at most a heartbeat interval plus keepalive detection after that
    heartbeat; at most the heartbeat timeout later (the agent's fencing delay never exceeds
    it) the tasks are told to suspend, and the last SIGKILL comes twice the grace after that
    (checked every ``poll_s``)."""
    return metrics_interval_s + KEEPALIVE_DETECTION_S + 2 * suspend_grace_s + 2 * poll_s


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
