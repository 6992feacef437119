"""UniSched keeps per-job estimates between cycles only while what they came from is unchanged:
a queued job's estimate follows a new speed sample and its own progress."""

from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from mlsched.model import Deadline, JobClass, JobState, SpeedSample

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


def test_the_terms_to_an_slo_jobs_deadlines_are_kept_only_while_none_can_change(make_job):
    """Q_f = floor((deadline - now) / SLO lease), at least 0: the policy keeps them between
    cycles while none can have changed, and gives the same values as computing them anew."""
    from controller.policy.unisched.policy import _terms

    policy = UniSchedPolicy(UniSchedConfig(isolate_solver=False))
    job = make_job("s", deadline=3000.0)
    deadlines = (*job.spec.deadlines, Deadline(7000.0, 1.0))
    job = replace(job, spec=replace(job.spec, deadlines=deadlines))
    # 600 s terms: at 100 s, (3000 - 100) / 600 = 4.8 and (7000 - 100) / 600 = 11.5
    assert policy._deadline_terms(job, 100.0, 600.0) == [4, 11]
    # both hold until 7000 - 11 x 600 = 400 s, the second deadline's 11th term from the end
    kept = policy._deadline_terms(job, 399.0, 600.0)
    assert kept == [4, 11] and kept is policy._terms["s"][4]
    assert policy._deadline_terms(job, 401.0, 600.0) == [4, 10]  # past it: computed again
    assert policy._deadline_terms(job, 401.0, 300.0) == [8, 21]  # another lease: again
    for now in (*range(401, 8001, 37), 3000.0, 3000.5, 6999.0, 7000.0, 9000.0):
        assert policy._deadline_terms(job, float(now), 600.0) == _terms(job, float(now), 600.0)
    assert policy._deadline_terms(job, 9000.0, 600.0) == [0, 0]  # past both: 0 from then on


def test_a_milp_job_knows_its_reachable_deadlines_and_slowest_lease_counts():
    """Derived when the job is made: deadline f is reachable when it is worth something, at
    least a term away and the fastest allocation's lease count fits in its terms."""
    from controller.policy.unisched.milp import MilpJob, Option, needs_terms

    options = (Option((1,), leases=(3, 5, 9)), Option((0, 1), leases=(4, 6, 8)))
    deadlines = ((4, 10.0), (5, 0.0), (7, 2.0))  # (Q_f, V_f)
    job = MilpJob("j", 2, options, deadlines=deadlines, slo=True)
    # f=0: 3 <= 4, worth 10; f=1: worth nothing; f=2: the fastest needs 8 terms of 7
    assert job.reachable == ((0, 4, 10.0),)
    assert job.slowest == (4, 6, 9)
    assert needs_terms(job, 0, 4, horizon=2)  # 2 terms beyond the horizon < 4 the slowest needs
    assert not needs_terms(job, 0, 4, horizon=2, fixed=2)  # 2 held at 1 as well: 4 >= 4
    assert MilpJob("b", 2, options, deadlines=deadlines).reachable == ()  # best-effort: none
