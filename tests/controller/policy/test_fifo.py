"""FifoPolicy on hand-built snapshots: strict FIFO, time slicing at lease expiry; the registry."""

from __future__ import annotations

import dataclasses

import pytest

from controller.placement import TaskPlacement
from controller.policy import available_policies, make_policy
from controller.policy.base import Decision, Launch, Renew, Suspend
from controller.policy.edf import EdfPolicy
from controller.policy.fifo import FifoPolicy
from controller.policy.srtf import SrtfPolicy
from controller.policy.themis import ThemisPolicy
from controller.policy.tiresias import TiresiasPolicy
from mlsched.model import JobState

LEASE = 100.0


def placements(decision: Decision) -> dict[str, tuple[TaskPlacement, ...]]:
    """Where each launched job goes."""
    return {item.job_id: item.placement for item in decision.launch}


def suspended(decision: Decision) -> list[str]:
    return [item.job_id for item in decision.suspend]


def renewed(decision: Decision) -> list[str]:
    return [item.job_id for item in decision.renew]


# --- queue order -----------------------------------------------------------------------------


def test_empty_cluster_decides_nothing(snapshot):
    assert FifoPolicy().decide(snapshot(0.0)) == Decision()


def test_jobs_launch_in_queue_order_with_tie_breaks(on, waiting, snapshot):
    # One node with 4 GPUs: the order of launch shows in which GPU each 1-GPU job gets.
    queue = [
        waiting("e", 1, queued_since=7.0),
        waiting("d", 1, queued_since=3.0, submit_time=3.0),
        waiting("c", 1, queued_since=3.0, submit_time=1.0),
        waiting("b", 1, queued_since=3.0, submit_time=1.0),
        waiting("a", 1, queued_since=9.0),
    ]
    decision = FifoPolicy().decide(snapshot(10.0, queued=queue, nodes={"n1": 4}))
    # (3, 1, b), (3, 1, c), (3, 3, d), (7, ...) e; a waits for a GPU
    assert [item.job_id for item in decision.launch] == ["b", "c", "d", "e"]
    assert placements(decision) == {
        "b": on("n1", 0),
        "c": on("n1", 1),
        "d": on("n1", 2),
        "e": on("n1", 3),
    }
    assert decision.suspend == () and decision.renew == ()


def test_launch_uses_the_default_lease_or_the_policy_lease(on, waiting, snapshot):
    queue = [waiting("a", 1, queued_since=0.0)]
    assert FifoPolicy().decide(snapshot(0.0, queued=queue)).launch == (
        Launch("a", on("n1", 0), LEASE),
    )
    assert FifoPolicy(lease_s=42.0).decide(snapshot(0.0, queued=queue)).launch == (
        Launch("a", on("n1", 0), 42.0),
    )


def test_policy_lease_is_used_for_renewals_too(on, running, snapshot):
    active = [running("a", on("n1", 0, 1), since=0.0, expires=100.0)]
    decision = FifoPolicy(lease_s=42.0).decide(snapshot(100.0, active=active))
    assert decision == Decision(renew=(Renew("a", 42.0),))


# --- the 2 x 2 scenario over several cycles ---------------------------------------------------


