"""SrtfPolicy on hand-built snapshots, plus the preemption/backfill rules shared by the
priority policies (controller.policy.common), and a randomized invariant check."""

from __future__ import annotations

import pytest

from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.srtf import SrtfPolicy, srtf_key
from mlsched.model import JobState

LEASE = 100.0


def decide(snap: ClusterSnapshot) -> Decision:
    return SrtfPolicy().decide(snap)


# --- order -----------------------------------------------------------------------------------


def test_key_puts_known_remaining_times_first_then_fifo(waiting):
    assert srtf_key(waiting("a", 1, remaining=30.0, queued_since=5.0)) == (0, 30.0, 5.0, 5.0, "a")
    assert srtf_key(waiting("b", 1, remaining=None, queued_since=5.0)) == (1, 0.0, 5.0, 5.0, "b")


def test_shortest_remaining_first_and_unknown_last_in_fifo_order(on, waiting, snapshot):
    queue = [
        waiting("u-late", 1, remaining=None, queued_since=9.0),
        waiting("r50", 1, remaining=50.0),
        waiting("u-early", 1, remaining=None, queued_since=1.0),
        waiting("r10", 1, remaining=10.0, queued_since=8.0),
        waiting("r30", 1, remaining=30.0),
    ]
    decision = decide(snapshot(10.0, queued=queue, nodes={"n1": 5}))
    assert decision.launch == (
        Launch("r10", on("n1", 0), LEASE),
        Launch("r30", on("n1", 1), LEASE),
        Launch("r50", on("n1", 2), LEASE),
        Launch("u-early", on("n1", 3), LEASE),
        Launch("u-late", on("n1", 4), LEASE),
    )


def test_only_the_shortest_jobs_get_the_few_free_gpus(on, waiting, snapshot):
    queue = [
        waiting("long", 1, remaining=500.0),
        waiting("unknown", 1, remaining=None),
        waiting("short", 1, remaining=5.0),
    ]
    decision = decide(snapshot(0.0, queued=queue, nodes={"n1": 1}))
    assert decision == Decision(launch=(Launch("short", on("n1", 0), LEASE),))


def test_equal_remaining_times_are_served_in_fifo_order(waiting, snapshot, launched):
    queue = [
        waiting("b", 1, remaining=20.0, queued_since=3.0),
        waiting("a", 1, remaining=20.0, queued_since=2.0),
    ]
    assert launched(decide(snapshot(5.0, queued=queue, nodes={"n1": 1}))) == ["a"]


def test_policy_lease_and_default_lease(on, waiting, running, snapshot):
    queue = [waiting("a", 1, remaining=1.0)]
    active = [running("r", on("n1", 0), remaining=1.0, expires=0.0)]
    snap = snapshot(0.0, active=active, queued=queue)
    # best fit: n1 has one free GPU left, n2 two
    assert SrtfPolicy().decide(snap) == Decision(
        launch=(Launch("a", on("n1", 1), LEASE),), renew=(Renew("r", LEASE),)
    )
    assert SrtfPolicy(lease_s=7.0).decide(snap) == Decision(
        launch=(Launch("a", on("n1", 1), 7.0),), renew=(Renew("r", 7.0),)
    )


# --- preemption at lease boundaries ----------------------------------------------------------


def test_expired_job_with_the_longest_remaining_time_yields(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), remaining=500.0, expires=100.0)
    b = running("B", on("n2", 0, 1), remaining=100.0, expires=100.0)
    decision = decide(snapshot(100.0, active=[a, b], queued=[waiting("Q", 2, remaining=50.0)]))
    # Q waits for A's GPUs (reserved); B is shorter than A and keeps its lease.
    assert decision == Decision(
        renew=(Renew("B", LEASE),), suspend=(Suspend("A", "lease expired; yields to Q"),)
    )


def test_running_jobs_whose_lease_has_not_expired_are_never_preempted(
    on, waiting, running, snapshot
):
    a = running("A", on("n1", 0, 1), remaining=500.0, expires=100.1)
    b = running("B", on("n2", 0, 1), remaining=400.0, expires=150.0)
    queue = [waiting("Q", 2, remaining=1.0)]
    assert decide(snapshot(100.0, active=[a, b], queued=queue)) == Decision()


