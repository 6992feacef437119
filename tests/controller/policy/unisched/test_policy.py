"""UniSched's Selector on the paper's own examples (§II-B) and its lease/profiling rules."""

from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from mlsched.model import JobClass, JobState, SpeedSample

# What a 2-GPU one-node profiling run reports (§III-B1): T_comp 1 s, T1 0.1 s; T2 is the
# stated prior 1.5 * T1 = 0.15 s until a multi-node run measures it. 1000 iterations of a 6-GPU
# job take 1500 s on one node, 1750 s across nodes; both are 3 SLO leases of 600 s. A deadline
# of 1900 s is 3 terms away: every job must start now to meet it.
PROFILE = (SpeedSample(2, 1, 1.1, 1.0),)
NODES = {"a": 8, "b": 8, "c": 8}


def launched(decision):
    return {launch.job_id: launch for launch in decision.launch}


def test_four_6gpu_slo_jobs_on_three_nodes_all_start_where_roundup_starts_three(make_job):
    snapshot = ClusterSnapshot.of(0.0, NODES, queued=[make_job(f"j{i}") for i in range(4)])
    joint = UniSchedPolicy().decide(snapshot)
    roundup = UniSchedPolicy(UniSchedConfig(placement="roundup")).decide(snapshot)
    assert set(launched(joint)) == {"j0", "j1", "j2", "j3"}
    assert len(launched(roundup)) == 3  # Chronus' strict consolidation: one 8-GPU cell each
    for decision in (joint, roundup):
        gpus = [
            (p.node_id, g)
            for launch in decision.launch
            for p in launch.placement
            for g in p.gpu_indices
        ]
        assert len(gpus) == len(set(gpus))
        assert all(
            sum(len(p.gpu_indices) for p in launch.placement) == 6 for launch in decision.launch
        )
        assert all(launch.lease_s == 600.0 for launch in decision.launch)  # SLO lease = 2 BE leases
    # every started job is predicted to finish by its deadline: 3 terms of 600 s <= 1900 s
    for estimate in joint.estimates.values():
        assert estimate.remaining_s <= 1900.0


def test_three_slo_jobs_and_one_best_effort_job_all_run(make_job):
    # with relaxed best-effort allocations; by default a best-effort job stays consolidated
    # and waits here (test_in_place.py)
    queued = [make_job(f"s{i}") for i in range(3)] + [make_job("be", JobClass.BEST_EFFORT)]
    policy = UniSchedPolicy(UniSchedConfig(be_relaxed=True))
    decision = policy.decide(ClusterSnapshot.of(0.0, NODES, queued=queued))
    assert set(launched(decision)) == {"s0", "s1", "s2", "be"}
    assert launched(decision)["be"].lease_s == 300.0  # BE lease


def test_new_job_is_profiled_on_at_most_two_gpus_then_resized(make_job):
    new = make_job("new", JobClass.BEST_EFFORT, samples=(), sr_overhead_s=None)
    decision = UniSchedPolicy().decide(ClusterSnapshot.of(0.0, NODES, queued=[new]))
    [launch] = decision.launch
    assert sum(len(p.gpu_indices) for p in launch.placement) == 2
    assert len({p.node_id for p in launch.placement}) == 1
    assert decision.estimates["new"].phase == "profiling"
    # at the lease boundary the 2-GPU profiling run is suspended to come back at 6 GPUs
    running = replace(
        new,
        state=JobState.RUNNING,
        placement=launch.placement,
        lease_expires_at=300.0,
        running_since=0.0,
        speed_samples=PROFILE,
    )
    later = UniSchedPolicy().decide(ClusterSnapshot.of(300.0, NODES, active=[running]))
    assert [s.job_id for s in later.suspend] == ["new"]


def test_profiling_a_job_larger_than_a_node_spans_two_nodes(make_job):
    big = make_job("big", JobClass.BEST_EFFORT, gpus=16, samples=())
    decision = UniSchedPolicy().decide(ClusterSnapshot.of(0.0, NODES, queued=[big]))
    [launch] = decision.launch
    assert len(launch.placement) == 2
    assert len({p.node_id for p in launch.placement}) == 2


def test_slo_job_with_slack_yields_to_best_effort_when_its_deadline_stays_safe(make_job):
    # one 8-GPU node; the SLO job needs 3 terms and has 20: it can wait one lease for a
    # best-effort job with less left to run (a higher reward now)
    slo = make_job("slo", deadline=20 * 600.0, gpus=8)
    be = make_job("be", JobClass.BEST_EFFORT, gpus=8, iteration=500)
    snapshot = ClusterSnapshot.of(0.0, {"a": 8}, queued=[slo, be])
    decision = UniSchedPolicy().decide(snapshot)
    assert set(launched(decision)) == {"be"}
    assert decision.estimates["slo"].allocation == ""


def test_expired_lease_is_renewed_or_suspended(make_job):
    placement = (TaskPlacement(0, "a", tuple(range(8))),)
    running = make_job(
        "run",
        JobClass.BEST_EFFORT,
        gpus=8,
        state=JobState.RUNNING,
        placement=placement,
        lease_expires_at=300.0,
        running_since=0.0,
    )
    # 1,730 s to run on 8 GPUs of one node (3 SLO leases), 3 terms to its deadline: it must
    # start now (a running best-effort job yields only to SLO deadlines, test_in_place.py)
    urgent = make_job("urgent", deadline=2500.0, gpus=8)
    alone = UniSchedPolicy().decide(ClusterSnapshot.of(300.0, {"a": 8}, active=[running]))
    assert [r.job_id for r in alone.renew] == ["run"]
    contested = UniSchedPolicy().decide(
        ClusterSnapshot.of(300.0, {"a": 8}, active=[running], queued=[urgent])
    )
    assert [s.job_id for s in contested.suspend] == ["run"]
    assert contested.launch == ()  # its GPUs are still being released


def test_unknown_solver_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown solver"):
        UniSchedConfig(solver="gurobi")


def test_solver_without_an_answer_falls_back_to_the_cached_solution(make_job, monkeypatch):
    import controller.policy.unisched.policy as module

    placement = (TaskPlacement(0, "a", tuple(range(8))),)
    running = make_job(
        "run",
        JobClass.BEST_EFFORT,
        gpus=8,
        state=JobState.RUNNING,
        placement=placement,
        lease_expires_at=300.0,
        running_since=0.0,
    )
    monkeypatch.setattr(module, "solve", lambda *args, **kwargs: None)
    decision = UniSchedPolicy(UniSchedConfig(isolate_solver=False)).decide(
        ClusterSnapshot.of(300.0, {"a": 8}, active=[running], queued=[make_job("q", gpus=8)])
    )
    assert [r.job_id for r in decision.renew] == ["run"]  # nothing cached: keep what runs
    assert decision.suspend == () and decision.launch == ()
