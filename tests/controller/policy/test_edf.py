"""EdfPolicy on hand-built snapshots, and randomized invariants."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Renew,
    Suspend,
)
from controller.policy.edf import EdfPolicy, absolute_deadline, edf_key
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState

LEASE = 100.0
STRICT, SOFT, BE = JobClass.STRICT_SLO, JobClass.SOFT_SLO, JobClass.BEST_EFFORT


def spec(gpus: int, job_class: JobClass, after: tuple[float, ...]) -> JobSpec:
    deadlines = tuple(Deadline(a, 1.0 / (i + 1)) for i, a in enumerate(after))
    return JobSpec(
        "job", ("python", "t.py"), gpus, IterationStop(10), job_class=job_class, deadlines=deadlines
    )


def on(node: str, *gpus: int) -> tuple[TaskPlacement, ...]:
    """One task per GPU, all on ``node``."""
    return tuple(TaskPlacement(rank, node, (g,)) for rank, g in enumerate(gpus))


def waiting(
    job_id: str,
    gpus: int,
    job_class: JobClass = BE,
    *after: float,
    submit_time: float = 0.0,
    queued_since: float | None = None,
) -> JobView:
    """``after``: the deadlines, seconds after submission."""
    return JobView(
        id=job_id,
        user="alice",
        spec=spec(gpus, job_class, after),
        state=JobState.PENDING,
        submit_time=submit_time,
        queued_since=submit_time if queued_since is None else queued_since,
        attempt=0,
        suspensions=0,
    )


def running(
    job_id: str,
    placement: tuple[TaskPlacement, ...],
    job_class: JobClass = BE,
    *after: float,
    expires: float,
    submit_time: float = 0.0,
) -> JobView:
    return JobView(
        id=job_id,
        user="alice",
        spec=spec(sum(len(p.gpu_indices) for p in placement), job_class, after),
        state=JobState.RUNNING,
        submit_time=submit_time,
        queued_since=submit_time,
        attempt=1,
        suspensions=0,
        lease_expires_at=expires,
        placement=placement,
        running_since=submit_time,
    )


def snapshot(
    now: float,
    active: Iterable[JobView] = (),
    queued: Iterable[JobView] = (),
    busy: Iterable[JobView] = (),
    nodes: dict[str, int] | None = None,
) -> ClusterSnapshot:
    """``nodes``: GPUs per node (default 2 nodes x 2 GPUs); free = not held by active/busy."""
    nodes = nodes if nodes is not None else {"n1": 2, "n2": 2}
    return ClusterSnapshot.of(now, nodes, active, queued, busy, default_lease_s=LEASE)


def decide(snap: ClusterSnapshot) -> Decision:
    return EdfPolicy().decide(snap)


def launched(decision: Decision) -> list[str]:
    return [item.job_id for item in decision.launch]


# --- deadlines and order ---------------------------------------------------------------------


def test_absolute_deadline_is_submission_plus_the_first_deadline():
    assert absolute_deadline(waiting("s", 1, STRICT, 500.0, submit_time=20.0)) == 520.0
    assert absolute_deadline(waiting("f", 1, SOFT, 300.0, 900.0, submit_time=20.0)) == 320.0
    assert absolute_deadline(waiting("b", 1, BE, submit_time=20.0)) is None


def test_slo_jobs_by_earliest_deadline_strict_before_soft_then_best_effort_fifo():
    queue = [
        waiting("be-late", 1, BE, submit_time=1.0, queued_since=8.0),
        waiting("strict-200", 1, STRICT, 180.0, submit_time=20.0),
        waiting("soft-150", 1, SOFT, 140.0, 400.0, submit_time=10.0),
        waiting("be-early", 1, BE, submit_time=2.0, queued_since=3.0),
        waiting("soft-200", 1, SOFT, 199.0, submit_time=1.0),
        waiting("strict-150", 1, STRICT, 145.0, submit_time=5.0),
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


def test_a_best_effort_job_waits_behind_slo_jobs_however_old_it_is():
    queue = [waiting("be", 1, BE, submit_time=0.0), waiting("slo", 1, SOFT, 1e6, submit_time=9.0)]
    assert launched(decide(snapshot(10.0, queued=queue, nodes={"n1": 1}))) == ["slo"]


def test_a_missed_deadline_still_counts_as_the_earliest():
    queue = [
        waiting("late", 1, STRICT, 10.0, submit_time=0.0),
        waiting("ok", 1, STRICT, 500.0, submit_time=0.0),
    ]
    assert launched(decide(snapshot(100.0, queued=queue, nodes={"n1": 1}))) == ["late"]


def test_key_classes():
    assert edf_key(waiting("s", 1, STRICT, 50.0, submit_time=5.0))[:3] == (0, 55.0, 0)
    assert edf_key(waiting("f", 1, SOFT, 50.0, submit_time=5.0))[:3] == (0, 55.0, 1)
    assert edf_key(waiting("b", 1, BE, submit_time=5.0))[:2] == (1, 0.0)


# --- preemption ------------------------------------------------------------------------------


def test_an_slo_job_preempts_an_expired_best_effort_job():
    be = running("BE", on("n1", 0, 1), BE, expires=50.0)
    slo = running("S", on("n2", 0, 1), STRICT, 1000.0, expires=50.0)
    decision = decide(snapshot(50.0, active=[be, slo], queued=[waiting("F", 2, SOFT, 5000.0)]))
    assert decision == Decision(
        renew=(Renew("S", LEASE),), suspend=(Suspend("BE", "lease expired; yields to F"),)
    )


def test_an_earlier_deadline_preempts_a_later_one_but_not_an_equal_one():
    later = running("L", on("n1", 0, 1), SOFT, 900.0, expires=50.0)
    equal = running("E", on("n2", 0, 1), SOFT, 500.0, expires=50.0)
    queue = [waiting("Q", 2, STRICT, 450.0, submit_time=50.0)]  # deadline 500, like E's
    decision = decide(snapshot(50.0, active=[later, equal], queued=queue))
    assert decision == Decision(
        renew=(Renew("E", LEASE),), suspend=(Suspend("L", "lease expired; yields to Q"),)
    )


def test_a_later_deadline_never_preempts():
    early = running("A", on("n1", 0, 1), STRICT, 100.0, expires=50.0)
    queue = [waiting("Q", 4, STRICT, 900.0, submit_time=10.0)]
    assert decide(snapshot(50.0, active=[early], queued=queue)) == Decision(
        renew=(Renew("A", LEASE),)
    )


def test_best_effort_jobs_never_preempt_each_other():
    newer = running("N", on("n1", 0, 1), BE, expires=50.0, submit_time=40.0)
    queue = [waiting("old", 4, BE, submit_time=0.0)]
    assert decide(snapshot(50.0, active=[newer], queued=queue)) == Decision(
        renew=(Renew("N", LEASE),)
    )


def test_slo_job_does_not_touch_unexpired_jobs_and_backfill_continues():
    be = running("BE", on("n1", 0, 1), BE, expires=60.0)
    queue = [waiting("S", 4, STRICT, 100.0), waiting("small", 1, BE, submit_time=1.0)]
    decision = decide(snapshot(50.0, active=[be], queued=queue))
    assert decision == Decision(launch=(Launch("small", on("n2", 0), LEASE),))


def test_no_victim_while_released_gpus_suffice_and_an_oversize_job_blocks_nothing():
    x = replace(running("X", on("n1", 0, 1), BE, expires=0.0), state=JobState.SUSPENDING)
    y = running("Y", on("n2", 0, 1), BE, expires=50.0)
    queue = [waiting("huge", 5, STRICT, 10.0), waiting("W", 2, STRICT, 20.0)]
    assert decide(snapshot(50.0, active=[y], queued=queue, busy=[x])) == Decision(
        renew=(Renew("Y", LEASE),)
    )


def test_registry_builds_edf():
    policy = make_policy("edf")
    assert isinstance(policy, EdfPolicy) and policy.name == "edf"


# --- randomized invariants -------------------------------------------------------------------

# Shared generator and checks: check_policy_properties in conftest.py.


@pytest.mark.parametrize("seed", range(300))
def test_random_snapshots_keep_the_invariants(seed: int, check_policy_properties):
    def outranks(snap: ClusterSnapshot, queued: JobView, victim: JobView) -> bool:
        return edf_key(queued)[:2] < edf_key(victim)[:2]

    check_policy_properties(seed, decide, outranks)
