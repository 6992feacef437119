"""The rules MLF-H and MLF-RL share: which tasks leave overloaded servers (§3.3.3) and where a
queued job's or a leaving job's tasks go (§3.3.2).

Both policies build a :class:`~controller.policy.mlfs.hosts.HostPool` from the snapshot, take
the load of leaving jobs off it (:func:`unload_busy`), find the overloaded servers
(:func:`hot_servers`) and the jobs to move off them (:func:`find_movers`), and place jobs with
:func:`place_queued` and :func:`place_mover`. They differ only in the order jobs are taken and
when to stop, so these functions are the one copy of what they have in common.

A job whose tasks could not all run within ``h_r`` even on the idle cluster is *oversized*: it
would never start under the load test, so it is placed by free GPUs alone and never asked to
move (:func:`oversized`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from controller.placement import TaskPlacement
from controller.policy.base import JobView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import Server, TaskLoad, choose_migrations, is_overloaded
from controller.policy.mlfs.hosts import HostPool, move_cost_s
from controller.policy.mlfs.jobs import peer_traffic, task_demand
from controller.policy.mlfs.priority import TaskKey

Placement = tuple[TaskPlacement, ...]


@dataclass(frozen=True)
class Mover:
    """A job leaving overloaded servers: its ``ranks`` leave ``sources``."""

    view: JobView
    sources: frozenset[str]
    ranks: tuple[int, ...]


def unload_busy(pool: HostPool, busy: Iterable[JobView], resources: tuple[str, ...]) -> None:
    """Take the load of jobs already leaving (suspending, migrating) off their servers."""
    for view in busy:
        for p in view.placement:
            if p.node_id in pool.servers:
                pool.unload(p.node_id, task_demand(view, resources))


def unload_movers(pool: HostPool, movers: Iterable[Mover], resources: tuple[str, ...]) -> None:
    """Movers are queued virtually (§3.3.3): their leaving tasks' load leaves the server now."""
    for mover in movers:
        for p in mover.view.placement:
            if p.rank in mover.ranks:
                pool.unload(p.node_id, task_demand(mover.view, resources))


def hot_servers(pool: HostPool, active: Iterable[JobView], h_r: float) -> set[str]:
    """The overloaded servers (measured utilisation above ``h_r``) running active jobs."""
    hot = {sid for sid in pool.measured if is_overloaded(pool.servers[sid], h_r)}
    if not hot:  # nothing overloaded: no need to look at the jobs
        return hot
    return {p.node_id for v in active for p in v.placement if p.node_id in hot}


def idle(pool: HostPool, hot: Collection[str], active: Iterable[JobView]) -> bool:
    """Whether this cycle can neither start nor move a job: no underloaded server has a free
    GPU, no server is overloaded and no agent asked for a move. Then the queue's order does
    not matter, and neither does any priority (without lease-boundary preemption)."""
    return pool.room(1) == 0 and not hot and not any(v.migration_requested for v in active)


def oversized(view: JobView, demand: Sequence[float], pool: HostPool) -> bool:
    """Whether the job's tasks could not all run within ``h_r`` even on the idle cluster."""
    per_task = view.spec.gpus_per_process
    return any(demand) and pool.idle_capacity(demand, per_task) < view.spec.num_tasks


def queued_demand(view: JobView, pool: HostPool, resources: tuple[str, ...]) -> tuple[float, ...]:
    """A queued job's task load for the fit test: its own, none when it is oversized."""
    demand = task_demand(view, resources)
    if oversized(view, demand, pool):
        return (0.0,) * len(demand)
    return demand


def task_priority(priorities: Mapping[TaskKey, float], job_id: str, rank: int) -> float:
    """A task's ``P``; a data-parallel job is keyed by its task 0 alone."""
    p = priorities.get((job_id, rank))
    return priorities.get((job_id, 0), 0.0) if p is None else p


def task_loads(
    view: JobView,
    ranks: Iterable[int],
    priorities: Mapping[TaskKey, float],
    demand: tuple[float, ...],
) -> list[TaskLoad]:
    """The job's tasks ``ranks`` for the Euclidean rules, with their traffic to peers."""
    traffic = peer_traffic(view) if view.spec.num_tasks > 1 else {}
    loads: list[TaskLoad] = []
    for k in ranks:
        priority = task_priority(priorities, view.id, k)
        if not loads or not math.isfinite(priority):
            loads.append(
                TaskLoad(
                    view.id,
                    k,
                    demand,
                    0.0,
                    None,
                    priority,
                    traffic.get(k, {}),
                    move_cost_s(view),  # q (hosts.py)
                    view.estimated_remaining_s,
                )
            )
            continue
        # Like the first, which validated the demand; peer_traffic's volumes are 1 or 2.
        # Built without __init__, whose checks of every volume made a job O(tasks^2).
        load = object.__new__(TaskLoad)
        load.__dict__.update(loads[0].__dict__)
        # peer_traffic's dicts are this call's own: a read-only view needs no copy
        load.__dict__.update(task=k, priority=priority, traffic=_frozen(traffic.get(k, {})))
        loads.append(load)
    return loads


