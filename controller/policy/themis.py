"""Themis: finish-time fairness, allocated greedily to the worst-treated jobs first.

Source: Mahajan et al., "Themis: Fair and Efficient GPU Cluster Scheduling", NSDI 2020.
Themis' fairness metric is the finish-time fair ratio rho = T_shared / T_ideal: the job's
finish time in the shared cluster over its finish time running alone on a 1/N share of the
cluster (N contending jobs). Jobs with rho > 1 are worse off than under an equal share; Themis
leases GPUs and, when leases expire, offers them to the jobs with the largest rho.

Rules (mlsched's reading, one job per Themis "app"):

* ``T_shared = (now - submit_time) + remaining``: time so far plus the remaining time at the
  job's current allocation (``estimated_remaining_s``; for a waiting job: if it started now on
  the GPUs it asks for).
* ``T_ideal = (executed + remaining) x max(1, gpus x N / C)``: its total run time at its
  requested allocation (executed = ``attained_gpu_s / gpus``), slowed down when its gang size
  is larger than the equal share C / N of the cluster's C GPUs (N = queued + active jobs).
* Unknown remaining time (live, before the first progress report): rho from attained service
  only, ``(now - submit_time) / (executed x max(1, gpus x N / C))``; a job with no service yet
  has T_ideal = 0 and rho = infinity (it has been treated infinitely unfairly so far). This
  over-estimates rho against jobs with a known remaining time, so new jobs are favoured.
* Jobs are ranked by rho, largest first (ties by FIFO queue order); a queued job preempts an
  expired one only if its rho is strictly larger. A running job's rho stays constant while it
  runs at full speed and a waiting job's grows, so leases time-share contended GPUs towards
  equal rho.

Simplified:

* No partial-allocation auction, no bids and no fairness knob f: instead of offering the GPUs
  of expired leases to the 1 - f fraction of apps with the worst rho and running Themis'
  partial-allocation mechanism among their bids (with leftovers to the rest), GPUs go greedily
  in rho order, each job taking its whole gang (DL jobs here are rigid: all requested GPUs or
  none). There are no multi-job apps (hyper-parameter searches) and no placement-sensitivity
  bids; placement is mlsched's consolidation-first ``place_job``.
* Preemption only at lease boundaries, as every mlsched policy: a running job is suspended only
  when its lease has expired and a queued job with a strictly larger rho needs its GPUs (see
  :mod:`controller.policy.common`); all other expired leases are renewed. Backfilling: a job
  that does not fit is skipped and jobs behind it may start; one that cannot fit even on the
  empty cluster never blocks anything.

Complexity: O((q + e) log(q + e)) for q queued and e expired jobs, plus the shared loop's
near-constant per-job cost (see :mod:`controller.policy.common`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.common import Key, schedule_by_priority


def finish_time_fairness(job: JobView, now: float, contenders: int, cluster_gpus: int) -> float:
    """rho = T_shared / T_ideal (see the module docstring); ``math.inf`` when T_ideal is 0."""
    gpus = max(job.gpus, 1)
    slowdown = max(1.0, gpus * max(contenders, 1) / cluster_gpus) if cluster_gpus > 0 else 1.0
    executed = job.attained_gpu_s / gpus
    remaining = job.estimated_remaining_s or 0.0
    t_shared = max(0.0, now - job.submit_time) + remaining
    t_ideal = (executed + remaining) * slowdown
    if t_ideal <= 0:
        return math.inf
    return t_shared / t_ideal


@dataclass
class ThemisPolicy:
    lease_s: float | None = None  # None: the controller's default lease
    name: str = "themis"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        lease = self.lease_s or snapshot.default_lease_s
        now = snapshot.now
        contenders = len(snapshot.queued) + len(snapshot.active)
        cluster_gpus = sum(len(n.gpu_indices) for n in snapshot.nodes)

        def key(job: JobView) -> Key:
            rho = finish_time_fairness(job, now, contenders, cluster_gpus)
            return (-rho, job.queued_since, job.submit_time, job.id)

        return schedule_by_priority(snapshot, key, lease_s=lease, preempt_depth=1)
