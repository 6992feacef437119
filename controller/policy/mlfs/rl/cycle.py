"""One MLF-RL scheduling cycle with the choices left to a *chooser* (MLFS §3.4).

The paper's action gives every waiting task, and every task selected to move off an overloaded
server, a destination: a node or the queue. mlsched launches a job's tasks together, so the
unit here is the job, and the action is factorised into a sequence of steps:

1. The candidates are the queued jobs and the *movers*: jobs with tasks chosen to leave an
   overloaded server by MLF-H's Euclidean rule (:func:`~controller.policy.mlfs.euclid.
   choose_migrations`, or a node agent's ``migration_requested``). Their load leaves the server
   at once (queued virtually, §3.3.3).
2. At each step the chooser sees every candidate that the underloaded servers can still take
   whole by free GPUs and load (``HostPool.capacity``; :class:`Step`) and answers one of them or
   *hold*. A chosen queued job is placed task by task on MLF-H's Euclidean host
   (:class:`~controller.policy.mlfs.hosts.HostPool`, §3.3.2) and launched, a chosen mover's
   leaving tasks likewise (a :class:`Migrate`). One that does not fit after all stays queued (a
   mover goes back to the queue, :class:`Suspend`). The steps go on until the chooser holds,
   no candidate fits or no underloaded server has a free GPU; what is left stays in the queue
   (movers: back to it, as §3.3.3 does with unassigned migration tasks).
3. Like MLF-H by default, no running job is preempted: every expired lease is renewed, except
   a mover's (its Migrate or Suspend answers it). With ``load_control`` MLF-C's stops come
   first and those jobs take no further part (§3.5).

So the chooser decides *which job goes next and when to stop*; the host is the Euclidean
choice. The chooser that always answers the candidate with the highest MLF-H priority
(:class:`MlfhChooser`) reproduces :class:`~controller.policy.mlfs.policy.MlfhPolicy` (with its
default, no lease-boundary preemption; a test holds the two together); MLF-RL's network is
another chooser. Candidates are offered in MLF-H's order (priority, then id). The rules of
steps 1-2 mirror MLF-H's (``docs/mlfs.md``, *MLF-RL*).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Migrate,
    Renew,
    Stop,
    Suspend,
)
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import (
    DEFAULT_RESOURCES,
    Server,
    TaskLoad,
    choose_migrations,
    is_overloaded,
)
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.jobs import job_features, peer_traffic, task_demand
from controller.policy.mlfs.priority import TaskKey, task_priorities
from controller.policy.mlfs.rl.features import (
    Candidate,
    candidate_matrix,
    context_row,
    job_priorities,
    job_rows,
    step_rows,
)


@dataclass(frozen=True)
class Step:
    """What a chooser sees: the candidates that fit by count (MLF-H order), their network
    input (``features.CANDIDATE_FEATURES`` per row), the context row and their MLF-H ``P``.
    The answer is an index into ``candidates``, or ``len(candidates)`` to hold."""

    candidates: tuple[Candidate, ...]
    features: np.ndarray
    context: np.ndarray
    priorities: np.ndarray

    @property
    def hold(self) -> int:
        return len(self.candidates)


class Chooser(Protocol):
    """Makes a cycle's choices: an index into ``step.candidates``, or ``step.hold``."""

    def choose(self, step: Step) -> int: ...


class MlfhChooser:
    """MLF-H's choice: the candidate with the highest priority (the first of equals)."""

    def choose(self, step: Step) -> int:
        return int(np.argmax(step.priorities))


