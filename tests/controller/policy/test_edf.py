"""EdfPolicy on hand-built snapshots, and randomized invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.edf import EdfPolicy, absolute_deadline, edf_key
from mlsched.model import JobClass, JobState

LEASE = 100.0
STRICT, SOFT, BE = JobClass.STRICT_SLO, JobClass.SOFT_SLO, JobClass.BEST_EFFORT


def decide(snap: ClusterSnapshot) -> Decision:
    return EdfPolicy().decide(snap)


# --- deadlines and order ---------------------------------------------------------------------


def test_absolute_deadline_is_submission_plus_the_first_deadline(waiting):
    strict = waiting("s", 1, job_class=STRICT, deadlines=(500.0,), submit_time=20.0)
    soft = waiting("f", 1, job_class=SOFT, deadlines=(300.0, 900.0), submit_time=20.0)
    assert absolute_deadline(strict) == 520.0
    assert absolute_deadline(soft) == 320.0
    assert absolute_deadline(waiting("b", 1, job_class=BE, submit_time=20.0)) is None


def test_slo_jobs_by_earliest_deadline_strict_before_soft_then_best_effort_fifo(
    on, waiting, snapshot, launched
):
    queue = [
        waiting("be-late", 1, job_class=BE, submit_time=1.0, queued_since=8.0),
        waiting("strict-200", 1, job_class=STRICT, deadlines=(180.0,), submit_time=20.0),
        waiting("soft-150", 1, job_class=SOFT, deadlines=(140.0, 400.0), submit_time=10.0),
        waiting("be-early", 1, job_class=BE, submit_time=2.0, queued_since=3.0),
        waiting("soft-200", 1, job_class=SOFT, deadlines=(199.0,), submit_time=1.0),
        waiting("strict-150", 1, job_class=STRICT, deadlines=(145.0,), submit_time=5.0),
    ]
    decision = decide(snapshot(30.0, queued=queue, nodes={"n1": 6}))
    # deadlines: strict-150 and soft-150 at 150 (strict first), strict-200 and soft-200 at 200
    # (strict first); best effort after every SLO job, FIFO by queue time (3.0 before 8.0).
    assert launched(decision) == [
        "strict-150",
        "soft-150",
        "strict-200",
        "soft-200",
        "be-early",
        "be-late",
    ]
    assert decision.launch[0] == Launch("strict-150", on("n1", 0), LEASE)


def test_a_best_effort_job_waits_behind_slo_jobs_however_old_it_is(waiting, snapshot, launched):
    queue = [
        waiting("be", 1, job_class=BE, submit_time=0.0),
        waiting("slo", 1, job_class=SOFT, deadlines=(1e6,), submit_time=9.0),
    ]
    assert launched(decide(snapshot(10.0, queued=queue, nodes={"n1": 1}))) == ["slo"]


def test_a_missed_deadline_still_counts_as_the_earliest(waiting, snapshot, launched):
    queue = [
        waiting("late", 1, job_class=STRICT, deadlines=(10.0,), submit_time=0.0),
        waiting("ok", 1, job_class=STRICT, deadlines=(500.0,), submit_time=0.0),
    ]
    assert launched(decide(snapshot(100.0, queued=queue, nodes={"n1": 1}))) == ["late"]


def test_key_classes(waiting):
    strict = waiting("s", 1, job_class=STRICT, deadlines=(50.0,), submit_time=5.0)
    soft = waiting("f", 1, job_class=SOFT, deadlines=(50.0,), submit_time=5.0)
    assert edf_key(strict)[:3] == (0, 55.0, 0)
    assert edf_key(soft)[:3] == (0, 55.0, 1)
    assert edf_key(waiting("b", 1, job_class=BE, submit_time=5.0))[:2] == (1, 0.0)


# --- preemption ------------------------------------------------------------------------------


def test_an_slo_job_preempts_an_expired_best_effort_job(on, waiting, running, snapshot):
    be = running("BE", on("n1", 0, 1), job_class=BE, expires=50.0)
    slo = running("S", on("n2", 0, 1), job_class=STRICT, deadlines=(1000.0,), expires=50.0)
    queue = [waiting("F", 2, job_class=SOFT, deadlines=(5000.0,))]
    decision = decide(snapshot(50.0, active=[be, slo], queued=queue))
    assert decision == Decision(
        renew=(Renew("S", LEASE),), suspend=(Suspend("BE", "lease expired; yields to F"),)
    )


def test_an_earlier_deadline_preempts_a_later_one_but_not_an_equal_one(
    on, waiting, running, snapshot
):
    later = running("L", on("n1", 0, 1), job_class=SOFT, deadlines=(900.0,), expires=50.0)
    equal = running("E", on("n2", 0, 1), job_class=SOFT, deadlines=(500.0,), expires=50.0)
    queue = [
        waiting("Q", 2, job_class=STRICT, deadlines=(450.0,), submit_time=50.0)
    ]  # deadline 500, like E's
    decision = decide(snapshot(50.0, active=[later, equal], queued=queue))
    assert decision == Decision(
        renew=(Renew("E", LEASE),), suspend=(Suspend("L", "lease expired; yields to Q"),)
    )


def test_a_later_deadline_never_preempts(on, waiting, running, snapshot):
    early = running("A", on("n1", 0, 1), job_class=STRICT, deadlines=(100.0,), expires=50.0)
    queue = [waiting("Q", 4, job_class=STRICT, deadlines=(900.0,), submit_time=10.0)]
    assert decide(snapshot(50.0, active=[early], queued=queue)) == Decision(
        renew=(Renew("A", LEASE),)
    )


def test_best_effort_jobs_never_preempt_each_other(on, waiting, running, snapshot):
    newer = running("N", on("n1", 0, 1), job_class=BE, expires=50.0, submit_time=40.0)
    queue = [waiting("old", 4, job_class=BE, submit_time=0.0)]
    assert decide(snapshot(50.0, active=[newer], queued=queue)) == Decision(
        renew=(Renew("N", LEASE),)
    )


def test_slo_job_does_not_touch_unexpired_jobs_and_backfill_continues(
    on, waiting, running, snapshot
):
    be = running("BE", on("n1", 0, 1), job_class=BE, expires=60.0)
    queue = [
        waiting("S", 4, job_class=STRICT, deadlines=(100.0,)),
        waiting("small", 1, job_class=BE, submit_time=1.0),
    ]
    decision = decide(snapshot(50.0, active=[be], queued=queue))
    assert decision == Decision(launch=(Launch("small", on("n2", 0), LEASE),))


def test_no_victim_while_released_gpus_suffice_and_an_oversize_job_blocks_nothing(
    on, waiting, running, snapshot
):
    x = replace(running("X", on("n1", 0, 1), job_class=BE, expires=0.0), state=JobState.SUSPENDING)
    y = running("Y", on("n2", 0, 1), job_class=BE, expires=50.0)
    queue = [
        waiting("huge", 5, job_class=STRICT, deadlines=(10.0,)),
        waiting("W", 2, job_class=STRICT, deadlines=(20.0,)),
    ]
    assert decide(snapshot(50.0, active=[y], queued=queue, busy=[x])) == Decision(
        renew=(Renew("Y", LEASE),)
    )


# --- randomized invariants -------------------------------------------------------------------

# Shared generator and checks: check_policy_properties in conftest.py.


@pytest.mark.parametrize("seed", range(300))
def test_random_snapshots_keep_the_invariants(seed: int, check_policy_properties):
    def outranks(snap: ClusterSnapshot, queued: JobView, victim: JobView) -> bool:
        return edf_key(queued)[:2] < edf_key(victim)[:2]

    check_policy_properties(seed, decide, outranks)
