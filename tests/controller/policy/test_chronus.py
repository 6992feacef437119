"""ChronusPolicy (Gao et al., SoCC 2021) on hand-built snapshots, and randomized invariants.

Leases: SLO 1200 s, best-effort slot 300 s. A job's leases to guarantee are
``ceil(rem * 1.1 * (1 + 30 * (1 + log2 g) / 1200) / 1200)``; e.g. 1000 s on 4 GPUs:
1000 * 1.1 * 1.075 = 1182.5 s -> 1 lease; 1000 s on 8 GPUs: 1100 * 1.1 = 1210 s -> 2 leases.
Plans take the latest free leases before the first deadline (the artifact's fast check).
"""

from __future__ import annotations

import pytest

from controller.policy.base import ClusterSnapshot, Decision, Launch, Renew
from controller.policy.chronus import GUARANTEED, SLACK, SPOT, ChronusConfig, ChronusPolicy
from controller.policy.registry import make_policy
from mlsched.model import JobClass

STRICT, SOFT, BE = JobClass.STRICT_SLO, JobClass.SOFT_SLO, JobClass.BEST_EFFORT
ONE_NODE = {"n1": 8}


def suspended(decision: Decision) -> list[str]:
    return [s.job_id for s in decision.suspend]


# --- estimates and admission (§4.1, §4.2) ----------------------------------------------------


def test_leases_needed_pad_the_estimate_by_the_margin_and_the_per_lease_overhead(waiting):
    policy = ChronusPolicy()
    need = policy._need
    assert need(waiting("a", 4, remaining=1000.0), 4) == 1  # 1182.5 s
    assert need(waiting("b", 8, remaining=1000.0), 4) == 2  # 1210 s
    assert need(waiting("c", 1, remaining=1200.0 / 1.1 / 1.025), 4) == 1  # exactly one lease


def test_an_slo_job_whose_leases_fit_before_its_deadline_is_admitted_and_guaranteed(
    waiting, snapshot, on
):
    policy = ChronusPolicy()
    job = waiting("a", 4, job_class=STRICT, deadlines=(1200.0,), remaining=1000.0)
    decision = policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))
    # lease 0 ends at 1200 = the deadline: planned there, launched on a whole 4-GPU cell for
    # the SLO lease (to 1200)
    assert decision.launch == (Launch("a", on("n1", 0, 1, 2, 3), 1200.0),)
    assert policy.admitted_ever == {"a"} and policy._slo["a"].plan == [0]
    assert policy._planned == {0: 4}


def test_an_slo_job_that_does_not_fit_before_its_deadline_is_rejected(waiting, snapshot):
    policy = ChronusPolicy()
    first = waiting("a", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0)
    second = waiting("b", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0, submit_time=1)
    decision = policy.decide(snapshot(0.0, queued=[first, second], nodes=ONE_NODE))
    # 900 * 1.1 * 1.1 = 1089 s: one lease each, but lease 0 holds one 8-GPU job only
    assert [item.job_id for item in decision.launch] == ["a"]
    assert policy.admitted_ever == {"a"} and policy.rejected_ever == {"b"}


def test_a_job_needing_more_leases_than_remain_before_its_deadline_is_rejected(waiting, snapshot):
    policy = ChronusPolicy()
    job = waiting("a", 8, job_class=STRICT, deadlines=(1300.0,), remaining=1250.0)
    policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))  # needs 2, only lease 0 ends
    assert policy.rejected_ever == {"a"} and policy._planned == {}


def test_a_rejected_job_that_fits_in_the_rest_of_the_lease_gets_spot_gpus(waiting, snapshot):
    policy = ChronusPolicy()
    job = waiting("a", 8, job_class=STRICT, deadlines=(1300.0,), remaining=1000.0)
    decision = policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))
    # needs 2 leases (1210 s padded), only lease 0 ends by 1300: rejected; but its 1000 s fit
    # in lease 0, so it is forced onto spot GPUs, and (submitted in this lease) counted as
    # admitted, as the artifact does
    assert policy._planned == {} and policy._forced == {"a"}
    assert policy.admitted_ever == {"a"} and policy.rejected_ever == set()
    assert [item.job_id for item in decision.launch] == ["a"]


