"""Turning a GPU count into concrete nodes and GPU indices (pure functions)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskPlacement:
    """Where one task (rank) of a job runs."""

    rank: int
    node_id: str
    gpu_indices: tuple[int, ...]


def place_job(
    free: Mapping[str, tuple[int, ...]], gpus: int, gpus_per_process: int
) -> tuple[TaskPlacement, ...] | None:
    """Place ``gpus // gpus_per_process`` tasks on free GPUs, or ``None`` when they don't fit.

    Consolidation first: the best-fitting single node (fewest free GPUs that still fit), as
    consolidated placement trains fastest (UniSched Eq. 2: no inter-node cost). Otherwise the
    job spans the fewest nodes, taking the emptiest nodes first; each task gets whole
    ``gpus_per_process`` chunks on one node. Lower GPU indices first, nodes tie-broken by id.
    """
    slots = {n: len(ids) // gpus_per_process for n, ids in free.items()}
    tasks_needed = gpus // gpus_per_process
    fitting = sorted((len(free[n]), n) for n, s in slots.items() if s >= tasks_needed)
    if fitting:
        chosen = [(fitting[0][1], tasks_needed)]
    else:
        chosen = []
        remaining = tasks_needed
        for node_id, count in sorted(slots.items(), key=lambda kv: (-kv[1], kv[0])):
            if remaining == 0 or count == 0:
                break
            take = min(count, remaining)
            chosen.append((node_id, take))
            remaining -= take
        if remaining:
            return None
    placements = []
    rank = 0
    for node_id, count in chosen:
        ids = sorted(free[node_id])
        for local in range(count):
            chunk = ids[local * gpus_per_process : (local + 1) * gpus_per_process]
            placements.append(TaskPlacement(rank, node_id, tuple(chunk)))
            rank += 1
    return tuple(placements)


def without(
    free: Mapping[str, tuple[int, ...]], placements: tuple[TaskPlacement, ...]
) -> dict[str, tuple[int, ...]]:
    """The free map after ``placements`` took their GPUs."""
    taken: dict[str, set[int]] = {}
    for p in placements:
        taken.setdefault(p.node_id, set()).update(p.gpu_indices)
    return {n: tuple(i for i in ids if i not in taken.get(n, ())) for n, ids in free.items()}


def with_released(
    free: Mapping[str, tuple[int, ...]], placements: tuple[TaskPlacement, ...]
) -> dict[str, tuple[int, ...]]:
    """The free map after ``placements`` gave their GPUs back."""
    result = {n: set(ids) for n, ids in free.items()}
    for p in placements:
        if p.node_id in result:
            result[p.node_id].update(p.gpu_indices)
    return {n: tuple(sorted(ids)) for n, ids in result.items()}
