"""FIFO with leases: the first policy, and the simplest sensible one.

Jobs are served in the order they joined the queue (submission, or suspension for a job that
yielded its GPUs), strictly: when the head of the queue does not fit, nothing behind it starts.
Leases add time slicing (the round-robin reading of FIFO under leases, as in Gavel's and
Chronus' lease iterators): when a running job's lease expires while the head of the queue is
waiting, and releasing running jobs (the longest-running first, jobs that have not trained yet
last) would make the head fit, those jobs are suspended at their lease boundary and rejoin the
queue at its tail.

Two rules keep the slicing from starving anyone:

- A lease counts training time: a job yields only once it has trained for a whole lease in its
  current attempt (``JobView.training_since``), so a job whose start-up (imports, process-group
  set-up, restoring a checkpoint) outlasts the lease is not suspended before its first step,
  again and again.
- Victims yield together: when the head needs the GPUs of several jobs whose leases end at
  different times, the expired ones are renewed only until the last of them may yield, so
  their leases line up instead of drifting past each other forever.

With ``time_slicing=False`` (``fifo``) leases are always renewed: plain non-preemptive FIFO;
``fifo-lease`` is the time-sliced variant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.placement import place_job, with_released, without
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend


@dataclass
class FifoPolicy:
    time_slicing: bool = True
    lease_s: float | None = None  # None: the controller's default lease
    name: str = "fifo-lease"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        lease = self.lease_s or snapshot.default_lease_s
        free = snapshot.free_gpus()
        whole_cluster = {n.id: n.gpu_indices for n in snapshot.nodes}
        being_released = tuple(p for view in snapshot.busy for p in view.placement)
        expired = snapshot.expired()
        now = snapshot.now
        # Victims: the longest-running first; jobs that have not trained yet last.
        by_turn = sorted(
            snapshot.active,
            key=lambda j: (j.training_since is None, j.running_since or 0.0, j.submit_time, j.id),
        )
        launches: list[Launch] = []
        suspends: list[Suspend] = []
        leases = {j.id: lease for j in expired}
        for job in snapshot.queued:  # already in queue order
            if place_job(whole_cluster, job.gpus, job.spec.gpus_per_process) is None:
                continue  # can never run on this cluster; must not block the queue
            placement = place_job(free, job.gpus, job.spec.gpus_per_process)
            if placement is not None:
                launches.append(Launch(job.id, placement, lease))
                free = without(free, placement)
                continue
            soon_free = with_released(free, being_released)
            if place_job(soon_free, job.gpus, job.spec.gpus_per_process) is not None:
                break  # GPUs being released right now will do: suspend nobody else
            if self.time_slicing:
                victims = _victims_to_fit(soon_free, by_turn, job)
                ready = max((_may_yield_at(v, lease) for v in victims), default=math.inf)
                if ready <= now:
                    suspends.extend(
                        Suspend(v.id, f"lease expired; yields to {job.id}") for v in victims
                    )
                elif math.isfinite(ready):  # line the victims' leases up at ``ready``
                    for v in victims:
                        if v.id in leases:
                            leases[v.id] = ready - now
            break  # strict FIFO: the head waits and nothing overtakes it
        suspended = {s.job_id for s in suspends}
        renewals = tuple(Renew(j.id, leases[j.id]) for j in expired if j.id not in suspended)
        return Decision(launch=tuple(launches), renew=renewals, suspend=tuple(suspends))


def _may_yield_at(job: JobView, lease_s: float) -> float:
    """When the job's lease has ended and it has trained a whole lease in this attempt
    (infinity while it has not trained at all: when that ends is unknown)."""
    if job.training_since is None:
        return math.inf
    return max(job.lease_expires_at or 0.0, job.training_since + lease_s)


def _victims_to_fit(
    free: dict[str, tuple[int, ...]], running: list[JobView], job: JobView
) -> list[JobView]:
    """The shortest prefix of ``running`` whose release lets ``job`` fit ([] if none does)."""
    chosen: list[JobView] = []
    for victim in running:
        chosen.append(victim)
        free = with_released(free, victim.placement)
        if place_job(free, job.gpus, job.spec.gpus_per_process) is not None:
            return chosen
    return []
