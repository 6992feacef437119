"""Which renewed jobs yield so that an SLO job the MILP chose can be placed (``_make_room``).

One node of 4 GPUs; best-effort jobs b (GPU 1) and c (GPU 3) keep running, so the free GPUs 0
and 2 hold no 2-GPU cell. The MILP chose SLO job s on a 2-GPU cell.
"""

from __future__ import annotations

import pytest

from controller.policy.unisched.milp import MilpJob, Option
from controller.policy.unisched.policy import _Candidate, _Choice, _make_room
from mlsched.model import JobClass, JobEstimate

LEVELS = 3  # cells of 1, 2 and 4 GPUs
PAIR = (0, 1, 0)


def candidate(view, phase: str, reward: float, choice: _Choice, slack: int | None = None):
    milp = MilpJob(view.id, choice.gpus, (Option(choice.allocation),))
    estimate = JobEstimate(phase, 0, 0.0, 0.0, reward, "", 0.0)
    return _Candidate(view, phase, [choice], milp, estimate, slack)


@pytest.fixture
def scene(on, waiting, running, snapshot):
    b = running("b", on("n1", 1), expires=300.0)
    c = running("c", on("n1", 3), expires=300.0)
    s = waiting("s", 2, job_class=JobClass.STRICT_SLO, deadlines=(3600.0,))
    kept = [
        candidate(b, "best-effort", 0.10, _Choice((1, 0, 0), 1, 1, keep=True)),
        candidate(c, "best-effort", 0.30, _Choice((1, 0, 0), 1, 1, keep=True)),
    ]
    snap = snapshot(300.0, active=[b, c], queued=[s], nodes={"n1": 4})
    return snap, kept, s


def yielding(scene, slack: int) -> list[str]:
    snap, kept, s = scene
    choice = _Choice(PAIR, 1, 2)
    wanted = [(candidate(s, "slo", 0.2, choice, slack), choice)]
    return [c.view.id for c in _make_room(snap, kept, wanted, [], LEVELS)]


def test_an_urgent_slo_job_makes_the_lowest_reward_renewed_job_yield(scene):
    # b (reward 0.10) yields: GPUs 0 and 1 then form the 2-GPU cell s needs.
    assert yielding(scene, slack=0) == ["b"]
    assert yielding(scene, slack=1) == ["b"]


def test_an_slo_job_with_slack_waits_for_its_cell_instead(scene):
    # Two spare terms: starting s a term early is not worth b's suspension and resume.
    assert yielding(scene, slack=2) == []
