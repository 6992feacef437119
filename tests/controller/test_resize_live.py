"""The live controller refuses resizes with a logged reason until it can carry them out."""

from __future__ import annotations

import logging

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, Renew, Resize
from mlsched.model import JobState, TaskState


class StubPolicy:
    name = "stub"

    def __init__(self, decision: Decision) -> None:
        self.decision = decision

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return self.decision


def test_a_resize_is_refused_with_a_logged_reason_and_the_job_keeps_running(make_cluster, caplog):
    c = make_cluster()
    c.add_node("n1", 2)
    job = c.submit(gpus=1)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    resize = Resize(job.id, (TaskPlacement(0, "n1", (0, 1)),), 60.0)
    c.scheduler.policy = StubPolicy(Decision(resize=(resize,), renew=(Renew(job.id, 60.0),)))
    with caplog.at_level(logging.WARNING, logger="controller.scheduler"):
        c.cycle()
    assert job.state is JobState.RUNNING
    assert [r.getMessage() for r in caplog.records] == [
        f"resize of {job.id} to 2 GPUs refused: the live controller does not resize jobs yet"
    ]