def plan(
    snapshot: ClusterSnapshot,
    chooser: Chooser,
    config: MlfsConfig,
    *,
    resources: tuple[str, ...] = DEFAULT_RESOURCES,
    lease_s: float | None = None,
    load_control: bool = False,
) -> Decision:
    """The cycle's decision with ``chooser`` making the choices (module docstring)."""
    lease = lease_s or snapshot.default_lease_s
    stops: tuple[Stop, ...] = ()
    if load_control:
        from controller.policy.mlfs.loadcontrol import load_control as mlf_c  # MLF-C, §3.5

        stops = tuple(mlf_c(snapshot, config))
    stopped = {s.job_id for s in stops}
    active = [v for v in snapshot.active if v.id not in stopped]
    now = snapshot.now
    pool = HostPool(snapshot.nodes, resources, config)
    for view in snapshot.busy:  # leaving (suspending, migrating): their load goes with them
        for p in view.placement:
            if p.node_id in pool.servers:
                pool.unload(p.node_id, task_demand(view, resources))
    hot = _hot(pool, active, config)
    involved = [
        v for v in active if v.migration_requested or any(p.node_id in hot for p in v.placement)
    ]
    per_job = {v.id: job_features(v, now, queued=True) for v in snapshot.queued}
    per_job.update((v.id, job_features(v, now, queued=False)) for v in involved)
    by_task = task_priorities([f for fs in per_job.values() for f in fs], now, config)
    by_job = job_priorities(by_task)
    totals = {k: p.total for k, p in by_task.items()}
    movers = _movers(hot, active, pool, totals, config, resources)
    for mover in movers.values():  # virtually queued: their load leaves the server now
        for p in mover.view.placement:
            if p.rank in mover.ranks:
                pool.unload(p.node_id, task_demand(mover.view, resources))

    candidates = [Candidate(v) for v in snapshot.queued] + list(movers.values())
    candidates.sort(key=lambda c: (-by_job[c.view.id].total, c.view.id))
    demands = [_demand(c, pool, resources) for c in candidates]
    total_gpus = sum(len(n.gpu_indices) for n in snapshot.nodes)
    firsts = {job_id: fs[0] for job_id, fs in per_job.items()}
    rows = job_rows(candidates, by_job, now, total_gpus, config, firsts)
    p_job = np.array([by_job[c.view.id].total for c in candidates], dtype=np.float64)

    launches: list[Launch] = []
    migrations: list[Migrate] = []
    suspends: list[Suspend] = []
    remaining = list(range(len(candidates)))
    while remaining and pool.room(1) > 0:
        eligible = [i for i in remaining if _fits(pool, candidates[i], demands[i])]
        if not eligible:
            break
        offered = tuple(candidates[i] for i in eligible)
        context = np.asarray(context_row(pool, total_gpus, len(eligible)), dtype=np.float32)
        step = Step(
            candidates=offered,
            features=candidate_matrix(
                rows[eligible], step_rows(offered, p_job[eligible], pool), context
            ),
            context=context,
            priorities=p_job[eligible],
        )
        choice = chooser.choose(step)
        if not 0 <= choice <= step.hold:
            raise ValueError(f"chooser answered {choice}; valid: 0..{step.hold}")
        if choice == step.hold:
            break
        index = eligible[choice]
        remaining.remove(index)
        chosen = candidates[index]
        placement = _place(chosen, demands[index], pool, totals)
        if chosen.moving:
            if placement is None:
                suspends.append(Suspend(chosen.view.id, "overloaded server; no host to move to"))
            else:
                reason = f"moved off overloaded {', '.join(sorted(chosen.sources))}"
                migrations.append(Migrate(chosen.view.id, placement, lease, reason))
        elif placement is not None:
            launches.append(Launch(chosen.view.id, placement, lease))
    for index in remaining:
        if candidates[index].moving:
            suspends.append(Suspend(candidates[index].view.id, "overloaded server; queued"))
    expired = [v for v in snapshot.expired() if v.id not in movers and v.id not in stopped]
    return Decision(
        launch=tuple(launches),
        renew=tuple(Renew(v.id, lease) for v in expired),
        suspend=tuple(suspends),
        migrate=tuple(migrations),
        stop=stops,
    )


# --- overload and movers (§3.3.3), as MLF-H picks them ----------------------------------------


def _hot(pool: HostPool, active: Iterable[JobView], config: MlfsConfig) -> set[str]:
    """The overloaded servers (measured utilisation above ``h_r``) running active jobs."""
    hot = {sid for sid in pool.measured if is_overloaded(pool.servers[sid], config.h_r)}
    return {p.node_id for v in active for p in v.placement if p.node_id in hot}


def _oversized(view: JobView, demand: Sequence[float], pool: HostPool) -> bool:
    """Whether the job's tasks could not all run within ``h_r`` even on the idle cluster: it
    is placed by free GPUs alone and never asked to move (as MLF-H)."""
    per_task = view.spec.gpus_per_process
    return any(demand) and pool.idle_capacity(demand, per_task) < view.spec.num_tasks