def test_time_slicing_scenario_on_two_nodes_of_two_gpus(on, waiting, running, snapshot):
    policy = FifoPolicy()
    x, y, z = (
        waiting("X", 2, queued_since=0.0),
        waiting("Y", 2, queued_since=1.0),
        waiting("Z", 1, queued_since=2.0),
    )

    # t=0: X and Y tie for best fit (2 free each) -> X to n1 (node id), Y to n2; Z waits.
    d0 = policy.decide(snapshot(0.0, queued=[x, y, z]))
    assert d0 == Decision(
        launch=(Launch("X", on("n1", 0, 1), LEASE), Launch("Y", on("n2", 0, 1), LEASE))
    )

    # t=50: leases run until t=100; nothing expired, Z still does not fit: nothing changes.
    x_run = running("X", on("n1", 0, 1), since=0.0, expires=100.0)
    y_run = running("Y", on("n2", 0, 1), since=0.0, expires=100.0)
    assert policy.decide(snapshot(50.0, active=[x_run, y_run], queued=[z])) == Decision()

    # t=100: both leases expired. Z needs 1 GPU: releasing X (first by id at equal running
    # time) is enough, so only X is suspended and Y is renewed.
    d100 = policy.decide(snapshot(100.0, active=[x_run, y_run], queued=[z]))
    assert d100 == Decision(
        renew=(Renew("Y", LEASE),),
        suspend=(Suspend("X", "lease expired; yields to Z"),),
    )

    # t=101: X is checkpointing (still holds n1); Y's lease now ends at 200: nothing to do.
    x_busy = running("X", on("n1", 0, 1), since=0.0, expires=100.0, state=JobState.SUSPENDING)
    y_run = running("Y", on("n2", 0, 1), since=0.0, expires=200.0)
    assert policy.decide(snapshot(101.0, active=[y_run], queued=[z], busy=[x_busy])) == Decision()

    # t=102: X suspended (rejoined the queue at 101, behind Z). Z takes n1 GPU 0; X needs 2
    # and only n1 GPU 1 is free; nothing expired, so X waits.
    x_back = waiting("X", 2, queued_since=101.0, submit_time=0.0, state=JobState.SUSPENDED)
    d102 = policy.decide(snapshot(102.0, active=[y_run], queued=[x_back, z]))
    assert d102 == Decision(launch=(Launch("Z", on("n1", 0), LEASE),))

    # t=200: Y expired, Z (lease to 202) not. Releasing Y lets X fit: Y yields to X.
    z_run = running("Z", on("n1", 0), since=102.0, expires=202.0)
    d200 = policy.decide(snapshot(200.0, active=[y_run, z_run], queued=[x_back]))
    assert d200 == Decision(suspend=(Suspend("Y", "lease expired; yields to X"),))

    # t=203: Y suspended (queued at 201, behind X). X resumes on n2. Y needs 2 but only n1
    # GPU 1 is free; Z's lease expired at 202 and releasing it frees n1 GPU 0: Z yields to Y.
    y_back = waiting("Y", 2, queued_since=201.0, submit_time=1.0, state=JobState.SUSPENDED)
    d203 = policy.decide(snapshot(203.0, active=[z_run], queued=[y_back, x_back]))
    assert d203 == Decision(
        launch=(Launch("X", on("n2", 0, 1), LEASE),),
        suspend=(Suspend("Z", "lease expired; yields to Y"),),
    )


def test_longest_running_expired_job_is_suspended_first(on, waiting, running, snapshot):
    # Y started earlier than X: Y is the one that yields.
    x_run = running("X", on("n1", 0, 1), since=20.0, expires=120.0)
    y_run = running("Y", on("n2", 0, 1), since=5.0, expires=105.0)
    decision = FifoPolicy().decide(
        snapshot(120.0, active=[x_run, y_run], queued=[waiting("Z", 1, queued_since=50.0)])
    )
    assert suspended(decision) == ["Y"]
    assert renewed(decision) == ["X"]


@pytest.mark.parametrize(
    ("head_gpus", "victims", "kept"),
    [
        # Releasing A leaves n1 with 1 free: not enough; A and B free n1: enough. C keeps running.
        (2, ["A", "B"], ["C"]),
        # A head needing the whole cluster suspends every expired job.
        (4, ["A", "B", "C"], []),
    ],
    ids=["until-the-head-fits", "whole-cluster"],
)
def test_victims_accumulate_until_the_head_fits(
    head_gpus: int, victims: list[str], kept: list[str], on, waiting, running, snapshot
):
    # n1: A (GPU 0, oldest) and B (GPU 1); n2: C (both GPUs, newest). All expired.
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    b = running("B", on("n1", 1), since=5.0, expires=105.0)
    c = running("C", on("n2", 0, 1), since=10.0, expires=110.0)
    head = waiting("H", head_gpus, queued_since=1.0)
    decision = FifoPolicy().decide(snapshot(110.0, active=[a, b, c], queued=[head]))
    assert suspended(decision) == victims
    assert renewed(decision) == kept
    assert decision.launch == ()


