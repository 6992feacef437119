"""One MLF-RL scheduling cycle with the choices left to a *chooser* (MLFS §3.4).

The paper's action assigns every waiting task, and every task selected to move off an
overloaded server, a destination: a node or the queue. mlsched launches a job's tasks together,
so the unit here is the job, and the action is factorised into a sequence of steps:

1. The candidates are the queued jobs and the *movers*: jobs with tasks chosen to leave an
   overloaded server by MLF-H's Euclidean rule (:func:`~controller.policy.mlfs.euclid.
   choose_migrations`, or a node agent's ``migration_requested``). Their load leaves the server
   at once (queued virtually, §3.3.3).
2. At each step the chooser sees every candidate whose tasks still fit by GPU count on the
   underloaded servers (:class:`Step`) and answers one of them or *hold*. A chosen queued job
   is placed task by task on MLF-H's Euclidean host (:class:`~controller.policy.mlfs.hosts.
   HostPool`, §3.3.2), a chosen mover's leaving tasks likewise (a :class:`Migrate`). A job that
   does not fit whole stays queued (a mover goes back to the queue, :class:`Suspend`). The
   step repeats until the chooser holds, no candidate fits or no underloaded server has a free
   GPU; what is left stays in the queue (movers: back to it).
3. The rest is MLF-H's (:mod:`controller.policy.mlfs.policy`): at a lease boundary a queued job
   still waiting may displace active jobs whose lease expired and whose MLF-H priority is
   strictly lower (lowest first, pruned to those needed; GPUs already on their way back are
   waited for instead); every other expired lease is renewed; with ``load_control`` MLF-C's
   stops come first and those jobs take no further part.

So the chooser decides *which job goes next and when to stop*, and the host is the Euclidean
choice. A chooser that always answers the candidate with the highest MLF-H priority
(:func:`mlfh_chooser`) reproduces MLF-H's decision; MLF-RL's network is another chooser.
Candidates are offered in MLF-H's order (priority, then id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.placement import TaskPlacement, place_job
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
from controller.policy.common import GpuMap
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
    """Makes a cycle's choices: ``choose`` answers a step; ``rank`` scores jobs (the step's
    candidates) for the lease-boundary preemption, higher first."""

    def choose(self, step: Step) -> int: ...

    def rank(self, step: Step) -> np.ndarray: ...


class MlfhChooser:
    """MLF-H's choices: the candidate with the highest priority (the first of equals), and
    MLF-H's priority as the ranking."""

    def choose(self, step: Step) -> int:
        return int(np.argmax(step.priorities))

    def rank(self, step: Step) -> np.ndarray:
        return step.priorities


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
    per_job = {v.id: job_features(v, now, queued=True) for v in snapshot.queued}
    per_job.update((v.id, job_features(v, now, queued=False)) for v in snapshot.active)
    by_task = task_priorities([f for fs in per_job.values() for f in fs], now, config)
    firsts = {job_id: fs[0] for job_id, fs in per_job.items()}
    by_job = job_priorities(by_task)
    totals = {k: p.total for k, p in by_task.items()}

    pool = HostPool(snapshot.nodes, resources, config)
    movers = _movers(active, pool, totals, config, resources)
    for mover in movers.values():  # virtually queued: their load leaves the server now
        for p in mover.view.placement:
            if p.rank in mover.ranks:
                pool.unload(p.node_id, task_demand(mover.view, resources))

    candidates = [Candidate(v) for v in snapshot.queued] + list(movers.values())
    candidates.sort(key=lambda c: (-by_job[c.view.id].total, c.view.id))
    total_gpus = sum(len(n.gpu_indices) for n in snapshot.nodes)
    rows = job_rows(candidates, by_job, now, total_gpus, config, firsts)
    p_job = np.array([by_job[c.view.id].total for c in candidates], dtype=np.float64)

    launches: list[Launch] = []
    migrations: list[Migrate] = []
    suspends: list[Suspend] = []
    waiting: list[JobView] = []
    remaining = list(range(len(candidates)))
    while remaining and pool.room(1) > 0:
        room: dict[tuple[int, frozenset[str]], int] = {}
        eligible = [i for i in remaining if _fits_by_count(pool, candidates[i], room)]
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
        if chosen.moving:
            placement = _move(chosen, pool, totals, resources)
            if placement is None:
                suspends.append(Suspend(chosen.view.id, "overloaded server; no host to move to"))
            else:
                reason = f"moved off overloaded {', '.join(sorted(chosen.sources))}"
                migrations.append(Migrate(chosen.view.id, placement, lease, reason))
        else:
            placement = _launch(chosen.view, pool, totals, resources)
            if placement is None:
                waiting.append(chosen.view)
            else:
                launches.append(Launch(chosen.view.id, placement, lease))
    for index in remaining:
        chosen = candidates[index]
        if chosen.moving:
            suspends.append(Suspend(chosen.view.id, "overloaded server; back to the queue"))
        else:
            waiting.append(chosen.view)

    releasing = [p for v in snapshot.busy for p in v.placement]
    for mover in movers.values():
        releasing.extend(p for p in mover.view.placement if p.rank in mover.ranks)
    expired = [v for v in snapshot.expired() if v.id not in movers and v.id not in stopped]
    ranking: dict[str, float] = {}
    if waiting and expired:  # the chooser's ranking decides who yields to whom
        jobs = [Candidate(v) for v in waiting] + [Candidate(v, running=True) for v in expired]
        ranked = job_rows(jobs, by_job, now, total_gpus, config, firsts)
        totals_ranked = np.array([by_job[c.view.id].total for c in jobs], dtype=np.float64)
        context = np.asarray(context_row(pool, total_gpus, len(waiting)), dtype=np.float32)
        step = Step(
            candidates=tuple(jobs),
            features=candidate_matrix(ranked, step_rows(jobs, totals_ranked, pool), context),
            context=context,
            priorities=totals_ranked,
        )
        scores = chooser.rank(step)
        ranking = {c.view.id: float(x) for c, x in zip(jobs, scores, strict=True)}
        waiting.sort(key=lambda v: (-ranking[v.id], v.id))
    victims = _preempt(waiting, expired, ranking, pool, releasing) if ranking else []
    suspends.extend(Suspend(v.id, reason) for v, reason in victims)
    gone = {v.id for v, _ in victims}
    return Decision(
        launch=tuple(launches),
        renew=tuple(Renew(v.id, lease) for v in expired if v.id not in gone),
        suspend=tuple(suspends),
        migrate=tuple(migrations),
        stop=stops,
    )


