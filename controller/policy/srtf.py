"""Shortest remaining time first (SRTF), preemptive at lease boundaries.

Source: the preemptive shortest-remaining-processing-time discipline (Schrage, "A proof of the
optimality of the shortest remaining processing time discipline", Operations Research, 1968),
as used for DL jobs as the clairvoyant reference by Tiresias (Gu et al., NSDI 2019; its public
simulator's ``shortest`` scheduler): the job with the least remaining run time runs first, and
a running job is preempted when a queued job has less time left.

Rules: jobs are ordered by ``estimated_remaining_s`` (seconds at the job's own allocation), the
smallest first; jobs whose remaining time is unknown (live, before the first progress report)
come after every job with a known one, in FIFO queue order (when they last joined the queue,
then submission time, then id); equal remaining times are also broken by FIFO order.

Faithful: the ordering, and preemption of a running job in favour of a strictly shorter one.
Simplified:

* Preemption only at lease boundaries, as every mlsched policy: a running job is suspended only
  when its lease has expired and a queued job with strictly less remaining time needs its GPUs
  (see :mod:`controller.policy.common`); all other expired leases are renewed.
* A job with unknown remaining time never preempts anyone (there is no evidence it is shorter),
  and jobs with unknown remaining time never preempt each other: the FIFO order among them only
  decides who starts first. A known-remaining job may preempt an unknown one.
* Remaining *time*, not remaining GPU-time (Tiresias' ``shortest-gpu`` variant is not modelled).
* Backfilling: a job that does not fit is skipped and shorter-ranked jobs behind it may start; a
  job that cannot fit even on the empty cluster never blocks anything.

Complexity: O((q + e) log(q + e)) for q queued and e expired jobs, plus the shared loop's
near-constant per-job cost (see :mod:`controller.policy.common`).
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.common import Key, schedule_by_priority

KNOWN, UNKNOWN = 0, 1


def srtf_key(job: JobView) -> Key:
    """(known?, remaining seconds, FIFO tie-breaks); the first two decide preemption."""
    remaining = job.estimated_remaining_s
    if remaining is None:
        return (UNKNOWN, 0.0, job.queued_since, job.submit_time, job.id)
    return (KNOWN, float(remaining), job.queued_since, job.submit_time, job.id)


@dataclass
class SrtfPolicy:
    lease_s: float | None = None  # None: the controller's default lease
    name: str = "srtf"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        lease = self.lease_s or snapshot.default_lease_s
        return schedule_by_priority(snapshot, srtf_key, lease_s=lease, preempt_depth=2)
