"""UniSched's leases on one grid (§III-C1, Fig. 4): BE leases end on multiples of the 300 s
BE lease, SLO leases on multiples of the 600 s SLO lease, so every expiry is a BE boundary."""

from __future__ import annotations

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.unisched import UniSchedPolicy
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState, SpeedSample


def view(name: str, job_class: JobClass, **kw) -> JobView:
    deadlines = () if job_class is JobClass.BEST_EFFORT else (Deadline(90_000.0, 100.0),)
    spec = JobSpec(
        name=name,
        command=("train",),
        gpus=2,
        stopping=IterationStop(1000),
        job_class=job_class,
        deadlines=deadlines,
    )
    values = dict(
        id=name,
        user="u",
        spec=spec,
        state=JobState.SUSPENDED,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1,
        suspensions=1,
        speed_samples=(SpeedSample(2, 1, 1.1, 1.0),),
        sr_overhead_s=10.0,
    )
    values.update(kw)
    return JobView(**values)


def lease_end(now: float, job_class: JobClass) -> float:
    """Where the lease of a job the policy starts at ``now`` ends."""
    policy = UniSchedPolicy()
    policy.decide(ClusterSnapshot.of(0.0, {"a": 8}))  # past the first cycle: fills from now on
    decision = policy.decide(ClusterSnapshot.of(now, {"a": 8}, queued=[view("j", job_class)]))
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
def test_best_effort_leases_end_on_the_be_grid(now, end):
    assert lease_end(now, JobClass.BEST_EFFORT) == pytest.approx(end)


@pytest.mark.parametrize(("now", "end"), [(0.0, 600.0), (300.0, 600.0), (460.0, 1200.0)])
def test_slo_leases_end_on_the_slo_grid(now, end):
    assert lease_end(now, JobClass.STRICT_SLO) == pytest.approx(end)


def test_renewals_at_a_boundary_run_to_the_next_boundary_of_their_grid():
    running = [
        view(
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