def _fits_by_count(
    pool: HostPool, candidate: Candidate, room: dict[tuple[int, frozenset[str]], int]
) -> bool:
    """Whether the underloaded servers have enough free GPUs for the candidate's tasks;
    ``room`` memoises the pool's answers within a step."""
    tasks = candidate.tasks
    key = (candidate.view.spec.gpus_per_process, candidate.sources)
    if key not in room:
        room[key] = pool.room(*key)
    return tasks >= 1 and room[key] >= tasks


# --- movers (§3.3.3), as MLF-H picks them ---------------------------------------------------


def _movers(
    active: Sequence[JobView],
    pool: HostPool,
    totals: Mapping[TaskKey, float],
    config: MlfsConfig,
    resources: tuple[str, ...],
) -> dict[str, Candidate]:
    on_node: dict[str, list[tuple[JobView, TaskPlacement]]] = {}
    for view in active:
        for p in view.placement:
            on_node.setdefault(p.node_id, []).append((view, p))
    hot = sorted(
        sid
        for sid in pool.measured
        if sid in on_node and is_overloaded(pool.servers[sid], config.h_r)
    )
    found: dict[str, tuple[JobView, set[str], set[int]]] = {}
    for sid in hot:
        here = on_node[sid]
        asked = [(v, p) for v, p in here if v.migration_requested]
        if asked:  # a node agent chose them
            chosen = [(v.id, p.rank) for v, p in asked]
        else:
            loads = [_task_load(v, p.rank, totals, resources) for v, p in here]
            server = Server(sid, pool.servers[sid].utilisation, {})
            chosen = [t.key for t in choose_migrations(server, loads, config, resources)]
        views = {v.id: v for v, _ in here}
        for job_id, rank in chosen:
            entry = found.setdefault(job_id, (views[job_id], set(), set()))
            entry[1].add(sid)
            entry[2].add(rank)
    for view in active:  # asked to move, but its servers look fine from here: all of it
        if view.migration_requested and view.id not in found and view.placement:
            found[view.id] = (
                view,
                {p.node_id for p in view.placement},
                {p.rank for p in view.placement},
            )
    return {
        job_id: Candidate(view, True, frozenset(sources), tuple(sorted(ranks)))
        for job_id, (view, sources, ranks) in found.items()
    }


