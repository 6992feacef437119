"""UniSched's leases on one grid (§III-C1, Fig. 4): BE leases end on multiples of the 300 s
BE lease, SLO leases on multiples of the 600 s SLO lease, so every expiry is a BE boundary."""

from __future__ import annotations

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.unisched import UniSchedPolicy
from mlsched.model import JobClass, JobState


def view(make_job, name: str, job_class: JobClass, **kw) -> JobView:
    """A profiled 2-GPU job, SUSPENDED unless told, with a deadline far away."""
    kw.setdefault("state", JobState.SUSPENDED)
    return make_job(name, job_class, deadline=90_000.0, gpus=2, suspensions=1, **kw)


def lease_end(make_job, now: float, job_class: JobClass) -> float:
    """Where the lease of a job the policy starts at ``now`` ends."""
    policy = UniSchedPolicy()
    policy.decide(ClusterSnapshot.of(0.0, {"a": 8}))  # past the first cycle: fills from now on
    decision = policy.decide(
        ClusterSnapshot.of(now, {"a": 8}, queued=[view(make_job, "j", job_class)])
    )
    [launch] = decision.launch
    return now + launch.lease_s


@pytest.mark.parametrize(
    ("now", "end"),
    [
        (300.0, 600.0),  # on a boundary: a whole BE lease
        (360.0, 600.0),  # between boundaries: to the next one
        (460.0, 900.0),  # less than half a lease left: to the one after
        (299.9999999999, 600.0),  # a clock a hair short of a boundary is on it
    ],
)
def test_best_effort_leases_end_on_the_be_grid(make_job, now, end):
    assert lease_end(make_job, now, JobClass.BEST_EFFORT) == pytest.approx(end)


@pytest.mark.parametrize(("now", "end"), [(0.0, 600.0), (300.0, 600.0), (460.0, 1200.0)])
def test_slo_leases_end_on_the_slo_grid(make_job, now, end):
    assert lease_end(make_job, now, JobClass.STRICT_SLO) == pytest.approx(end)


def test_renewals_at_a_boundary_run_to_the_next_boundary_of_their_grid(make_job):
    running = [
        view(
            make_job,
            name,
            job_class,
            state=JobState.RUNNING,
            placement=(TaskPlacement(0, "a", (2 * i, 2 * i + 1)),),
            lease_expires_at=600.0,
            running_since=0.0,
        )
        for i, (name, job_class) in enumerate(
            [("be", JobClass.BEST_EFFORT), ("slo", JobClass.STRICT_SLO)]
        )
    ]
    decision = UniSchedPolicy().decide(ClusterSnapshot.of(600.0, {"a": 8}, active=running))
    assert {r.job_id: 600.0 + r.lease_s for r in decision.renew} == {"be": 900.0, "slo": 1200.0}
