"""``fair``: work-conserving equal shares of GPUs among jobs (SLAQ's comparator, §6: "resource
fairness schedulers"; issue 14).

At each lease boundary the GPUs of the jobs at the boundary plus the free ones go round-robin,
one at a time, to those jobs and the queue (in queue order): every job first gets its
``min_gpus`` while they last, then each round gives one more GPU to every job below its
maximum, until none is left or every job is at its maximum. Rigid jobs get their request.
Jobs whose lease runs keep their GPUs until their boundary.
"""

from __future__ import annotations

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.slaq_resize import bounds, held, movable, plan


class FairPolicy:
    name = "fair"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        expired, capacity = movable(snapshot)
        order = expired + list(snapshot.queued)
        targets = share(order, capacity)
        at_boundary = {j.id for j in expired}
        for job in snapshot.active:
            if job.id not in at_boundary:
                targets[job.id] = held(job)
        return plan(snapshot, targets, order, self.name)


def share(jobs: list[JobView], capacity: int) -> dict[str, int]:
    alloc: dict[str, int] = {}
    for job in jobs:
        low = bounds(job)[0]
        if job.state.active or low <= capacity:
            alloc[job.id] = low
            capacity -= low
    growing = [j for j in jobs if j.id in alloc and alloc[j.id] < bounds(j)[1]]
    while capacity > 0 and growing:
        for job in list(growing):
            if capacity <= 0:
                break
            alloc[job.id] += 1
            capacity -= 1
            if alloc[job.id] >= bounds(job)[1]:
                growing.remove(job)
    return alloc