def test_expired_victims_wait_for_the_others_and_their_leases_line_up(
    on, waiting, running, snapshot
):
    # H needs all 4 GPUs but C's lease runs to 150: suspending A and B now is pointless.
    # They are renewed until 150, so that all three yield together then.
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    b = running("B", on("n1", 1), since=5.0, expires=100.0)
    c = running("C", on("n2", 0, 1), since=10.0, expires=150.0)
    head = waiting("H", 4, queued_since=1.0)
    decision = FifoPolicy().decide(snapshot(100.0, active=[a, b, c], queued=[head]))
    assert decision == Decision(renew=(Renew("A", 50.0), Renew("B", 50.0)))
    a, b = (dataclasses.replace(v, lease_expires_at=150.0) for v in (a, b))
    decision = FifoPolicy().decide(snapshot(150.0, active=[a, b, c], queued=[head]))
    assert suspended(decision) == ["A", "B", "C"]


def test_a_victim_that_has_not_trained_leaves_the_others_on_full_leases(
    on, waiting, running, snapshot
):
    # C has not trained yet, so when it may yield is unknown: A and B get whole leases.
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    b = running("B", on("n1", 1), since=5.0, expires=100.0)
    c = running("C", on("n2", 0, 1), since=10.0, expires=150.0, startup_s=None)
    decision = FifoPolicy().decide(
        snapshot(100.0, active=[a, b, c], queued=[waiting("H", 4, queued_since=1.0)])
    )
    assert decision == Decision(renew=(Renew("A", LEASE), Renew("B", LEASE)))


def test_a_job_still_starting_up_is_renewed_not_suspended(on, waiting, running, snapshot):
    # Y's lease (0-100) expired before its first step: a start-up longer than the lease must
    # not cost it the GPUs, or it would be suspended before every first step, forever.
    y = running("Y", on("n1", 0, 1), since=0.0, expires=100.0, startup_s=None)
    decision = FifoPolicy().decide(
        snapshot(100.0, active=[y], queued=[waiting("H", 2, queued_since=1.0)], nodes={"n1": 2})
    )
    assert decision == Decision(renew=(Renew("Y", LEASE),))


@pytest.mark.parametrize(
    ("now", "victims"),
    # Y started at 0 and trained from 30: a whole lease of training ends at 130.
    [(100.0, []), (129.9, []), (130.0, ["Y"])],
)
def test_a_lease_counts_training_time_not_start_up(
    now: float, victims: list[str], on, waiting, running, snapshot
):
    y = running("Y", on("n1", 0, 1), since=0.0, expires=100.0, startup_s=30.0)
    decision = FifoPolicy().decide(
        snapshot(now, active=[y], queued=[waiting("H", 2, queued_since=1.0)], nodes={"n1": 2})
    )
    assert suspended(decision) == victims
    assert renewed(decision) == ([] if victims else ["Y"])


def test_the_longest_running_job_yields_even_if_a_younger_one_could_yield_sooner(
    on, waiting, running, snapshot
):
    # A started first but took 30 s to start up: it has trained a lease only at 130. B
    # started later and may yield now. Round robin keeps its order: A yields, at 130.
    a = running("A", on("n1", 0, 1), since=0.0, expires=100.0, startup_s=30.0)
    b = running("B", on("n2", 0, 1), since=10.0, expires=110.0)
    decision = FifoPolicy().decide(
        snapshot(110.0, active=[a, b], queued=[waiting("H", 2, queued_since=1.0)])
    )
    assert decision == Decision(renew=(Renew("A", 20.0), Renew("B", LEASE)))


def test_a_slow_starter_is_passed_over_for_a_job_that_trained(on, waiting, running, snapshot):
    # Both expired; Y is older but has not trained yet, so X yields instead.
    x = running("X", on("n2", 0, 1), since=20.0, expires=120.0)
    y = running("Y", on("n1", 0, 1), since=5.0, expires=105.0, startup_s=None)
    decision = FifoPolicy().decide(
        snapshot(120.0, active=[x, y], queued=[waiting("H", 2, queued_since=1.0)])
    )
    assert suspended(decision) == ["X"]
    assert renewed(decision) == ["Y"]


