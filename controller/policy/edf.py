"""Earliest deadline first (EDF) for SLO jobs, best-effort jobs after them.

Source: Liu and Layland, "Scheduling Algorithms for Multiprogramming in a Hard-Real-Time
Environment", JACM 1973 (the deadline-driven scheduling algorithm); deadlines and job classes
as in UniSched (strict SLO, soft SLO, best effort; ``mlsched.model.Deadline``).

Rules: a job with a deadline (strict or soft SLO class with at least one deadline) has the
absolute deadline ``submit_time + deadlines[0].seconds_after_submit`` (the first, i.e. earliest,
deadline: for a soft job the one with the full reward). SLO jobs come first, earliest deadline
first; at equal deadlines strict before soft, then submission time, then id. Best-effort jobs
(and any job without a deadline) come after all SLO jobs, in FIFO queue order.

Faithful: the EDF order among deadline jobs, preemptive in favour of an earlier deadline.
Simplified:

* Preemption only at lease boundaries, as every mlsched policy: a running job is suspended only
  when its lease has expired and a queued job of a strictly better class needs its GPUs (see
  :mod:`controller.policy.common`); all other expired leases are renewed.
* Preemption classes: an SLO job preempts best-effort jobs and SLO jobs with a strictly later
  deadline. Ties (same deadline, strict vs soft) and the FIFO order among best-effort jobs only
  decide who starts first; best-effort jobs never preempt each other.
* No admission control and no value awareness: a job past its deadline keeps it (classic EDF,
  so a hopeless strict job still goes first), later soft deadlines and rewards are ignored, and
  the remaining time is not used to test feasibility (UniSched's reward-driven scheduling is
  out of scope here).
* Backfilling: a job that does not fit is skipped and lower-ranked jobs may start; a job that
  cannot fit even on the empty cluster never blocks anything.

Complexity: O((q + e) log(q + e)) for q queued and e expired jobs, plus the shared loop's
near-constant per-job cost (see :mod:`controller.policy.common`).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.common import Key, schedule_by_priority
from mlsched.model import JobClass

SLO, BEST_EFFORT = 0, 1
_CLASS_ORDER = {JobClass.STRICT_SLO: 0, JobClass.SOFT_SLO: 1, JobClass.BEST_EFFORT: 2}


def absolute_deadline(job: JobView) -> float | None:
    """``submit_time`` plus the first deadline, for SLO jobs that have one; else None."""
    if job.job_class is JobClass.BEST_EFFORT or not job.spec.deadlines:
        return None
    return job.submit_time + job.spec.deadlines[0].seconds_after_submit


def edf_key(job: JobView) -> Key:
    """(SLO?, deadline, then tie-breaks); the first two decide preemption."""
    deadline = absolute_deadline(job)
    if deadline is None:
        return (BEST_EFFORT, 0.0, 0, job.queued_since, job.submit_time, job.id)
    return (SLO, deadline, _CLASS_ORDER[job.job_class], job.submit_time, job.id)


@dataclass
class EdfPolicy:
    lease_s: float | None = None  # None: the controller's default lease
    name: str = "edf"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        lease = self.lease_s or snapshot.default_lease_s
        return schedule_by_priority(snapshot, edf_key, lease_s=lease, preempt_depth=2)