def test_no_preemption_in_favour_of_a_longer_or_equally_long_job(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), remaining=100.0, expires=50.0)
    b = running("B", on("n2", 0, 1), remaining=80.0, expires=50.0)
    queue = [waiting("Q", 2, remaining=100.0)]
    decision = decide(snapshot(100.0, active=[a, b], queued=queue))
    assert decision == Decision(renew=(Renew("B", LEASE), Renew("A", LEASE)))


def test_unknown_remaining_time_never_preempts_but_can_be_preempted(on, waiting, running, snapshot):
    # The unknown-remaining runner joined the queue after the unknown waiter: FIFO would put the
    # waiter first, but FIFO order among unknown jobs never preempts.
    u = running("U", on("n1", 0, 1), remaining=None, expires=10.0, queued_since=5.0, since=0.0)
    k = running("K", on("n2", 0, 1), remaining=10.0, expires=10.0)
    only_unknown = decide(snapshot(10.0, active=[u, k], queued=[waiting("W", 2, remaining=None)]))
    assert only_unknown == Decision(renew=(Renew("K", LEASE), Renew("U", LEASE)))
    with_known = decide(snapshot(10.0, active=[u, k], queued=[waiting("S", 2, remaining=300.0)]))
    assert with_known == Decision(
        renew=(Renew("K", LEASE),), suspend=(Suspend("U", "lease expired; yields to S"),)
    )


def test_victims_accumulate_lowest_priority_first_until_the_job_fits(
    on, waiting, running, snapshot
):
    # n1: A (GPU 0, longest) and B (GPU 1); n2: C (both GPUs, not expired). Q needs 2 GPUs in
    # one process, so only a whole free node helps: A alone is not enough, A and B are.
    a = running("A", on("n1", 0), remaining=900.0, expires=10.0)
    b = running("B", on("n1", 1), remaining=800.0, expires=10.0)
    c = running("C", on("n2", 0, 1), remaining=1000.0, expires=99.0)
    queue = [waiting("Q", 2, remaining=10.0, gpus_per_process=2)]
    decision = decide(snapshot(10.0, active=[a, b, c], queued=queue))
    assert [s.job_id for s in decision.suspend] == ["A", "B"]
    assert decision.renew == () and decision.launch == ()


def test_useless_victims_are_pruned_again(on, waiting, running, snapshot):
    # Lowest priority first: A (1 GPU on n1, next to D) does not help a 2-GPU process, C (all
    # of n2) does. A is dropped again: only C yields.
    a = running("A", on("n1", 0), remaining=1000.0, expires=10.0)
    d = running("D", on("n1", 1), remaining=1.0, expires=99.0)
    c = running("C", on("n2", 0, 1), remaining=900.0, expires=10.0)
    queue = [waiting("Q", 2, remaining=10.0, gpus_per_process=2)]
    decision = decide(snapshot(10.0, active=[a, d, c], queued=queue))
    assert decision == Decision(
        renew=(Renew("A", LEASE),), suspend=(Suspend("C", "lease expired; yields to Q"),)
    )


def test_no_suspension_when_all_lower_priority_expired_jobs_are_not_enough(
    on, waiting, running, snapshot
):
    a = running("A", on("n1", 0, 1), remaining=900.0, expires=10.0)
    c = running("C", on("n2", 0, 1), remaining=950.0, expires=99.0)  # not expired
    decision = decide(snapshot(10.0, active=[a, c], queued=[waiting("Q", 4, remaining=1.0)]))
    assert decision == Decision(renew=(Renew("A", LEASE),))


def test_higher_priority_expired_jobs_are_not_victims(on, waiting, running, snapshot):
    # B is shorter than Q: it may not be suspended for Q, even though A alone is not enough.
    a = running("A", on("n1", 0, 1), remaining=900.0, expires=10.0)
    b = running("B", on("n2", 0, 1), remaining=5.0, expires=10.0)
    decision = decide(snapshot(10.0, active=[a, b], queued=[waiting("Q", 4, remaining=50.0)]))
    assert decision == Decision(renew=(Renew("B", LEASE), Renew("A", LEASE)))


def test_each_job_takes_its_own_victims(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), remaining=900.0, expires=10.0)
    b = running("B", on("n2", 0, 1), remaining=800.0, expires=10.0)
    queue = [waiting("P", 2, remaining=10.0), waiting("Q", 2, remaining=20.0)]
    decision = decide(snapshot(10.0, active=[a, b], queued=queue))
    assert decision == Decision(
        suspend=(
            Suspend("A", "lease expired; yields to P"),
            Suspend("B", "lease expired; yields to Q"),
        )
    )


