"""Fences: a LOST task's GPUs and job are held until its old process is surely gone.

A node declared dead may still run its tasks (a partition, an agent stalled for a while). The
agent ends them itself once cut off (``nodeagent``'s self-fencing) and tells the controller, at
registration, how long past (last heartbeat + heartbeat timeout) that takes at most
(``self_fence_margin_s``).
Until then a LOST task's GPUs stay busy and its job is not offered to the policy, so no two
attempts of a job run at once and no GPU is given to a second process (issue 11 #2, #4). A fence
ends early when the agent reports the old process gone. docs/architecture.md has the arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlsched.model import Task

# What the controller assumes of an agent that did not say its margin (an older agent, or any
# agent after a controller restart until it re-registers), on top of twice the suspend grace:
# a heartbeat interval and keepalive detection.
ASSUMED_SLACK_S = 20.0

FenceKey = tuple[str, str, int, int]  # node id, job id, rank, attempt


@dataclass(frozen=True)
class Fence:
    node_id: str
    job_id: str
    rank: int
    attempt: int
    gpu_indices: tuple[int, ...]
    until: float  # the controller's clock

    @property
    def key(self) -> FenceKey:
        return (self.node_id, self.job_id, self.rank, self.attempt)


def assumed_margin_s(suspend_grace_s: float) -> float:
    """Self-fencing margin assumed of an agent that did not report one."""
    return 2 * suspend_grace_s + ASSUMED_SLACK_S


def valid_margin_s(value: float) -> bool:
    """A reported ``self_fence_margin_s``: 0 (not reported) or a finite positive number."""
    return math.isfinite(value) and value >= 0


class Fences:
    """The fences in force. In memory: a restarted controller fences again, from its start,
    every LOST task of a dead node whose job has not started a new attempt
    (``ControllerState``)."""

    def __init__(self) -> None:
        self._fences: dict[FenceKey, Fence] = {}

    def hold(self, task: Task, until: float) -> Fence:
        fence = Fence(
            task.node_id, task.job_id, task.rank, task.attempt, tuple(task.gpu_indices), until
        )
        self._fences[fence.key] = fence
        return fence

    def release(self, node_id: str, job_id: str, rank: int, attempt: int) -> Fence | None:
        return self._fences.pop((node_id, job_id, rank, attempt), None)

    def release_unreported(self, node_id: str, live: set[tuple[str, int, int]]) -> list[Fence]:
        """A re-registered agent runs only ``live`` (job id, rank, attempt): release the rest."""
        gone = [
            f
            for f in self._fences.values()
            if f.node_id == node_id and (f.job_id, f.rank, f.attempt) not in live
        ]
        for fence in gone:
            del self._fences[fence.key]
        return gone

    def expire(self, now: float) -> list[Fence]:
        over = [f for f in self._fences.values() if f.until <= now]
        for fence in over:
            del self._fences[fence.key]
        return over

    def gpus(self) -> dict[str, set[int]]:
        held: dict[str, set[int]] = {}
        for fence in self._fences.values():
            held.setdefault(fence.node_id, set()).update(fence.gpu_indices)
        return held

    def jobs(self) -> set[str]:
        return {f.job_id for f in self._fences.values()}

    def __len__(self) -> int:
        return len(self._fences)
