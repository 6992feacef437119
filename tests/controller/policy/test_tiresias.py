"""TiresiasPolicy (discretized 2D-LAS) on hand-built snapshots, and randomized invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.tiresias import TiresiasPolicy
from mlsched.model import JobState

LEASE = 100.0
# A queued job that has attained service ran before: it is a suspended one.
SUSPENDED = JobState.SUSPENDED


def decide(snap: ClusterSnapshot, **settings: object) -> Decision:
    return TiresiasPolicy(**settings).decide(snap)  # type: ignore[arg-type]


# --- queues ----------------------------------------------------------------------------------


def test_defaults_two_queues_3200_gpu_seconds_promote_knob_8():
    policy = TiresiasPolicy()
    assert policy.thresholds_gpu_s == (3200.0,)
    assert policy.promote_knob == 8.0
    assert policy.name == "tiresias"


def test_queue_of_demotes_when_attained_service_reaches_a_threshold():
    policy = TiresiasPolicy()
    assert [policy.queue_of(s) for s in (0.0, 3199.9, 3200.0, 1e9)] == [0, 0, 1, 1]
    three = TiresiasPolicy(thresholds_gpu_s=(100.0, 1000.0))
    assert [three.queue_of(s) for s in (50.0, 100.0, 999.0, 1000.0)] == [0, 1, 1, 2]


def test_attained_service_is_gpus_times_time(waiting):
    policy = TiresiasPolicy()
    # 2 GPUs for 1,600 s reach the threshold; 1 GPU for 3,199 s does not.
    wide = waiting("wide", 2, attained=3200.0, queued_since=9.0, state=SUSPENDED)
    thin = waiting("thin", 1, attained=3199.0, queued_since=9.0, state=SUSPENDED)
    assert policy.key(wide, now=10.0)[0] == 1
    assert policy.key(thin, now=10.0)[0] == 0


def test_higher_queue_first_and_fifo_by_submission_within_a_queue(on, waiting, snapshot):
    # Within Q0 the order is FIFO, not least-attained-first: b (3,000 GPU-s) goes before a (0).
    queue = [
        waiting("c", 1, attained=10.0, queued_since=5.0, submit_time=3.0, state=SUSPENDED),
        waiting("old", 1, attained=5000.0, queued_since=5.0, submit_time=0.0, state=SUSPENDED),
        waiting("a", 1, attained=0.0, queued_since=2.0),
        waiting("b", 1, attained=3000.0, queued_since=5.0, submit_time=1.0, state=SUSPENDED),
    ]
    decision = decide(snapshot(10.0, queued=queue, nodes={"n1": 3}))
    assert decision.launch == (
        Launch("b", on("n1", 0), LEASE),
        Launch("a", on("n1", 1), LEASE),
        Launch("c", on("n1", 2), LEASE),
    )


def test_a_lower_queue_job_backfills_behind_a_top_queue_job_that_does_not_fit(
    on, waiting, running, snapshot
):
    b = running("B", on("n2", 0, 1), attained=10.0, expires=99.0)
    queue = [
        waiting("big", 4),
        waiting("old", 1, attained=9000.0, queued_since=9.0, state=SUSPENDED),
    ]
    decision = decide(snapshot(10.0, active=[b], queued=queue))
    assert decision == Decision(launch=(Launch("old", on("n1", 0), LEASE),))


# --- preemption across queues only -----------------------------------------------------------


def test_an_expired_demoted_job_yields_to_a_top_queue_job(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), attained=4000.0, expires=100.0)  # Q1
    b = running("B", on("n2", 0, 1), attained=100.0, expires=100.0)  # Q0
    decision = decide(snapshot(100.0, active=[a, b], queued=[waiting("N", 2, queued_since=50.0)]))
    assert decision == Decision(
        renew=(Renew("B", LEASE),), suspend=(Suspend("A", "lease expired; yields to N"),)
    )


def test_no_preemption_within_a_queue_even_with_more_attained_service(
    on, waiting, running, snapshot
):
    a = running("A", on("n1", 0, 1), attained=3100.0, expires=100.0)  # still Q0
    b = running("B", on("n2", 0, 1), attained=3199.0, expires=100.0)  # still Q0
    decision = decide(snapshot(100.0, active=[a, b], queued=[waiting("N", 2, queued_since=50.0)]))
    assert decision == Decision(renew=(Renew("A", LEASE), Renew("B", LEASE)))


def test_a_demoted_job_whose_lease_has_not_expired_keeps_running(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), attained=9000.0, expires=100.5)
    b = running("B", on("n2", 0, 1), attained=9000.0, expires=200.0)
    assert decide(snapshot(100.0, active=[a, b], queued=[waiting("N", 1, queued_since=9.0)])) == (
        Decision()
    )


# --- starvation avoidance --------------------------------------------------------------------


def test_promotion_when_waiting_reaches_the_knob_times_executed_time(waiting):
    policy = TiresiasPolicy()
    # 4,000 GPU-s on 1 GPU: executed 4,000 s; queued since 100 -> promoted at 100 + 8 x 4,000.
    job = waiting("S", 1, attained=4000.0, queued_since=100.0, submit_time=7.0, state=SUSPENDED)
    assert policy.key(job, now=32_099.9) == (1, 7.0, "S")
    assert policy.key(job, now=32_100.0) == (0, 32_100.0, "S")
    assert TiresiasPolicy(promote_knob=None).key(job, now=1e9) == (1, 7.0, "S")
    # 2 GPUs: executed time is 2,000 s, so the wait needed is 16,000 s
    wide = waiting("W", 2, attained=4000.0, queued_since=0.0, state=SUSPENDED)
    assert policy.key(wide, now=16_000.0) == (0, 16_000.0, "W")


def test_a_promoted_job_preempts_an_expired_demoted_job(on, waiting, running, snapshot):
    a = running("A", on("n1", 0), attained=10_000.0, expires=40_000.0)
    s = waiting("S", 1, attained=4000.0, queued_since=0.0, state=SUSPENDED)
    snap = snapshot(40_000.0, active=[a], queued=[s], nodes={"n1": 1})
    assert decide(snap) == Decision(suspend=(Suspend("A", "lease expired; yields to S"),))
    assert decide(snap, promote_knob=None) == Decision(renew=(Renew("A", LEASE),))


def test_a_promoted_job_takes_its_fifo_place_in_the_top_queue(waiting, snapshot, launched):
    # S was promoted at 32,000: after a job submitted at 31,000, before one submitted at 35,000.
    s = waiting("S", 1, attained=4000.0, queued_since=0.0, state=SUSPENDED)
    earlier = waiting("N1", 1, queued_since=31_000.0)
    later = waiting("N2", 1, queued_since=35_000.0)
    one_gpu = {"n1": 1}
    assert launched(decide(snapshot(40_000.0, queued=[s, earlier], nodes=one_gpu))) == ["N1"]
    assert launched(decide(snapshot(40_000.0, queued=[s, later], nodes=one_gpu))) == ["S"]


def test_a_promoted_attempt_counts_only_its_own_service(on, waiting, running, snapshot):
    # P waited 40,000 s after 4,000 s of service: promoted, so this attempt starts a new count
    # (100 GPU-s: Q0) and the new Q0 job N cannot preempt it. Q waited only 1,000 s: it is
    # still a Q1 job and yields.
    p = running("P", on("n1", 0), attained=4100.0, expires=40_100.0, since=40_000.0)
    q = running(
        "Q",
        on("n2", 0),
        attained=4100.0,
        expires=40_100.0,
        since=40_000.0,
        queued_since=39_000.0,
        submit_time=0.0,
    )
    queue = [waiting("N", 1, queued_since=40_050.0)]
    decision = decide(snapshot(40_100.0, active=[p, q], queued=queue, nodes={"n1": 1, "n2": 1}))
    assert decision == Decision(
        renew=(Renew("P", LEASE),), suspend=(Suspend("Q", "lease expired; yields to N"),)
    )
    policy = TiresiasPolicy()
    assert policy.key(p, now=40_100.0) == (0, 32_000.0, "P")
    # once the promoted attempt itself reaches the threshold, P is demoted again
    p_later = replace(p, attained_gpu_s=4000.0 + 3200.0)
    assert policy.key(p_later, now=43_200.0)[0] == 1


def test_no_victim_while_released_gpus_suffice_and_an_oversize_job_blocks_nothing(
    on, waiting, running, snapshot
):
    # X is checkpointing on n1; Y (Q1) expires on n2. "huge" can never run (5 GPUs on 4) and
    # W fits once X is gone: nobody else yields, Y is renewed.
    x = replace(
        running("X", on("n1", 0, 1), attained=9000.0, expires=0.0), state=JobState.SUSPENDING
    )
    y = running("Y", on("n2", 0, 1), attained=9000.0, expires=100.0)
    queue = [waiting("huge", 5, queued_since=1.0), waiting("W", 2, queued_since=2.0)]
    assert decide(snapshot(100.0, active=[y], queued=queue, busy=[x])) == Decision(
        renew=(Renew("Y", LEASE),)
    )


# --- randomized invariants -------------------------------------------------------------------

# Shared generator and checks: check_policy_properties in conftest.py.


@pytest.mark.parametrize("seed", range(300))
def test_random_snapshots_keep_the_invariants(seed: int, check_policy_properties):
    policy = TiresiasPolicy()

    def outranks(snap: ClusterSnapshot, queued: JobView, victim: JobView) -> bool:
        return policy.key(queued, snap.now)[0] < policy.key(victim, snap.now)[0]

    check_policy_properties(seed, decide, outranks)
