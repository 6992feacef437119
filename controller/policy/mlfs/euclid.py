"""MLF-H's Euclidean choices: the host for a task (MLFS §3.3.2) and the tasks to migrate off an
overloaded server (§3.3.3), both after the ideal-virtual-point method the paper cites as [47].

Plain data in, plain data out. Utilisations are shares of capacity in [0, 1]: per resource type
for a server (``U_s``) and a task (``U_k``, share of one server's capacity), per GPU for the
server's GPUs (``Server.gpus``) and for the one GPU a task runs on (``TaskLoad.gpu``). The
resource types are named by a tuple (``DEFAULT_RESOURCES``; any names, same order everywhere).

A resource type is overloaded above ``h_r`` and so is a GPU; a server is *overloaded* when one of
its resource types is (§3.3.2), else *underloaded*. Comparisons allow ``_EPS`` of rounding.

Host choice (§3.3.2). Ideal virtual host ``U_V`` over the underloaded servers: per resource type
the least utilisation, then the largest traffic share, then 0 migration degradation. A server's
point is its current utilisation, the task's traffic share with it, and its degradation ``q``.

``q`` ("the task performance degradation caused by the task movement", ideal 0) is our model,
:func:`degradation`: the share of the task's remaining time ``r`` that moving onto the server
costs, ``c / (c + r)`` in [0, 1) like the other coordinates. ``c`` is the task's suspend +
resume time ``TaskLoad.move_s`` (measured t_sr where the job has one, else modelled,
:func:`~controller.policy.mlfs.hosts.move_cost_s`) stretched by the server's busy link: the
restore reads the checkpoint over it, ``c = move_s / max(1 - u_bw, MIN_HEADROOM)``. A task with
nothing to restore (a job that never ran) has ``q = 0`` everywhere, and so does every server
without a bandwidth measurement; q then changes no choice. The
closest underloaded server (ties: server id) that stays within ``h_r`` on every resource type and
on its least-loaded GPU after adding the task wins; the task goes to that GPU (ties: index).

Migration choice (§3.3.3). Ideal virtual task ``U_o``: per resource type the largest demand
among the candidates if the type is overloaded, else the smallest; then traffic share 0. A
task's point is its demand and its traffic share with the tasks still on the server. While a GPU
is overloaded, the candidates are the lowest-priority ``p_s`` share (at least one) of the tasks
on overloaded GPUs, and the GPU resource type counts as overloaded; otherwise all remaining
tasks. The closest candidate leaves, its load is removed, and this repeats until neither a
resource type nor a GPU is overloaded. "Closest" spares high priorities (§3.3.3: "tasks with
high priorities will not be selected to migrate out"): the candidates within ``PRIORITY_TIE``
(0.05, five points of one share) of the closest distance count as equally close, measured
shares being that noisy, and the lowest-priority one of them leaves (ties: distance, task key).
``tie=0`` gives the plain nearest task.

Traffic share (our normalisation of the paper's "communication data size"): the part of a task's
communication volume (``TaskLoad.traffic``, per peer task) exchanged with the given peers, so
it lies in [0, 1] like the utilisations; 0 for a task without traffic.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.priority import TaskKey

DEFAULT_RESOURCES = ("gpu", "cpu", "memory", "bandwidth")
MIN_HEADROOM = 0.1  # q: a link busier than 90 % restores as slowly as one at 90 %
UNKNOWN_REMAINING_S = 3600.0  # q: the remaining time of a task without an estimate
PRIORITY_TIE = 0.05  # distances closer than this to the closest count as equal (§3.3.3)
_EPS = 1e-9  # rounding allowance on threshold comparisons


@dataclass(frozen=True)
class Server:
    """A server's measured load: ``utilisation`` per resource type, ``gpus`` per GPU index."""

    id: str
    utilisation: tuple[float, ...]
    gpus: Mapping[int, float]

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", MappingProxyType(dict(self.gpus)))
        values = (*self.utilisation, *self.gpus.values())
        if not all(-_EPS <= u <= 1 + _EPS for u in values):
            raise ValueError(f"server {self.id!r}: utilisations must be in [0, 1], got {values}")


@dataclass(frozen=True)
class TaskLoad:
    """A task's load: ``demand`` per resource type (share of a server), ``gpu`` on its GPU."""

    job_id: str
    task: int
    demand: tuple[float, ...]
    gpu: float
    gpu_index: int | None = None  # the GPU it runs on; None while queued
    priority: float = 0.0  # P of Eq. 6, for the p_s restriction
    traffic: Mapping[TaskKey, float] = field(default_factory=dict)  # volume per peer task
    # What moving it costs (q, module docstring): seconds of suspend + resume on an idle link
    # (0: nothing to restore, q = 0) and its remaining run time (None: unknown).
    move_s: float = 0.0
    remaining_s: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "traffic", MappingProxyType(dict(self.traffic)))
        where = f"task {self.task} of job {self.job_id!r}"
        if not all(0 <= u <= 1 for u in (*self.demand, self.gpu)):
            raise ValueError(f"{where}: demands must be in [0, 1], got {self.demand}, {self.gpu}")
        if not all(v >= 0 and math.isfinite(v) for v in self.traffic.values()):
            raise ValueError(f"{where}: traffic volumes must be finite and >= 0")
        if not math.isfinite(self.priority):
            raise ValueError(f"{where}: priority must be finite, got {self.priority}")
        if not (math.isfinite(self.move_s) and self.move_s >= 0):
            raise ValueError(f"{where}: move_s must be finite and >= 0, got {self.move_s}")

    @property
    def key(self) -> TaskKey:
        return (self.job_id, self.task)


