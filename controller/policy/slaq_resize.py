"""Turning per-job GPU targets into a Decision, shared by ``slaq`` and ``fair`` (issue 14).

Allocations change only at lease boundaries: a job whose lease has expired is renewed at its
target, or resized to it (shrinks first, so their GPUs serve the grows); a job whose lease runs
keeps its GPUs. Queued jobs with a target are launched on free GPUs (one node when one fits,
else the nodes with the most free GPUs). A rigid job's target is its request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Resize


def bounds(job: JobView) -> tuple[int, int]:
    """The GPUs a job may hold: its elastic range, else exactly its request."""
    elastic = job.spec.elastic
    if elastic.enabled:
        return elastic.min_gpus, max(elastic.max_gpus, job.spec.gpus)
    return job.spec.gpus, job.spec.gpus


def held(job: JobView) -> int:
    return sum(len(p.gpu_indices) for p in job.placement)


def movable(snapshot: ClusterSnapshot) -> tuple[list[JobView], int]:
    """Jobs at a lease boundary (expired leases) and the GPUs open to allocation: theirs plus
    the free ones."""
    expired = list(snapshot.expired())
    free = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
    return expired, free + sum(held(j) for j in expired)


def in_place_room(snapshot: ClusterSnapshot) -> dict[str, int]:
    """For each job at a lease boundary whose ranks are all on one node: the most GPUs it may
    hold there (its own plus the node's free ones), the reach of an in-place regroup. Jobs of
    one node each count the same free GPUs (a grow past what is left is a restart)."""
    free = {n.id: len(n.free_gpu_indices) for n in snapshot.nodes}
    room = {}
    for job in snapshot.expired():
        nodes = {p.node_id for p in job.placement}
        if len(nodes) == 1:
            room[job.id] = held(job) + free.get(next(iter(nodes)), 0)
    return room


def plan(
    snapshot: ClusterSnapshot,
    targets: Mapping[str, int],
    order: Sequence[JobView],
    reason: str,
    reasons: Mapping[str, str] | None = None,
) -> Decision:
    """The decision that moves expired jobs to their ``targets`` and launches queued ones
    (module docstring); a resize's reason is ``reasons[job id]`` when given, else ``reason``."""
    why = dict(reasons or {})
    lease = snapshot.default_lease_s
    free = {n.id: list(n.free_gpu_indices) for n in snapshot.nodes}
    renew, resize, launch = [], [], []
    grows: list[tuple[JobView, int]] = []
    for job in snapshot.expired():
        have, want = held(job), targets.get(job.id, held(job))
        if want >= have:
            grows.append((job, want))
            continue
        keep = _keep(job, want)
        for p in job.placement:
            free[p.node_id].extend(g for g in p.gpu_indices if (p.node_id, g) not in keep)
        resize.append(
            Resize(job.id, placement_for(keep, job), lease, reason=why.get(job.id, reason))
        )
    for job, want in grows:
        have = held(job)
        own = [(p.node_id, g) for p in job.placement for g in p.gpu_indices]
        nodes = {n for n, _ in own}
        extra = take_gpus(free, want - have, prefer=nodes)
        if extra:
            placement = placement_for(own + extra, job)
            resize.append(Resize(job.id, placement, lease, reason=why.get(job.id, reason)))
        else:
            renew.append(Renew(job.id, lease))
    for job in order:
        want = targets.get(job.id, 0)
        if job.state.active or want <= 0:
            continue
        gpus = take_gpus(free, want, prefer=set(), whole=True)
        if gpus:
            launch.append(Launch(job.id, placement_for(gpus, job), lease))
    return Decision(launch=tuple(launch), renew=tuple(renew), resize=tuple(resize))


def _keep(job: JobView, want: int) -> list[tuple[str, int]]:
    """The GPUs a shrinking job keeps: from the nodes where it holds the most."""
    per_node = sorted(job.placement, key=lambda p: -len(p.gpu_indices))
    by_node: dict[str, list[int]] = {}
    for p in per_node:
        by_node.setdefault(p.node_id, []).extend(p.gpu_indices)
    ordered = sorted(by_node.items(), key=lambda kv: -len(kv[1]))
    return [(n, g) for n, gs in ordered for g in gs][:want]


def take_gpus(
    free: dict[str, list[int]], count: int, prefer: set[str], whole: bool = False
) -> list[tuple[str, int]]:
    """Take ``count`` free GPUs (``whole``: all or none; else as many as there are, up to it):
    the preferred nodes first, then one node that fits (the fullest), then the emptiest."""
    if count <= 0:
        return []
    if whole and sum(map(len, free.values())) < count:
        return []
    fits = [n for n, gs in free.items() if len(gs) >= count and n not in prefer]
    order = [n for n in free if n in prefer]
    order += sorted(fits, key=lambda n: len(free[n]))[:1]
    order += sorted((n for n in free if n not in order), key=lambda n: -len(free[n]))
    taken: list[tuple[str, int]] = []
    for node in order:
        while free[node] and len(taken) < count:
            taken.append((node, free[node].pop(0)))
    return taken


def placement_for(gpus: Sequence[tuple[str, int]], job: JobView) -> tuple[TaskPlacement, ...]:
    """One task per ``gpus_per_process`` GPUs of one node, ranked in order."""
    per = job.spec.gpus_per_process
    by_node: dict[str, list[int]] = {}
    for node, g in gpus:
        by_node.setdefault(node, []).append(g)
    out: list[TaskPlacement] = []
    for node, gs in by_node.items():
        for i in range(0, len(gs) - len(gs) % per, per):
            out.append(TaskPlacement(len(out), node, tuple(sorted(gs[i : i + per]))))
    return tuple(out)