def test_unexpired_jobs_are_never_suspended_or_renewed(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), since=0.0, expires=100.0)
    b = running("B", on("n2", 0, 1), since=0.0, expires=100.0)
    decision = FifoPolicy().decide(
        snapshot(99.9, active=[a, b], queued=[waiting("H", 1, queued_since=1.0)])
    )
    assert decision == Decision()


def test_lease_expiring_exactly_now_counts_as_expired(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), since=0.0, expires=100.0)
    b = running("B", on("n2", 0, 1), since=1.0, expires=101.0)
    decision = FifoPolicy().decide(
        snapshot(100.0, active=[a, b], queued=[waiting("H", 1, queued_since=1.0)])
    )
    assert decision == Decision(suspend=(Suspend("A", "lease expired; yields to H"),))


def test_expired_jobs_are_renewed_when_the_head_fits_without_them(on, waiting, running, snapshot):
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    decision = FifoPolicy().decide(
        snapshot(100.0, active=[a], queued=[waiting("H", 2, queued_since=1.0)])
    )
    assert decision == Decision(
        launch=(Launch("H", on("n2", 0, 1), LEASE),), renew=(Renew("A", LEASE),)
    )


def test_expired_jobs_are_renewed_when_nobody_waits(on, running, snapshot):
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    b = running("B", on("n2", 0, 1), since=0.0, expires=90.0)
    decision = FifoPolicy().decide(snapshot(100.0, active=[a, b]))
    assert sorted(renewed(decision)) == ["A", "B"]
    assert decision.suspend == () and decision.launch == ()


def test_without_time_slicing_leases_are_always_renewed(on, waiting, running, snapshot):
    x_run = running("X", on("n1", 0, 1), since=0.0, expires=100.0)
    y_run = running("Y", on("n2", 0, 1), since=0.0, expires=100.0)
    z = waiting("Z", 1, queued_since=2.0)
    decision = FifoPolicy(time_slicing=False).decide(
        snapshot(100.0, active=[x_run, y_run], queued=[z])
    )
    assert decision == Decision(renew=(Renew("X", LEASE), Renew("Y", LEASE)))


def test_nopreempt_still_launches_in_fifo_order(on, waiting, snapshot):
    queue = [
        waiting("b", 2, queued_since=1.0),
        waiting("a", 2, queued_since=0.0),
        waiting("c", 1, queued_since=2.0),
    ]
    decision = FifoPolicy(time_slicing=False).decide(snapshot(0.0, queued=queue))
    assert placements(decision) == {"a": on("n1", 0, 1), "b": on("n2", 0, 1)}


# --- what never runs, and head-of-line blocking -----------------------------------------------


def test_job_bigger_than_the_cluster_is_skipped_and_does_not_block(on, waiting, snapshot):
    big, small = waiting("big", 5, queued_since=0.0), waiting("small", 1, queued_since=1.0)
    decision = FifoPolicy().decide(snapshot(0.0, queued=[big, small]))
    assert decision == Decision(launch=(Launch("small", on("n1", 0), LEASE),))


def test_job_bigger_than_the_cluster_causes_no_suspension(on, waiting, running, snapshot):
    a = running("A", on("n1", 0, 1), since=0.0, expires=100.0)
    b = running("B", on("n2", 0, 1), since=0.0, expires=100.0)
    decision = FifoPolicy().decide(
        snapshot(100.0, active=[a, b], queued=[waiting("big", 5, queued_since=0.0)])
    )
    assert decision == Decision(renew=(Renew("A", LEASE), Renew("B", LEASE)))


def test_capacity_counts_busy_gpus_so_a_full_cluster_job_is_not_skipped(
    on, waiting, running, snapshot
):
    # H needs all 4 GPUs; they exist, but B holds 2 while not expired: H waits, and the small
    # job behind it does not overtake it.
    b = running("B", on("n2", 0, 1), since=0.0, expires=500.0)
    queue = [waiting("H", 4, queued_since=0.0), waiting("s", 1, queued_since=1.0)]
    assert FifoPolicy().decide(snapshot(10.0, active=[b], queued=queue)) == Decision()


def test_small_job_behind_a_waiting_head_does_not_start(on, waiting, running, snapshot):
    a = running("A", on("n1", 0), since=0.0, expires=500.0)
    queue = [waiting("head", 4, queued_since=1.0), waiting("small", 1, queued_since=2.0)]
    assert FifoPolicy().decide(snapshot(10.0, active=[a], queued=queue)) == Decision()