@dataclass(frozen=True)
class HostChoice:
    server_id: str
    gpu_index: int
    distance: float  # to the ideal virtual host


def is_overloaded(server: Server, h_r: float) -> bool:
    """Whether one of the server's resource types is above ``h_r`` (§3.3.2)."""
    return max(server.utilisation, default=0.0) > h_r + _EPS


def overloaded_gpus(server: Server, h_r: float) -> tuple[int, ...]:
    """The server's GPUs above ``h_r``, by index."""
    return tuple(sorted(g for g, u in server.gpus.items() if u > h_r + _EPS))


def traffic_share(task: TaskLoad, peers: Collection[TaskKey]) -> float:
    """The part of the task's communication volume exchanged with ``peers``, in [0, 1]."""
    total = sum(task.traffic.values())
    if total <= 0:
        return 0.0
    return sum(v for peer, v in task.traffic.items() if peer in peers) / total


def degradation(task: TaskLoad, bandwidth: float) -> float:
    """q_{k,s} (§3.3.2) for moving ``task`` onto a server whose link is ``bandwidth`` busy:
    ``c / (c + r)``, the share of what is left of the task that the move costs, with
    ``c = move_s / max(1 - bandwidth, MIN_HEADROOM)`` (the restore reads the checkpoint over
    that link) and ``r`` its remaining time (unknown: ``UNKNOWN_REMAINING_S``)."""
    if task.move_s <= 0:
        return 0.0
    cost = task.move_s / max(1.0 - bandwidth, MIN_HEADROOM)
    left = UNKNOWN_REMAINING_S if task.remaining_s is None else max(0.0, task.remaining_s)
    return cost / (cost + left)


def fitting_gpu(server: Server, task: TaskLoad, h_r: float) -> int | None:
    """The least-loaded GPU if the server can host the task without exceeding ``h_r`` on any
    resource type or on that GPU (§3.3.2), else None."""
    if not server.gpus:
        return None
    gpu = min(server.gpus, key=lambda g: (server.gpus[g], g))
    if server.gpus[gpu] + task.gpu > h_r + _EPS:
        return None
    if any(u + d > h_r + _EPS for u, d in zip(server.utilisation, task.demand, strict=True)):
        return None
    return gpu


def place(server: Server, task: TaskLoad, gpu_index: int) -> Server:
    """The server with the task's load added on ``gpu_index`` (capped at 1)."""
    utilisation = tuple(
        min(1.0, u + d) for u, d in zip(server.utilisation, task.demand, strict=True)
    )
    gpus = dict(server.gpus)
    gpus[gpu_index] = min(1.0, gpus[gpu_index] + task.gpu)
    return Server(server.id, utilisation, gpus)


def remove(server: Server, task: TaskLoad) -> Server:
    """The server without the task's load (on ``task.gpu_index``; floored at 0)."""
    utilisation = tuple(
        max(0.0, u - d) for u, d in zip(server.utilisation, task.demand, strict=True)
    )
    gpus = dict(server.gpus)
    if task.gpu_index is not None:
        gpus[task.gpu_index] = max(0.0, gpus[task.gpu_index] - task.gpu)
    return Server(server.id, utilisation, gpus)


_degradation = degradation  # choose_host's parameter of the same name shadows it


