"""ThemisPolicy (finish-time fairness) on hand-built snapshots, and randomized invariants."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.themis import ThemisPolicy, finish_time_fairness
from mlsched.model import JobState

LEASE = 100.0


def decide(snap: ClusterSnapshot) -> Decision:
    return ThemisPolicy().decide(snap)


# --- rho = T_shared / T_ideal ----------------------------------------------------------------


def test_rho_of_a_job_within_its_fair_share(waiting):
    # 1 GPU, 50 s executed, 50 s left, 100 s since submission; 2 jobs on 4 GPUs: share 2 >= 1.
    job = waiting("a", 1, remaining=50.0, attained=50.0)
    assert finish_time_fairness(job, now=100.0, contenders=2, cluster_gpus=4) == 150.0 / 100.0


def test_rho_of_a_gang_larger_than_its_fair_share(waiting):
    # 4 GPUs, 50 s executed (200 GPU-s), 50 s left; share 4 / 2 = 2 GPUs: ideal is 2x slower.
    job = waiting("w", 4, remaining=50.0, attained=200.0)
    assert finish_time_fairness(job, now=100.0, contenders=2, cluster_gpus=4) == 150.0 / 200.0


def test_rho_with_unknown_remaining_time_uses_attained_service_only(waiting):
    job = waiting("u", 1, remaining=None, attained=25.0)
    assert finish_time_fairness(job, now=100.0, contenders=2, cluster_gpus=4) == 4.0
    fresh = waiting("f", 1, remaining=None)
    assert finish_time_fairness(fresh, now=100.0, contenders=2, cluster_gpus=4) == math.inf
    known = waiting("k", 1, remaining=100.0)
    assert finish_time_fairness(known, now=100.0, contenders=2, cluster_gpus=4) == 2.0


def test_rho_stays_constant_while_running_and_grows_while_waiting(on, waiting, running):
    def runner(t: float) -> JobView:
        return running("r", on("n1", 0), remaining=1000.0 - t, attained=t, expires=t)

    def waiter(t: float) -> JobView:
        return waiting("w", 1, remaining=1000.0)

    rho = [
        (finish_time_fairness(runner(t), t, 2, 2), finish_time_fairness(waiter(t), t, 2, 2))
        for t in (100.0, 400.0)
    ]
    assert rho == [(1.0, 1.1), (1.0, 1.4)]


# --- allocation in rho order -----------------------------------------------------------------


def test_gpus_go_to_the_highest_rho_first(on, waiting, snapshot, launched):
    queue = [
        waiting("B", 1, remaining=100.0, attained=100.0),  # 200 / 200 = 1.0
        waiting("C", 1, remaining=100.0, submit_time=50.0),  # 150 / 100 = 1.5
        waiting("A", 1, remaining=100.0),  # 200 / 100 = 2.0
    ]
    decision = decide(snapshot(100.0, queued=queue, nodes={"n1": 3}))
    assert decision.launch == (
        Launch("A", on("n1", 0), LEASE),
        Launch("C", on("n1", 1), LEASE),
        Launch("B", on("n1", 2), LEASE),
    )
    assert launched(decide(snapshot(100.0, queued=queue, nodes={"n1": 1}))) == ["A"]


def test_equal_rho_is_served_fifo(waiting, snapshot, launched):
    queue = [
        waiting("late", 1, remaining=None, submit_time=5.0),
        waiting("early", 1, remaining=None, submit_time=1.0),
    ]
    assert launched(decide(snapshot(10.0, queued=queue, nodes={"n1": 1}))) == ["early"]


def test_an_expired_job_yields_to_a_queued_job_with_a_strictly_larger_rho(
    on, waiting, running, snapshot
):
    # 3 jobs on 4 GPUs: a 2-GPU gang is 1.5x slower than its share. R: 200 / 300 = 0.67.
    r = running("R", on("n1", 0, 1), remaining=100.0, attained=200.0, expires=100.0)
    k = running("K", on("n2", 0, 1), remaining=100.0, attained=20.0, expires=500.0)
    worse_off = waiting("W", 2, remaining=100.0)  # 200 / 150 = 1.33
    decision = decide(snapshot(100.0, active=[r, k], queued=[worse_off]))
    assert decision == Decision(suspend=(Suspend("R", "lease expired; yields to W"),))
    as_well_off = waiting("E", 2, remaining=100.0, submit_time=100.0)  # 100 / 150 = 0.67
    assert decide(snapshot(100.0, active=[r, k], queued=[as_well_off])) == Decision(
        renew=(Renew("R", LEASE),)
    )


def test_a_job_without_any_service_preempts_and_unknown_ones_do_not_preempt_each_other(
    on, waiting, running, snapshot
):
    r = running("R", on("n1", 0, 1), remaining=None, attained=10.0, expires=100.0)
    fresh = waiting("F", 2, remaining=None, submit_time=90.0)  # rho = inf
    decision = decide(snapshot(100.0, active=[r], queued=[fresh], nodes={"n1": 2}))
    assert decision == Decision(suspend=(Suspend("R", "lease expired; yields to F"),))
    # R has no service either (rho = inf too): equal rho never preempts
    r0 = replace(r, attained_gpu_s=0.0)
    assert decide(snapshot(100.0, active=[r0], queued=[fresh], nodes={"n1": 2})) == Decision(
        renew=(Renew("R", LEASE),)
    )


def test_unexpired_leases_are_kept_whatever_the_rho(on, waiting, running, snapshot):
    r = running("R", on("n1", 0, 1), remaining=100.0, attained=200.0, expires=100.5)
    queue = [waiting("W", 2, remaining=None)]
    assert decide(snapshot(100.0, active=[r], queued=queue, nodes={"n1": 2})) == Decision()


def test_no_victim_while_released_gpus_suffice_and_an_oversize_job_blocks_nothing(
    on, waiting, running, snapshot
):
    x = replace(
        running("X", on("n1", 0, 1), remaining=10.0, attained=10.0, expires=0.0),
        state=JobState.SUSPENDING,
    )
    y = running("Y", on("n2", 0, 1), remaining=900.0, attained=200.0, expires=100.0)
    queue = [waiting("huge", 5, remaining=None), waiting("W", 2, remaining=None)]
    assert decide(snapshot(100.0, active=[y], queued=queue, busy=[x])) == Decision(
        renew=(Renew("Y", LEASE),)
    )


def test_a_lower_rho_job_backfills_where_a_higher_one_does_not_fit(on, waiting, running, snapshot):
    k = running("K", on("n1", 0), remaining=100.0, attained=100.0, expires=500.0)
    queue = [waiting("W", 2, remaining=None), waiting("s", 1, remaining=100.0)]
    decision = decide(snapshot(100.0, active=[k], queued=queue, nodes={"n1": 2}))
    assert decision == Decision(launch=(Launch("s", on("n1", 1), LEASE),))


# --- randomized invariants -------------------------------------------------------------------

# Shared generator and checks: check_policy_properties in conftest.py.


@pytest.mark.parametrize("seed", range(300))
def test_random_snapshots_keep_the_invariants(seed: int, check_policy_properties):
    def outranks(snap: ClusterSnapshot, queued: JobView, victim: JobView) -> bool:
        contenders = len(snap.queued) + len(snap.active)
        gpus = sum(len(n.gpu_indices) for n in snap.nodes)

        def rho(job: JobView) -> float:
            return finish_time_fairness(job, snap.now, contenders, gpus)

        return rho(queued) > rho(victim)

    check_policy_properties(seed, decide, outranks)