def _movers(
    hot: set[str],
    active: Sequence[JobView],
    pool: HostPool,
    totals: Mapping[TaskKey, float],
    config: MlfsConfig,
    resources: tuple[str, ...],
) -> dict[str, Candidate]:
    on_node: dict[str, list[tuple[JobView, TaskPlacement]]] = {}
    for view in active:
        for p in view.placement:
            if p.node_id in hot:
                on_node.setdefault(p.node_id, []).append((view, p))
    stuck = {
        v.id
        for pairs in on_node.values()
        for v, _ in pairs
        if _oversized(v, task_demand(v, resources), pool)
    }
    found: dict[str, tuple[JobView, set[str], set[int]]] = {}
    for sid in sorted(hot):
        here = [(v, p) for v, p in on_node[sid] if v.id not in stuck]
        asked = [(v, p) for v, p in here if v.migration_requested]
        if asked:  # a node agent chose them
            chosen = [(v.id, p.rank) for v, p in asked]
        else:
            traffic = {v.id: peer_traffic(v) for v, _ in here if len(v.placement) > 1}
            loads = [
                TaskLoad(
                    job_id=v.id,
                    task=p.rank,
                    demand=task_demand(v, resources),
                    gpu=0.0,
                    priority=_task_priority(totals, v.id, p.rank),
                    traffic=traffic.get(v.id, {}).get(p.rank, {}),
                )
                for v, p in here
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
            and not _oversized(view, task_demand(view, resources), pool)
        ):
            nodes = {p.node_id for p in view.placement}
            found[view.id] = (view, nodes, {p.rank for p in view.placement})
    return {
        job_id: Candidate(view, True, frozenset(sources), tuple(sorted(ranks)))
        for job_id, (view, sources, ranks) in found.items()
    }


# --- placement (§3.3.2) -----------------------------------------------------------------------


def _demand(candidate: Candidate, pool: HostPool, resources: tuple[str, ...]) -> tuple[float, ...]:
    """A task's load for the fit test: its own, or none for a queued job too big for the
    cluster under ``h_r`` (:func:`_oversized`)."""
    demand = task_demand(candidate.view, resources)
    if not candidate.moving and _oversized(candidate.view, demand, pool):
        return (0.0,) * len(demand)
    return demand


def _fits(pool: HostPool, candidate: Candidate, demand: tuple[float, ...]) -> bool:
    """Whether the underloaded servers can take the candidate's tasks whole (a pre-check:
    placing them has the last word)."""
    tasks = candidate.tasks
    per_task = candidate.view.spec.gpus_per_process
    return tasks >= 1 and pool.capacity(demand, per_task, candidate.sources) >= tasks


def _place(
    candidate: Candidate,
    demand: tuple[float, ...],
    pool: HostPool,
    totals: Mapping[TaskKey, float],
) -> tuple[TaskPlacement, ...] | None:
    """A queued job's placement, or a mover's: its leaving tasks on new hosts off their
    sources, the others where they are; None when a task finds no host."""
    view = candidate.view
    per_task = view.spec.gpus_per_process
    traffic = peer_traffic(view) if view.spec.num_tasks > 1 else {}
    ranks = candidate.ranks if candidate.moving else tuple(range(view.spec.num_tasks))
    loads = [
        TaskLoad(
            job_id=view.id,
            task=k,
            demand=demand,
            gpu=0.0,
            priority=_task_priority(totals, view.id, k),
            traffic=traffic.get(k, {}),
        )
        for k in ranks
    ]
    if not candidate.moving:
        placed = pool.place(loads, per_task, {})
        if placed is None:
            return None
        return tuple(TaskPlacement(k[1], node, gpus) for k, node, gpus in placed)
    staying = {(view.id, p.rank): p.node_id for p in view.placement if p.rank not in ranks}
    placed = pool.place(loads, per_task, staying, candidate.sources)
    if placed is None:
        return None
    new = {k[1]: TaskPlacement(k[1], node, gpus) for k, node, gpus in placed}
    return tuple(new.get(p.rank, p) for p in sorted(view.placement, key=lambda p: p.rank))


def _task_priority(totals: Mapping[TaskKey, float], job_id: str, rank: int) -> float:
    p = totals.get((job_id, rank))
    return totals.get((job_id, 0), 0.0) if p is None else p