def test_plans_take_the_latest_free_leases_so_a_later_tight_job_still_fits(waiting, snapshot):
    policy = ChronusPolicy()
    # the artifact's fast check packs each job from its last lease back: "late" (deadline
    # 3600: leases 0-2, needs 1) takes lease 2, so "tight" (deadline 1200) still gets lease 0
    late = waiting("late", 8, job_class=STRICT, deadlines=(3600.0,), remaining=900.0)
    tight = waiting(
        "tight", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0, submit_time=1
    )
    policy.decide(snapshot(0.0, queued=[late, tight], nodes=ONE_NODE))
    assert policy._slo["late"].plan == [2] and policy._slo["tight"].plan == [0]
    assert policy._planned == {0: 8, 2: 8} and policy.rejected_ever == set()


def test_a_job_needing_several_leases_takes_the_last_ones_before_its_deadline(waiting, snapshot):
    policy = ChronusPolicy(ChronusConfig(adaptive=False))
    # 2000 s on 2 GPUs: 2000 * 1.1 * 1.05 = 2310 s -> 2 leases; deadline 6000 -> leases 0-4
    job = waiting("a", 2, job_class=STRICT, deadlines=(6000.0,), remaining=2000.0)
    policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))
    assert policy._slo["a"].plan == [3, 4] and policy._planned == {3: 2, 4: 2}


def test_while_nothing_is_rejected_a_boundary_fills_the_current_lease(waiting, snapshot):
    # the artifact's adaptive objective: no SLO job rejected -> maximise the GPUs guaranteed
    # now; "a" (planned [3, 4] as above) moves its earliest lease, 3, to lease 0
    policy = ChronusPolicy()
    job = waiting("a", 2, job_class=STRICT, deadlines=(6000.0,), remaining=2000.0)
    decision = policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))
    assert policy._slo["a"].plan == [0, 4] and policy._planned == {0: 2, 4: 2}
    assert [item.job_id for item in decision.launch] == ["a"]
    assert decision.launch[0].lease_s == 1200.0  # guaranteed: an SLO lease


def test_after_a_rejection_a_boundary_keeps_plans_latest_first(waiting, snapshot):
    # "r" needs 2 leases (1210 s padded) but only lease 0 ends by 1300: rejected (its 1000 s
    # fit in lease 0, so it is then forced onto spot GPUs and counted as admitted); the
    # rejection in this lease makes the boundary minimise, as the artifact's count does
    policy = ChronusPolicy()
    job = waiting("a", 2, job_class=STRICT, deadlines=(6000.0,), remaining=2000.0)
    rejected = waiting(
        "r", 8, job_class=STRICT, deadlines=(1300.0,), remaining=1000.0, submit_time=1
    )
    policy.decide(snapshot(0.0, queued=[job, rejected], nodes=ONE_NODE))
    assert policy.rejected_ever == set() and policy._forced == {"r"}  # forced: admitted
    assert policy._slo["a"].plan == [3, 4]  # minimise: a stays on its latest leases


def test_between_boundaries_a_job_running_ahead_of_its_plan_gives_back_its_earliest_lease(
    waiting, snapshot
):
    policy = ChronusPolicy(ChronusConfig(adaptive=False))
    job = waiting("a", 2, job_class=STRICT, deadlines=(6000.0,), remaining=2000.0)
    policy.decide(snapshot(0.0, queued=[job], nodes=ONE_NODE))
    assert policy._slo["a"].plan == [3, 4]
    # at 600 s (no boundary) 1000 s remain: 1000 * 1.155 = 1155 s -> 1 lease; lease 3 goes
    ahead = waiting("a", 2, job_class=STRICT, deadlines=(6000.0,), remaining=1000.0)
    policy.decide(snapshot(600.0, queued=[ahead], nodes=ONE_NODE))
    assert policy._slo["a"].plan == [4] and policy._planned == {4: 2}


