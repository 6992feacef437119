"""Turning ONES' chosen schedule (GPUs and batch per job) into a Decision.

Every cycle the plan is carried out as far as free GPUs allow: a running job not in it is
suspended, one with fewer GPUs shrinks in place (keeping the GPUs of its fullest nodes), one
with the same count only changes its batch (in place, ONES §3.3.1) or renews, one with more
grows onto free GPUs once all it needs are free (its own nodes first), and a waiting job in it
launches (one node when one fits, else the nodes with the most free GPUs; an elastic job takes
what there is down to its minimum). Everything else renews, so leases never expire under ONES.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Renew,
    Resize,
    Suspend,
)
from controller.policy.slaq_resize import placement_for, take_gpus

REASON = "ones"


def held(job: JobView) -> int:
    return sum(len(p.gpu_indices) for p in job.placement)


def least(job: JobView) -> int:
    """The fewest GPUs a job runs on: its elastic minimum, else its request."""
    return job.spec.elastic.min_gpus if job.spec.elastic.enabled else job.spec.gpus


def carry_out(
    snapshot: ClusterSnapshot, plan: Mapping[str, tuple[int, int]], batches: Mapping[str, int]
) -> Decision:
    """``plan``: job id -> (GPUs, global batch; 0: keep); ``batches``: each job's current batch
    (absent: its batch is not the scheduler's)."""
    lease = snapshot.default_lease_s
    free = {n.id: list(n.free_gpu_indices) for n in snapshot.nodes}
    suspend, renew, resize, launch = [], [], [], []
    grows: list[tuple[JobView, int, int]] = []
    for job in snapshot.active:
        have = held(job)
        want, batch = plan.get(job.id, (0, 0))
        batch = batch if job.id in batches else 0
        if want <= 0:
            suspend.append(Suspend(job.id, REASON))
        elif want > have:
            grows.append((job, want, batch))
        elif want < have:
            keep = _keep(job, want)
            for p in job.placement:
                free[p.node_id].extend(g for g in p.gpu_indices if (p.node_id, g) not in keep)
            resize.append(Resize(job.id, placement_for(keep, job), lease, batch, REASON))
        elif batch and batch != batches[job.id]:
            resize.append(Resize(job.id, job.placement, lease, batch, REASON))
        else:
            renew.append(Renew(job.id, lease))
    for job, want, batch in grows:
        own = [(p.node_id, g) for p in job.placement for g in p.gpu_indices]
        extra = take_gpus(free, want - len(own), prefer={n for n, _ in own}, whole=True)
        if not extra and batch:  # not yet room for all: the batch of the GPUs it holds
            batch = min(batch, len(own) * max(1, batch // want))
        if extra:
            resize.append(Resize(job.id, placement_for(own + extra, job), lease, batch, REASON))
        elif batch and batch != batches.get(job.id):
            resize.append(Resize(job.id, job.placement, lease, batch, REASON))
        else:
            renew.append(Renew(job.id, lease))
    for job in snapshot.queued:
        want = plan.get(job.id, (0, 0))[0]
        if want <= 0:
            continue
        gpus = take_gpus(free, want, prefer=set(), whole=True)
        if not gpus and job.spec.elastic.enabled:
            room = sum(map(len, free.values()))
            if room >= least(job):
                gpus = take_gpus(free, room, prefer=set(), whole=True)
        if gpus:
            launch.append(Launch(job.id, placement_for(gpus, job), lease))
    return Decision(
        launch=tuple(launch), renew=tuple(renew), suspend=tuple(suspend), resize=tuple(resize)
    )


def _keep(job: JobView, want: int) -> list[tuple[str, int]]:
    by_node: dict[str, list[int]] = {}
    for p in job.placement:
        by_node.setdefault(p.node_id, []).extend(p.gpu_indices)
    ordered = sorted(by_node.items(), key=lambda kv: -len(kv[1]))
    return [(n, g) for n, gs in ordered for g in gs][:want]
