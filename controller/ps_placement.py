"""Placing a parameter-server job's two roles (issue 16; pure functions).

A PS job's attempt runs ``w`` workers and ``p`` servers as one gang: ranks ``0..w-1`` are the
workers, each on ``gpus_per_process`` GPUs of one node (rank 0 is the chief, which reports
progress and writes checkpoints), ranks ``w..w+p-1`` the servers, CPU processes holding no GPU.
Both roles take their CPU and memory vectors (``spec.ps.worker`` / ``server``) from the nodes'
headroom; GPUs are placed as for any job (:func:`controller.placement.place_job`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controller.placement import TaskPlacement, place_job
from mlsched.model import JobSpec, PsSpec, RoleResources

Headroom = dict[str, tuple[float, float]]  # node -> (CPU cores, GB memory) still free
_EPS = 1e-9


def ps_workers(spec: JobSpec, placement: Sequence[TaskPlacement]) -> int:
    """The workers of a PS job's placement (its entries holding GPUs); 0 for other jobs."""
    if not spec.ps.enabled:
        return 0
    return sum(1 for p in placement if p.gpu_indices)


def role_counts(spec: JobSpec, placement: Sequence[TaskPlacement]) -> tuple[int, int]:
    """(workers, servers) of a PS job's placement."""
    workers = ps_workers(spec, placement)
    return workers, len(placement) - workers


def placement_problem(spec: JobSpec, placement: Sequence[TaskPlacement]) -> str | None:
    """Why a placement cannot run this PS job (None when it can): ranks 0..k-1, the first
    ``w`` with ``gpus_per_process`` distinct GPUs on one node each, then ``p`` without GPUs,
    ``w`` and ``p`` within the spec's ranges. Headroom is the policy's to respect."""
    ps = spec.ps
    if [p.rank for p in placement] != list(range(len(placement))):
        return "ranks must be 0..k-1 in order"
    workers, servers = role_counts(spec, placement)
    if any(p.gpu_indices for p in placement[workers:]):
        return "workers (with GPUs) must come before the parameter servers (without)"
    if not ps.min_workers <= workers <= ps.max_workers:
        return f"{workers} workers; the job runs {ps.min_workers} to {ps.max_workers}"
    if not ps.min_servers <= servers <= ps.max_servers:
        return f"{servers} parameter servers; the job runs {ps.min_servers} to {ps.max_servers}"
    taken: set[tuple[str, int]] = set()
    for p in placement[:workers]:
        if len(set(p.gpu_indices)) != spec.gpus_per_process:
            return f"rank {p.rank} holds {len(p.gpu_indices)} GPUs, not {spec.gpus_per_process}"
        for gpu in p.gpu_indices:
            if (p.node_id, gpu) in taken:
                return f"GPU {gpu} of {p.node_id} given twice"
            taken.add((p.node_id, gpu))
    return None


def headroom(
    capacity: Mapping[str, tuple[float, float]],
    held: Iterable[tuple[JobSpec, Sequence[TaskPlacement]]],
) -> Headroom:
    """Each node's (cores, GB) left once the PS jobs in ``held`` take their role vectors
    (other jobs declare none and take nothing here)."""
    left = {n: (float(c), float(m)) for n, (c, m) in capacity.items()}
    for spec, placement in held:
        workers = ps_workers(spec, placement)
        for p in placement:
            if p.node_id in left:
                role = spec.ps.worker if p.rank < workers else spec.ps.server
                left[p.node_id] = _minus(left[p.node_id], role)
    return left


def place_ps_job(
    free: Mapping[str, tuple[int, ...]],
    room: Mapping[str, tuple[float, float]],
    spec: JobSpec,
    workers: int,
    servers: int,
) -> tuple[TaskPlacement, ...] | None:
    """``workers`` GPU workers then ``servers`` CPU servers, or None when they don't fit.

    Workers: :func:`place_job`'s consolidation, on nodes whose headroom holds their vectors.
    Servers: one at a time on the node with the most cores left that holds the server vector,
    the workers' nodes first (a PS next to its workers keeps the transfers local).
    """
    ps = spec.ps
    per = spec.gpus_per_process
    can_host = {n: ids for n, ids in free.items() if _fits(room.get(n, (0.0, 0.0)), ps.worker)}
    slots = {
        n: ids[: per * _count_fitting(room.get(n, (0.0, 0.0)), ps.worker)]
        for n, ids in can_host.items()
    }
    chosen = place_job(slots, workers * per, per) if workers else ()
    if chosen is None or len(chosen) != workers:
        return None
    left = dict(room)
    for p in chosen:
        left[p.node_id] = _minus(left[p.node_id], ps.worker)
    near = {p.node_id for p in chosen}
    placed = list(chosen)
    for k in range(servers):
        hosts = [n for n, r in left.items() if _fits(r, ps.server)]
        if not hosts:
            return None
        host = max(hosts, key=lambda n: (n in near, left[n][0], left[n][1], n))
        left[host] = _minus(left[host], ps.server)
        placed.append(TaskPlacement(workers + k, host, ()))
    return tuple(placed)


def demand(ps: PsSpec, workers: int, servers: int) -> tuple[float, float, float]:
    """(GPUs, cores, GB) of an allocation (Chic's resource vector sum)."""
    w, s = ps.worker.vector(), ps.server.vector()
    return tuple(workers * a + servers * b for a, b in zip(w, s, strict=True))  # type: ignore[return-value]


def _fits(left: tuple[float, float], role: RoleResources) -> bool:
    return role.cpus <= left[0] + _EPS and role.memory_gb <= left[1] + _EPS


def _count_fitting(left: tuple[float, float], role: RoleResources) -> int:
    """How many tasks of ``role`` a node's headroom holds (no limit for a zero vector)."""
    counts = [left[i] / need for i, need in enumerate((role.cpus, role.memory_gb)) if need > 0]
    return int(min(counts) + _EPS) if counts else 1 << 20


def _minus(left: tuple[float, float], role: RoleResources) -> tuple[float, float]:
    return (left[0] - role.cpus, left[1] - role.memory_gb)