def _task_load(
    view: JobView, rank: int, totals: Mapping[TaskKey, float], resources: tuple[str, ...]
) -> TaskLoad:
    traffic = peer_traffic(view)[rank] if len(view.placement) > 1 else {}
    return TaskLoad(
        job_id=view.id,
        task=rank,
        demand=task_demand(view, resources),
        gpu=0.0,
        priority=_task_priority(totals, view.id, rank),
        traffic=traffic,
    )


# --- placement (§3.3.2) -----------------------------------------------------------------------


def _launch(
    view: JobView, pool: HostPool, totals: Mapping[TaskKey, float], resources: tuple[str, ...]
) -> tuple[TaskPlacement, ...] | None:
    count = view.spec.num_tasks
    placed = pool.place(
        _loads(view, range(count), totals, resources), view.spec.gpus_per_process, {}
    )
    if placed is None:
        return None
    return tuple(TaskPlacement(k[1], node, gpus) for k, node, gpus in placed)


def _move(
    mover: Candidate, pool: HostPool, totals: Mapping[TaskKey, float], resources: tuple[str, ...]
) -> tuple[TaskPlacement, ...] | None:
    view = mover.view
    staying = {(view.id, p.rank): p.node_id for p in view.placement if p.rank not in mover.ranks}
    loads = _loads(view, mover.ranks, totals, resources)
    placed = pool.place(loads, view.spec.gpus_per_process, staying, mover.sources)
    if placed is None:
        return None
    new = {k[1]: TaskPlacement(k[1], node, gpus) for k, node, gpus in placed}
    return tuple(new.get(p.rank, p) for p in sorted(view.placement, key=lambda p: p.rank))


def _loads(
    view: JobView,
    ranks: Iterable[int],
    totals: Mapping[TaskKey, float],
    resources: tuple[str, ...],
) -> list[TaskLoad]:
    demand = task_demand(view, resources)
    traffic = peer_traffic(view) if view.spec.num_tasks > 1 else {}
    return [
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


def _task_priority(totals: Mapping[TaskKey, float], job_id: str, rank: int) -> float:
    p = totals.get((job_id, rank))
    return totals.get((job_id, 0), 0.0) if p is None else p


# --- lease boundaries ---------------------------------------------------------------------------


def _preempt(
    waiting: Sequence[JobView],
    expired: Sequence[JobView],
    priority: Mapping[str, float],
    pool: HostPool,
    releasing: Iterable[TaskPlacement],
) -> list[tuple[JobView, str]]:
    """Victims for the waiting jobs, highest priority first (module docstring, item 3)."""
    candidates = sorted(expired, key=lambda v: (priority[v.id], v.id))  # lowest first
    avail = GpuMap(pool.free_map())
    avail.give(releasing)
    victims: list[tuple[JobView, str]] = []
    chosen: set[str] = set()
    failed: dict[int, tuple[int, int]] = {}  # per process -> (map version, fewest tasks)
    for job in waiting:
        gpus, per_task = job.spec.gpus, job.spec.gpus_per_process
        placement = avail.place(gpus, per_task)
        if placement is not None:  # GPUs on their way back will do: wait for them
            avail.take(placement)
            continue
        mine = priority[job.id]
        eligible = [v for v in candidates if priority[v.id] < mine and v.id not in chosen]
        if not eligible:
            if avail.total == 0 and len(chosen) == len(candidates):
                break
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
    dropped again, highest priority first, if the job still fits without it."""
    grown = {n: set(ids) for n, ids in avail.map.items()}
    slots = avail.slots(per_task)
    picked: list[JobView] = []
    for victim in candidates:
        for p in victim.placement:
            if p.node_id in grown:
                before = len(grown[p.node_id]) // per_task
                grown[p.node_id].update(p.gpu_indices)
                slots += len(grown[p.node_id]) // per_task - before
        picked.append(victim)
        if slots >= gpus // per_task and _fits(avail, picked, gpus, per_task):
            break
    else:
        return None
    for victim in list(reversed(picked)):
        rest = [v for v in picked if v is not victim]
        if _fits(avail, rest, gpus, per_task):
            picked = rest
    return picked


def _fits(avail: GpuMap, victims: Sequence[JobView], gpus: int, per_task: int) -> bool:
    free = {n: set(ids) for n, ids in avail.map.items()}
    for v in victims:
        for p in v.placement:
            if p.node_id in free:
                free[p.node_id].update(p.gpu_indices)
    return place_job({n: tuple(sorted(ids)) for n, ids in free.items()}, gpus, per_task) is not None
