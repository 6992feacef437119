"""Self-fencing: the decision, apart from processes and the network."""

from __future__ import annotations

from nodeagent.model import TaskRef
from nodeagent.selffence import (
    KEEPALIVE_DETECTION_S,
    SelfFence,
    ShimFence,
    self_fence_margin_s,
    shim_fence,
)


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


def test_the_margin_counts_the_save_extension() -> None:
    margin = self_fence_margin_s(
        metrics_interval_s=0.5, suspend_grace_s=1.0, poll_s=0.2, save_extension_s=1.0
    )
    assert margin == 0.5 + 15.0 + 2.0 + 1.0 + 0.4


def test_the_shim_is_gone_strictly_before_the_controller_reuses_its_gpus() -> None:
    """Defaults: T = F = 30, I = 5, G = 30, X = 30, P = 0.2. The shim heard last at a <= h + I
    and exits by a + F + 2G + X = a + 120; the controller waits until h + T + M = h + 140.4."""
    fence = shim_fence(fence_after_s=30.0, suspend_grace_s=30.0, save_extension_s=30.0)
    assert fence == ShimFence(suspend_after_s=30.0, exit_after_s=120.0)
    h, heartbeat_timeout, interval = 1000.0, 30.0, 5.0
    margin = self_fence_margin_s(interval, 30.0, 0.2, 30.0)
    latest_shim_exit = h + interval + fence.exit_after_s
    assert latest_shim_exit == 1125.0 < h + heartbeat_timeout + margin == 1140.4
