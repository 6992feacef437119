"""UniSched keeps per-job estimates between cycles only while what they came from is unchanged:
a queued job's estimate follows a new speed sample and its own progress."""

from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from mlsched.model import JobClass, JobState, SpeedSample

# One node of 4 GPUs: a 6-GPU job cannot start and stays queued. Its consolidated allocation
# spans 2 nodes: T_iter = T_comp + 5 * T2 = 1 + 5 * 0.15 = 1.75 s (T2 the prior 1.5 * T1).
NODES = {"a": 4}


def _boundary(policy, now, queued, make_job):
    """One lease-boundary cycle: a 1-GPU job's lease on node a expires at ``now``."""
    running = make_job(
        "r",
        JobClass.BEST_EFFORT,
        gpus=1,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "a", (0,)),),
        lease_expires_at=now,
        running_since=0.0,
    )
    decision = policy.decide(ClusterSnapshot.of(now, NODES, active=[running], queued=[queued]))
    assert "q" not in {launch.job_id for launch in decision.launch}
    return decision.estimates["q"]


def test_a_queued_jobs_estimate_follows_new_samples_and_progress(make_job):
    policy = UniSchedPolicy(UniSchedConfig(isolate_solver=False))
    queued = make_job("q", JobClass.BEST_EFFORT)
    # 1000 iterations x 1.75 s = 1750 s, 6 BE leases: T_sr = 6 / 2 x 10 s (Eq. 1, §III-B3)
    first = _boundary(policy, 0.0, queued, make_job)
    assert first.remaining_s == pytest.approx(1780.0)
    again = _boundary(policy, 300.0, queued, make_job)
    assert (again.remaining_s, again.time) == (first.remaining_s, 300.0)
    # a measurement at the exact shape (6 GPUs on 2 nodes, 2.0 s) wins over Eq. 2:
    # 2000 s, 7 leases, T_sr 35 s
    measured = replace(queued, speed_samples=(*queued.speed_samples, SpeedSample(6, 2, 2.0, 1.0)))
    assert _boundary(policy, 600.0, measured, make_job).remaining_s == pytest.approx(2035.0)
    # 500 iterations done: 1000 s left, 4 leases, T_sr 20 s
    halfway = replace(measured, iteration=500)
    assert _boundary(policy, 900.0, halfway, make_job).remaining_s == pytest.approx(1020.0)