def test_no_new_victim_while_gpus_being_released_suffice(on, waiting, running, snapshot):
    # X is already checkpointing on n1 (chosen at an earlier cycle for W); Y's lease expires.
    x = running("X", on("n1", 0, 1), remaining=900.0, expires=0.0, state=JobState.SUSPENDING)
    y = running("Y", on("n2", 0, 1), remaining=800.0, expires=10.0)
    decision = decide(snapshot(10.0, active=[y], queued=[waiting("W", 2, remaining=5.0)], busy=[x]))
    assert decision == Decision(renew=(Renew("Y", LEASE),))


def test_gpus_being_released_are_reserved_so_lower_jobs_do_not_backfill_there(
    on, waiting, running, snapshot
):
    # n1: GPU 0 free, GPU 1 held by X (suspending). W needs 2: it will fit on n1 once X is
    # gone, so it reserves n1 (both GPUs) and the 1-GPU job behind it does not start there.
    x = running("X", on("n1", 1), remaining=900.0, expires=0.0, state=JobState.SUSPENDING)
    b = running("B", on("n2", 0, 1), remaining=1.0, expires=99.0)
    queue = [waiting("W", 2, remaining=5.0), waiting("s", 1, remaining=6.0)]
    assert decide(snapshot(10.0, active=[b], queued=queue, busy=[x])) == Decision()


def test_gpus_being_released_can_cover_several_waiting_jobs(on, waiting, running, snapshot):
    # X releases both GPUs of n1: W reserves one, s the other; nobody else has to yield.
    x = running("X", on("n1", 0, 1), remaining=900.0, expires=0.0, state=JobState.SUSPENDING)
    y = running("Y", on("n2", 0, 1), remaining=800.0, expires=10.0)
    queue = [waiting("W", 1, remaining=5.0), waiting("s", 1, remaining=6.0)]
    decision = decide(snapshot(10.0, active=[y], queued=queue, busy=[x]))
    assert decision == Decision(renew=(Renew("Y", LEASE),))


# --- backfill and jobs that can never run ----------------------------------------------------


def test_a_job_that_does_not_fit_is_skipped_and_lower_jobs_backfill(on, waiting, running, snapshot):
    b = running("B", on("n2", 0, 1), remaining=1.0, expires=99.0)
    queue = [waiting("big", 4, remaining=5.0), waiting("small", 1, remaining=500.0)]
    decision = decide(snapshot(10.0, active=[b], queued=queue))
    assert decision == Decision(launch=(Launch("small", on("n1", 0), LEASE),))


def test_a_job_bigger_than_the_cluster_blocks_nothing_and_suspends_nobody(
    on, waiting, running, snapshot
):
    a = running("A", on("n1", 0, 1), remaining=900.0, expires=10.0)
    queue = [
        waiting("huge", 5, remaining=1.0),
        waiting("never", 4, remaining=1.0, gpus_per_process=4),
    ]
    queue.append(waiting("small", 2, remaining=2.0))
    decision = decide(snapshot(10.0, active=[a], queued=queue))
    assert decision == Decision(
        launch=(Launch("small", on("n2", 0, 1), LEASE),), renew=(Renew("A", LEASE),)
    )


def test_launch_respects_gpus_per_process(tp, waiting, snapshot):
    decision = decide(snapshot(0.0, queued=[waiting("wide", 4, remaining=1.0, gpus_per_process=2)]))
    assert decision.launch == (Launch("wide", (tp(0, "n1", 0, 1), tp(1, "n2", 0, 1)), LEASE),)


def test_decide_has_no_hidden_state(on, waiting, running, snapshot):
    policy = SrtfPolicy()
    a = running("A", on("n1", 0), remaining=900.0, expires=10.0)
    snap = snapshot(
        10.0, active=[a], queued=[waiting("Q", 4, remaining=1.0), waiting("s", 1, remaining=2.0)]
    )
    assert policy.decide(snap) == policy.decide(snap)


# --- randomized invariants -------------------------------------------------------------------

# Shared generator and checks: check_policy_properties in conftest.py.


@pytest.mark.parametrize("seed", range(300))
def test_random_snapshots_keep_the_invariants(seed: int, check_policy_properties):
    def outranks(snap: ClusterSnapshot, queued: JobView, victim: JobView) -> bool:
        return srtf_key(queued)[:2] < srtf_key(victim)[:2]

    check_policy_properties(seed, decide, outranks)