def choose_host(
    task: TaskLoad,
    servers: Sequence[Server],
    placement: Mapping[TaskKey, str] | None = None,
    degradation: Mapping[str, float] | None = None,
    config: MlfsConfig | None = None,
    resources: tuple[str, ...] = DEFAULT_RESOURCES,
) -> HostChoice | None:
    """The host for ``task`` (§3.3.2), or None when no underloaded server fits it.

    ``placement`` maps running tasks to server ids (for the traffic share); ``degradation``
    is q per server id (None: :func:`degradation` of the task on each server's bandwidth
    share, 0 without a "bandwidth" type).
    """
    config = config or MlfsConfig()
    placement = placement or {}
    _check_dims(resources, f"task {task.key}", task.demand)
    for s in servers:
        _check_dims(resources, f"server {s.id!r}", s.utilisation)
    if degradation is None:
        bw = resources.index("bandwidth") if "bandwidth" in resources else None
        degradation = {
            s.id: _degradation(task, s.utilisation[bw] if bw is not None else 0.0) for s in servers
        }
    under = sorted((s for s in servers if not is_overloaded(s, config.h_r)), key=lambda s: s.id)
    if not under:
        return None
    share = {s.id: 0.0 for s in under}
    total = sum(task.traffic.values())
    for peer, volume in task.traffic.items():
        where = placement.get(peer)
        if where in share and total > 0:
            share[where] += volume / total
    # MLFS §3.3.2: U_V = (min u_m over underloaded servers ..., max u_BW, q = 0)
    ideal = (
        *(min(s.utilisation[m] for s in under) for m in range(len(resources))),
        max(share.values()),
        0.0,
    )
    best: HostChoice | None = None
    for s in under:
        gpu = fitting_gpu(s, task, config.h_r)
        if gpu is None:
            continue
        # MLFS §3.3.2: min ||U_s - U_V|| among the servers that stay underloaded
        distance = math.dist((*s.utilisation, share[s.id], degradation.get(s.id, 0.0)), ideal)
        if best is None or distance < best.distance:
            best = HostChoice(s.id, gpu, distance)
    return best


def lowest_priority(tasks: Iterable[TaskLoad], share: float) -> tuple[TaskLoad, ...]:
    """The ``share`` of ``tasks`` with the lowest priority (rounded up, at least one; ties by
    key), in ascending priority (§3.3.3's ``p_s``)."""
    ordered = sorted(tasks, key=lambda t: (t.priority, t.key))
    count = max(1, math.ceil(round(share * len(ordered), 9)))
    return tuple(ordered[:count])


def choose_migrations(
    server: Server,
    tasks: Sequence[TaskLoad],
    config: MlfsConfig | None = None,
    resources: tuple[str, ...] = DEFAULT_RESOURCES,
    tie: float = PRIORITY_TIE,
) -> tuple[TaskLoad, ...]:
    """The tasks to move off ``server``, in the order chosen (§3.3.3); empty when neither a
    resource type nor a GPU is overloaded. ``tasks`` are the server's movable tasks; ``tie``:
    the distance within which candidates count as equally close (module docstring)."""
    config = config or MlfsConfig()
    _check_dims(resources, f"server {server.id!r}", server.utilisation)
    for t in tasks:
        _check_dims(resources, f"task {t.key}", t.demand)
        if t.gpu_index is not None and t.gpu_index not in server.gpus:
            raise ValueError(f"task {t.key} runs on GPU {t.gpu_index}, not on {server.id!r}")
    gpu_type = resources.index("gpu") if "gpu" in resources else None
    remaining = list(tasks)
    chosen: list[TaskLoad] = []
    while remaining:
        hot_types = {m for m, u in enumerate(server.utilisation) if u > config.h_r + _EPS}
        hot_gpus = set(overloaded_gpus(server, config.h_r))
        on_hot_gpus = [t for t in remaining if t.gpu_index in hot_gpus]
        if on_hot_gpus:  # MLFS §3.3.3: only the lowest-priority p_s share of them
            candidates: Sequence[TaskLoad] = lowest_priority(on_hot_gpus, config.p_s)
            if gpu_type is not None:
                hot_types.add(gpu_type)
        elif hot_types:
            candidates = remaining
        else:
            break  # relieved, or only GPUs none of these tasks runs on are overloaded
        pick = _closest(candidates, hot_types, {t.key for t in remaining}, len(resources), tie)
        chosen.append(pick)
        remaining.remove(pick)
        server = remove(server, pick)
    return tuple(chosen)


def _closest(
    candidates: Sequence[TaskLoad],
    hot_types: Collection[int],
    here: set[TaskKey],
    types: int,
    tie: float,
) -> TaskLoad:
    """The candidate closest to the ideal virtual task; among those within ``tie`` of the
    closest, the lowest priority (ties: task key)."""
    # MLFS §3.3.3: U_o = (max u_m on overloaded types, min u_m on the others ..., u_BW = 0)
    extreme = {True: max, False: min}
    ideal = (
        *(extreme[m in hot_types](t.demand[m] for t in candidates) for m in range(types)),
        0.0,
    )

    def distance(t: TaskLoad) -> float:
        # MLFS §3.3.3: min ||U_k - U_o||
        return math.dist((*t.demand, traffic_share(t, here - {t.key})), ideal)

    far = {t.key: distance(t) for t in candidates}
    best = min(far.values())
    # MLFS §3.3.3: "tasks with high priorities will not be selected to migrate out"
    near = [t for t in candidates if far[t.key] <= best + tie + _EPS]
    return min(near, key=lambda t: (t.priority, far[t.key], t.key))


def _check_dims(resources: tuple[str, ...], what: str, vector: tuple[float, ...]) -> None:
    if len(vector) != len(resources):
        raise ValueError(
            f"{what} has {len(vector)} values for {len(resources)} resource types {resources}"
        )