def test_a_soft_job_is_admitted_for_its_first_deadline_only(waiting, snapshot):
    policy = ChronusPolicy()
    first = waiting("a", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0)
    soft = waiting(
        "b", 8, job_class=SOFT, deadlines=(1200.0, 2400.0), remaining=900.0, submit_time=1
    )
    policy.decide(snapshot(0.0, queued=[first, soft], nodes=ONE_NODE))
    # lease 1 is free and ends by b's second deadline, but the artifact checks a job on its
    # least-laxity entry (its first deadline, lease 0, full): b is rejected
    assert policy.admitted_ever == {"a"} and policy.rejected_ever == {"b"}
    assert policy._planned == {0: 8}


def test_a_soft_job_whose_plan_outgrows_its_first_deadline_moves_to_the_next(waiting, snapshot):
    policy = ChronusPolicy(ChronusConfig(adaptive=False))
    soft = waiting("s", 8, job_class=SOFT, deadlines=(2400.0, 4800.0), remaining=900.0)
    policy.decide(snapshot(0.0, queued=[soft], nodes=ONE_NODE))
    assert policy._slo["s"].plan == [1]  # 1089 s: one lease, the last before 2400
    # at 1200 its estimate has grown to 1500 s: 1500 * 1.21 = 1815 s -> 2 leases; only lease
    # 1 ends by 2400, so it takes the latest free lease before 4800 (lease 3)
    grown = waiting("s", 8, job_class=SOFT, deadlines=(2400.0, 4800.0), remaining=1500.0)
    policy.decide(snapshot(1200.0, queued=[grown], nodes=ONE_NODE))
    state = policy._slo["s"]
    assert state.plan == [1, 3] and state.target == 1 and state.last == 3
    assert not state.overdue and policy._planned == {1: 8, 3: 8}


def test_an_arrival_between_boundaries_is_planned_from_the_next_lease(waiting, snapshot):
    policy = ChronusPolicy()
    policy.decide(snapshot(0.0, nodes=ONE_NODE))
    job = waiting("a", 2, job_class=STRICT, deadlines=(2000.0,), remaining=600.0, submit_time=400)
    policy.decide(snapshot(400.0, queued=[job], nodes=ONE_NODE))
    assert policy._slo["a"].plan == [1]  # lease 1 = [1200, 2400) ends after 2400: too late?
    # deadline 400 + 2000 = 2400 = the end of lease 1: it counts


# --- round-up allocation (§4.3) --------------------------------------------------------------


def test_round_up_plans_and_places_whole_buddy_cells(waiting, snapshot, on):
    policy = ChronusPolicy()
    queue = [
        waiting("a", 3, job_class=STRICT, deadlines=(1200.0,), remaining=600.0, submit_time=0),
        waiting("b", 3, job_class=STRICT, deadlines=(1200.0,), remaining=600.0, submit_time=1),
        waiting("c", 2, job_class=STRICT, deadlines=(1200.0,), remaining=600.0, submit_time=2),
    ]
    decision = policy.decide(snapshot(0.0, queued=queue, nodes=ONE_NODE))
    # 3 GPUs round up to a 4-GPU cell: two of them fill the 8-GPU plan of lease 0, so the
    # 2-GPU job is rejected although 2 GPUs are idle, and it cannot straddle the two cells.
    assert policy.admitted_ever == {"a", "b"} and policy.rejected_ever == {"c"}
    assert decision.launch == (
        Launch("a", on("n1", 0, 1, 2), 1200.0),
        Launch("b", on("n1", 4, 5, 6), 1200.0),
    )


