"""FIFO with leases: the first policy, and the simplest sensible one.

Jobs are served in the order they joined the queue (submission, or suspension for a job that
yielded its GPUs), strictly: when the head of the queue does not fit, nothing behind it starts.
Leases add time slicing (the round-robin reading of FIFO under leases, as in Gavel's and
Chronus' lease iterators): when a running job's lease expires while the head of the queue is
waiting, and releasing expired jobs (the longest-running first) would make the head fit, those
jobs are suspended at their lease boundary and rejoin the queue at its tail. With
``time_slicing=False`` (``fifo``) leases are always renewed: plain non-preemptive FIFO;
``fifo-lease`` is the time-sliced variant.
"""

from __future__ import annotations

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
        expired = sorted(
            snapshot.expired(), key=lambda j: (j.running_since or 0.0, j.submit_time, j.id)
        )
        launches: list[Launch] = []
        suspends: list[Suspend] = []
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
                victims = _victims_to_fit(soon_free, expired, job)
                suspends.extend(
                    Suspend(v.id, f"lease expired; yields to {job.id}") for v in victims
                )
            break  # strict FIFO: the head waits and nothing overtakes it
        suspended = {s.job_id for s in suspends}
        renewals = tuple(Renew(j.id, lease) for j in expired if j.id not in suspended)
        return Decision(launch=tuple(launches), renew=renewals, suspend=tuple(suspends))


def _victims_to_fit(
    free: dict[str, tuple[int, ...]], expired: list[JobView], job: JobView
) -> list[JobView]:
    """The fewest expired jobs, longest-running first, whose release lets ``job`` fit."""
    chosen: list[JobView] = []
    for victim in expired:
        chosen.append(victim)
        free = with_released(free, victim.placement)
        if place_job(free, job.gpus, job.spec.gpus_per_process) is not None:
            return chosen
    return []
