"""Self-fencing: the decision, apart from processes and the network."""

from __future__ import annotations

from nodeagent.model import TaskRef
from nodeagent.selffence import KEEPALIVE_DETECTION_S, SelfFence, self_fence_margin_s


class FakeTasks:
    def __init__(self, *refs: TaskRef) -> None:
        self.live = list(refs)
        self.suspended: list[tuple[TaskRef, float, str]] = []

    def running(self) -> list[tuple[TaskRef, int]]:
        return [(r, 1) for r in self.live]

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None:
        self.suspended.append((ref, grace_s, reason))


def test_tasks_are_suspended_once_cut_off_for_the_fencing_delay() -> None:
    ref = TaskRef("j-1", 0, 2)
    tasks = FakeTasks(ref)
    cut_off = [0.0]
    fence = SelfFence(tasks, lambda: cut_off[0], lambda: 30.0, suspend_grace_s=7.0)
    for seconds in (0.0, 10.0, 29.9):
        cut_off[0] = seconds
        fence.check()
    assert tasks.suspended == [] and not fence.fencing
    cut_off[0] = 30.0
    fence.check()
    assert fence.fencing
    assert [(r, g) for r, g, _ in tasks.suspended] == [(ref, 7.0)]
    assert "self-fencing" in tasks.suspended[0][2]
    cut_off[0] = 0.0  # registered again
    fence.check()
    assert not fence.fencing and len(tasks.suspended) == 1


def test_the_reported_margin_covers_detection_and_both_graces() -> None:
    margin = self_fence_margin_s(metrics_interval_s=5.0, suspend_grace_s=30.0, poll_s=0.2)
    assert margin == 5.0 + KEEPALIVE_DETECTION_S + 60.0 + 0.4