def test_jobs_above_a_node_round_up_to_whole_nodes(waiting, snapshot):
    policy = ChronusPolicy()
    job = waiting("a", 12, job_class=STRICT, deadlines=(1200.0,), remaining=600.0)
    decision = policy.decide(snapshot(0.0, queued=[job], nodes={"n1": 8, "n2": 8}))
    assert policy._planned == {0: 16}
    nodes = {p.node_id for p in decision.launch[0].placement}
    assert nodes == {"n1", "n2"}


# --- reserved profiling GPUs (§4.1) ----------------------------------------------------------


def test_jobs_without_an_estimate_are_profiled_on_the_reserved_node_only(waiting, snapshot):
    policy = ChronusPolicy(ChronusConfig(profile_nodes=1))
    queue = [
        waiting("p", 2, queued_since=0.0),  # no estimate yet: profile it
        waiting("s1", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0, submit_time=1),
        waiting("s2", 8, job_class=STRICT, deadlines=(1200.0,), remaining=900.0, submit_time=2),
        waiting("b", 4, remaining=100.0, submit_time=3),
    ]
    decision = policy.decide(snapshot(0.0, queued=queue, nodes={"n1": 8, "n2": 8}))
    launches = {item.job_id: item for item in decision.launch}
    # the SLO plan counts n1 only: s2 is rejected though n2 has 8 GPUs
    assert policy.admitted_ever == {"s1"} and policy.rejected_ever == {"s2"}
    assert launches["p"].placement[0].node_id == "n2" and launches["p"].lease_s == 300.0
    # while a job waits for profiling the reserved node is not lent: b waits
    assert sorted(launches) == ["p", "s1"]


def test_idle_profiling_gpus_are_lent_on_slot_leases(waiting, snapshot):
    policy = ChronusPolicy(ChronusConfig(profile_nodes=1))
    busy_n1 = waiting("big", 8, remaining=5000.0)
    small = waiting("b", 4, remaining=100.0, submit_time=1)
    decision = policy.decide(snapshot(0.0, queued=[busy_n1, small], nodes={"n1": 8, "n2": 8}))
    launches = {item.job_id: item for item in decision.launch}
    assert sorted(launches) == ["b", "big"]
    # b (less work) goes first, on n1; big borrows the reserved node, on a slot lease
    assert launches["big"].placement[0].node_id == "n2" and launches["big"].lease_s == 300.0


def test_a_profiled_job_is_suspended_to_resume_on_its_full_count(running, snapshot, on):
    policy = ChronusPolicy(ChronusConfig(profile_nodes=1))
    job = running("p", on("n2", 0, 1), expires=300.0, remaining=4000.0)
    job = job.__class__(
        **{**job.__dict__, "spec": job.spec.__class__(**{**job.spec.__dict__, "gpus": 4})}
    )
    decision = policy.decide(snapshot(300.0, active=[job], nodes={"n1": 8, "n2": 8}))
    assert suspended(decision) == ["p"] and decision.renew == ()


# --- leases: renewal and preemption order (§4.2) ---------------------------------------------


def test_at_an_slo_boundary_a_shorter_best_effort_job_takes_over(waiting, running, snapshot, on):
    policy = ChronusPolicy()
    long = running("long", on("n1", 0, 1, 2, 3), expires=1200.0, remaining=10_000.0)
    short = waiting("short", 4, remaining=600.0, submit_time=5.0)
    decision = policy.decide(snapshot(1200.0, active=[long], queued=[short], nodes={"n1": 4}))
    assert suspended(decision) == ["long"]
    assert decision.launch == ()  # its GPUs come back after the checkpoint


def test_between_boundaries_expired_best_effort_leases_are_renewed_to_the_next_slot(
    waiting, running, snapshot, on
):
    policy = ChronusPolicy()
    policy.decide(snapshot(0.0, nodes={"n1": 4}))
    long = running("long", on("n1", 0, 1, 2, 3), expires=300.0, remaining=10_000.0)
    short = waiting("short", 4, remaining=600.0, submit_time=5.0)
    decision = policy.decide(snapshot(300.0, active=[long], queued=[short], nodes={"n1": 4}))
    assert decision.suspend == () and decision.renew == (Renew("long", 300.0),)