def test_jobs_before_the_blocked_head_still_launch(on, waiting, snapshot):
    queue = [
        waiting("first", 1, queued_since=0.0),
        waiting("head", 4, queued_since=1.0),
        waiting("small", 1, queued_since=2.0),
    ]
    decision = FifoPolicy().decide(snapshot(0.0, queued=queue))
    # first takes n1 GPU 0 (best fit: n1 and n2 tie, n1 by id); head needs all 4 -> blocks.
    assert decision == Decision(launch=(Launch("first", on("n1", 0), LEASE),))


def test_nodes_without_free_gpus_in_the_snapshot_are_not_used(on, waiting, running, snapshot):
    nodes = {"n1": 2}
    a = running("A", on("n1", 0, 1), since=0.0, expires=500.0)
    assert FifoPolicy().decide(
        snapshot(0.0, active=[a], queued=[waiting("s", 1, queued_since=0.0)], nodes=nodes)
    ) == (Decision())


def test_launch_respects_gpus_per_process(tp, waiting, snapshot):
    queue = [waiting("wide", 4, queued_since=0.0, gpus_per_process=2)]
    decision = FifoPolicy().decide(snapshot(0.0, queued=queue))
    assert placements(decision) == {"wide": (tp(0, "n1", 0, 1), tp(1, "n2", 0, 1))}


def test_job_that_can_never_be_placed_does_not_block_the_queue(on, waiting, snapshot):
    # 4 GPUs in one process, but no node has 4 GPUs: it can never run on this cluster.
    queue = [
        waiting("never", 4, queued_since=0.0, gpus_per_process=4),
        waiting("small", 1, queued_since=1.0),
    ]
    decision = FifoPolicy().decide(snapshot(0.0, queued=queue))
    assert placements(decision) == {"small": on("n1", 0)}


def test_no_second_victim_while_the_first_one_is_still_suspending(on, waiting, running, snapshot):
    # t=100: X was chosen to yield to W (2 GPUs) and is still checkpointing on n1.
    # t=105: Y's lease expires. When X is done, W fits on n1: Y need not be suspended.
    x_busy = running("X", on("n1", 0, 1), since=0.0, expires=100.0, state=JobState.SUSPENDING)
    y_run = running("Y", on("n2", 0, 1), since=5.0, expires=105.0)
    decision = FifoPolicy().decide(
        snapshot(105.0, active=[y_run], queued=[waiting("W", 2, queued_since=50.0)], busy=[x_busy])
    )
    assert decision == Decision(renew=(Renew("Y", LEASE),))


def test_policy_has_no_hidden_state(on, waiting, running, snapshot):
    policy = FifoPolicy()
    a = running("A", on("n1", 0), since=0.0, expires=100.0)
    snap = snapshot(
        100.0,
        active=[a],
        queued=[waiting("H", 4, queued_since=1.0), waiting("s", 1, queued_since=2.0)],
    )
    assert policy.decide(snap) == policy.decide(snap)


# --- registry --------------------------------------------------------------------------------


def test_registry_lists_and_builds_policies():
    assert {"fifo", "fifo-lease"} <= set(available_policies())
    sliced = make_policy("fifo-lease")
    assert isinstance(sliced, FifoPolicy) and sliced.time_slicing and sliced.name == "fifo-lease"
    plain = make_policy("fifo")
    assert isinstance(plain, FifoPolicy)
    assert not plain.time_slicing and plain.name == "fifo"
    assert make_policy("fifo") is not plain


@pytest.mark.parametrize(
    ("name", "policy_class"),
    [
        ("srtf", SrtfPolicy),
        ("edf", EdfPolicy),
        ("tiresias", TiresiasPolicy),
        ("themis", ThemisPolicy),
    ],
)
def test_registry_builds_each_priority_policy(name: str, policy_class: type) -> None:
    policy = make_policy(name)
    assert isinstance(policy, policy_class) and policy.name == name


def test_registry_rejects_unknown_names_listing_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown policy 'lottery'; valid: .*fifo, fifo-lease"):
        make_policy("lottery")
