"""Lease-boundary preemption, the rule MLF-H and MLF-RL share (MLFS §3.3.2's "preempted
tasks").

At a lease boundary a queued job still waiting, highest priority first, first reserves GPUs
already on their way back (suspending or cancelling jobs, leaving tasks) if they suffice and
displaces nobody; otherwise it may displace active jobs whose lease expired and whose priority
times ``ratio`` is below its own, lowest priority first, pruned to those needed (counted in
whole processes per node, exactly when ``place_job`` succeeds). It is placed by the queue
pass at a later cycle. ``ratio`` damps the time slicing Eq. 2's 1 / I term causes: a job that
has not run outranks every running one (``docs/mlfs.md``, *Behaviour and cost*).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence

from controller.policy.base import JobView
from controller.policy.common import GpuMap
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.moves import Mover


def lease_victims(
    waiting: Sequence[JobView],
    expired: Sequence[JobView],
    priority: Mapping[str, float],
    pool: HostPool,
    busy: Iterable[JobView],
    movers: Iterable[Mover],
    ratio: float,
) -> list[tuple[JobView, str]]:
    """The expired jobs that yield to ``waiting`` (in priority order), each with its reason
    (module docstring). ``priority`` holds every waiting and expired job's ``P``; the GPUs
    of ``busy`` jobs and of the movers' leaving tasks are on their way back."""
    candidates = sorted(expired, key=lambda v: (priority[v.id], v.id))  # lowest first
    ranks = [priority[v.id] * ratio for v in candidates]
    avail = GpuMap(pool.free_map())
    avail.give(p for v in busy for p in v.placement)
    avail.give(p for m in movers for p in m.view.placement if p.rank in m.ranks)
    victims: list[tuple[JobView, str]] = []
    chosen: set[str] = set()
    failed: dict[int, tuple[int, int]] = {}  # per process -> (map version, fewest tasks)
    for job in waiting:
        gpus, per_task = job.spec.gpus, job.spec.gpus_per_process
        placement = avail.place(gpus, per_task)
        if placement is not None:  # GPUs on their way back will do: wait for them
            avail.take(placement)
            continue
        cut = bisect_left(ranks, priority[job.id])  # P_victim * ratio < P_job
        eligible = [v for v in candidates[:cut] if v.id not in chosen]
        if not eligible:
            if avail.total == 0:
                break  # later jobs rank no higher: nothing to reserve, nobody to displace
            continue
        seen = failed.get(per_task)
        if seen is not None and seen[0] == avail.version and gpus // per_task >= seen[1]:
            continue
        picked = _victims_to_fit(avail, eligible, gpus, per_task)
        if picked is None:
            failed[per_task] = (avail.version, gpus // per_task)
            continue
        for v in picked:
            chosen.add(v.id)
            victims.append((v, f"lease expired; yields to higher-priority {job.id}"))
            avail.give(v.placement)
        placement = avail.place(gpus, per_task)
        if placement is not None:
            avail.take(placement)
    return victims


def _victims_to_fit(
    avail: GpuMap, candidates: Sequence[JobView], gpus: int, per_task: int
) -> list[JobView] | None:
    """Fewest candidates, lowest priority first, whose GPUs let the job fit; then each is
    dropped again, highest priority first, if the job still fits without it. Counted in whole
    ``per_task`` chunks per node, which is exactly when ``place_job`` succeeds."""
    need = gpus // per_task
    have = {n: len(ids) for n, ids in avail.map.items()}
    slots = avail.slots(per_task)
    picked: list[tuple[JobView, dict[str, int]]] = []
    for victim in candidates:
        held: dict[str, int] = {}
        for p in victim.placement:
            if p.node_id in have:
                held[p.node_id] = held.get(p.node_id, 0) + len(p.gpu_indices)
        for node_id, count in held.items():
            before = have[node_id] // per_task
            have[node_id] += count
            slots += have[node_id] // per_task - before
        picked.append((victim, held))
        if slots >= need:
            break
    else:
        return None
    for item in list(reversed(picked)):
        loss = sum(have[n] // per_task - (have[n] - c) // per_task for n, c in item[1].items())
        if slots - loss >= need:
            slots -= loss
            for node_id, count in item[1].items():
                have[node_id] -= count
            picked.remove(item)
    return [victim for victim, _ in picked]