def test_a_guaranteed_job_preempts_an_expired_best_effort_job_between_boundaries(
    waiting, running, snapshot, on
):
    policy = ChronusPolicy()
    be = running("be", on("n1", *range(8)), expires=300.0, remaining=10_000.0)
    slo = waiting("s", 8, job_class=STRICT, deadlines=(1200.0,), remaining=800.0)
    first = policy.decide(snapshot(0.0, active=[be], queued=[slo], nodes=ONE_NODE))
    assert first == Decision()  # be's lease runs to 300: nobody is touched
    second = policy.decide(snapshot(300.0, active=[be], queued=[slo], nodes=ONE_NODE))
    assert suspended(second) == ["be"] and second.launch == ()
    third = policy.decide(snapshot(304.0, queued=[slo], nodes=ONE_NODE))
    assert third.launch[0].job_id == "s" and third.launch[0].lease_s == 1200.0 - 304.0


def test_an_admitted_running_job_is_renewed_for_a_whole_slo_lease(running, snapshot, on):
    policy = ChronusPolicy()
    job = running(
        "s",
        on("n1", 0, 1),
        expires=1200.0,
        remaining=600.0,
        job_class=STRICT,
        deadlines=(2400.0,),
        submit_time=0.0,
    )
    decision = policy.decide(snapshot(1200.0, active=[job], nodes=ONE_NODE))
    assert decision.renew == (Renew("s", 1200.0),)


def test_best_effort_ranks_before_admitted_jobs_outside_their_planned_leases(waiting, snapshot):
    policy = ChronusPolicy()
    # "first" and "second" fill the plan of lease 0, so "later" is planned for lease 1; in
    # lease 0 it is opportunistic work, behind best-effort work (and rejected SLO jobs)
    queue = [
        waiting("first", 4, job_class=STRICT, deadlines=(1200.0,), remaining=600.0),
        waiting("second", 4, job_class=STRICT, deadlines=(1200.0,), remaining=600.0, submit_time=1),
        waiting("later", 4, job_class=STRICT, deadlines=(2400.0,), remaining=600.0, submit_time=2),
        waiting("be", 4, remaining=5000.0),
    ]
    snap = snapshot(0.0, queued=queue, nodes=ONE_NODE)
    decision = policy.decide(snap)
    assert [item.job_id for item in decision.launch] == ["first", "second"]
    assert policy._slo["later"].plan == [1]
    rank = {v.id: policy._rank(v, 0.0, 0, 4) for v in queue}  # 4 levels: 8-GPU nodes
    assert rank["first"] < rank["be"] < rank["later"]
    assert [rank[j][0] for j in ("first", "be", "later")] == [GUARANTEED, SPOT, SLACK]


# --- registry and invariants -----------------------------------------------------------------


def test_registered_as_chronus():
    assert make_policy("chronus").name == "chronus"


def test_config_rejects_leases_off_the_slot_grid():
    with pytest.raises(ValueError):
        ChronusConfig(lease_s=1000.0, slot_s=300.0)


def _fresh(snap: ClusterSnapshot) -> Decision:
    return ChronusPolicy().decide(snap)


def _outranks(snap: ClusterSnapshot, queued, victim) -> bool:
    policy = ChronusPolicy()
    policy.decide(snap)
    node = max(len(n.gpu_indices) for n in snap.nodes)
    levels = node.bit_length()
    k = policy._index
    return policy._rank(queued, snap.now, k, levels) < policy._rank(victim, snap.now, k, levels)


@pytest.mark.parametrize("seed", range(150))
def test_random_snapshots_keep_the_policy_invariants(seed, check_policy_properties):
    check_policy_properties(seed, _fresh, _outranks)