def _frozen(traffic: dict[TaskKey, float]) -> Mapping[TaskKey, float]:
    return MappingProxyType(traffic)


def find_movers(
    hot: set[str],
    active: Sequence[JobView],
    pool: HostPool,
    priorities: Mapping[TaskKey, float],
    config: MlfsConfig,
    resources: tuple[str, ...],
) -> dict[str, Mover]:
    """Jobs with tasks to move off the ``hot`` servers (§3.3.3), by job id.

    If a node agent asked to move jobs off a server (``migration_requested``), those jobs'
    tasks there leave; otherwise the tasks :func:`~controller.policy.mlfs.euclid.
    choose_migrations` picks (the function the agent uses). A job asking to move whose servers
    look fine here moves all its tasks. Oversized jobs never move.
    """
    on_node: dict[str, list[tuple[JobView, TaskPlacement]]] = {}
    for view in active if hot else ():  # no server overloaded: no job runs on one
        for p in view.placement:
            if p.node_id in hot:
                on_node.setdefault(p.node_id, []).append((view, p))
    on_hot = {v.id: v for pairs in on_node.values() for v, _ in pairs}
    stuck = {i for i, v in on_hot.items() if oversized(v, task_demand(v, resources), pool)}
    found: dict[str, tuple[JobView, set[str], set[int]]] = {}
    for sid in sorted(hot):
        here = [(v, p) for v, p in on_node[sid] if v.id not in stuck]
        asked = [(v, p) for v, p in here if v.migration_requested]
        if asked:  # a node agent chose them
            chosen = [(v.id, p.rank) for v, p in asked]
        else:
            ranks: dict[str, list[int]] = {}
            for v, p in here:
                ranks.setdefault(v.id, []).append(p.rank)
            views = {v.id: v for v, _ in here}
            loads = [
                load
                for job_id, job_ranks in ranks.items()
                for load in task_loads(
                    views[job_id], job_ranks, priorities, task_demand(views[job_id], resources)
                )
            ]
            server = Server(sid, pool.servers[sid].utilisation, {})
            chosen = [t.key for t in choose_migrations(server, loads, config, resources)]
        views = {v.id: v for v, _ in here}
        for job_id, rank in chosen:
            entry = found.setdefault(job_id, (views[job_id], set(), set()))
            entry[1].add(sid)
            entry[2].add(rank)
    for view in active:  # asked to move, but its servers look fine from here: all of it
        if (
            view.migration_requested
            and view.id not in found
            and view.placement
            and not oversized(view, task_demand(view, resources), pool)
        ):
            nodes = {p.node_id for p in view.placement}
            found[view.id] = (view, nodes, {p.rank for p in view.placement})
    return {
        job_id: Mover(view, frozenset(sources), tuple(sorted(ranks)))
        for job_id, (view, sources, ranks) in found.items()
    }


def place_queued(
    view: JobView,
    demand: tuple[float, ...],
    pool: HostPool,
    priorities: Mapping[TaskKey, float],
) -> Placement | None:
    """All of a queued job's tasks on Euclidean hosts (§3.3.2), taken from ``pool``; None
    when they do not all fit."""
    per_task = view.spec.gpus_per_process
    count = view.spec.num_tasks
    if count < 1 or pool.capacity(demand, per_task) < count:
        return None
    placed = pool.place(task_loads(view, range(count), priorities, demand), per_task, {})
    if placed is None:
        return None
    return tuple(TaskPlacement(k[1], node, gpus) for k, node, gpus in placed)


def place_mover(
    mover: Mover,
    pool: HostPool,
    priorities: Mapping[TaskKey, float],
    resources: tuple[str, ...],
) -> Placement | None:
    """A migrating job's placement: its leaving tasks on new hosts off their sources, the
    others where they are; None when a leaving task finds no host."""
    view = mover.view
    per_task = view.spec.gpus_per_process
    demand = task_demand(view, resources)
    if pool.capacity(demand, per_task, mover.sources) < len(mover.ranks):
        return None
    staying = {(view.id, p.rank): p.node_id for p in view.placement if p.rank not in mover.ranks}
    loads = task_loads(view, mover.ranks, priorities, demand)
    placed = pool.place(loads, per_task, staying, mover.sources)
    if placed is None:
        return None
    new = {k[1]: TaskPlacement(k[1], node, gpus) for k, node, gpus in placed}
    return tuple(new.get(p.rank, p) for p in sorted(view.placement, key=lambda p: p.rank))
