"""MLF-H, MLFS' heuristic scheduler (§3.3), as a :class:`~controller.policy.base.Policy`.

Each cycle, from the snapshot alone:

1. **Priorities** (§3.3.1). Every task of every queued and active job gets Eq. 6's priority
   (:mod:`.priority`, features from :mod:`.jobs`). A job's priority is the largest of its tasks':
   jobs are gang-scheduled, so a job leaves the queue when the first of its tasks would have,
   its most urgent one (for a DAG usually a root, which Eq. 3 credits with its descendants;
   for a data-parallel job every task is alike).
2. **Overload** (§3.3.3). A server whose measured utilisation is above ``h_r`` on some resource
   type is overloaded. If a node agent asked to move jobs off it (``migration_requested``), those
   jobs' tasks there leave; otherwise MLF-H picks the tasks itself with
   :func:`~controller.policy.mlfs.euclid.choose_migrations` (the function the agent uses). The
   leaving tasks are queued *virtually*: their load leaves the server, they stay where they are.
   A job asking to move whose servers look fine here moves all its tasks.
3. **Queue** (§3.3.2). Queued jobs and migrating jobs, by priority (ties: id), are placed task by
   task with :func:`~controller.policy.mlfs.euclid.choose_host` (:class:`.hosts.HostPool`), all
   of a job or none of it; a job that does not fit is skipped and later ones may still fit
   (backfilling), until no underloaded server has a free GPU. A placed queued job is launched;
   a placed migrating job gets a :class:`Migrate` (its other tasks keep their GPUs); one that
   could not be placed goes back to the queue (:class:`Suspend`), as §3.3.3 moves unassigned
   migration tasks back to the queue. Migrations are not bound to lease boundaries.
4. **Lease boundaries.** A queued job still waiting may displace active jobs whose lease has
   expired and whose priority is strictly lower, lowest first, pruned to those needed; if GPUs
   already on their way back suffice it reserves them and displaces nobody (as
   :mod:`controller.policy.common`). It is placed at a later cycle, by the rules above. Every
   other expired lease is renewed.
5. **MLF-C** (§3.5), with ``load_control=True``: ``loadcontrol.load_control(snapshot, config)``
   gives the jobs to stop; they take no further part in the decision.
6. **No ping-pong.** A job sent back to the queue in step 3 is not launched again on a node it
   left while that node's utilisation plus its measured load exceeds ``h_r``
   (:mod:`controller.policy.retreat`, the rule every policy shares).

Measured vs. unknown load: a node without measurements counts busy GPUs / GPUs on each resource
type and never counts as overloaded; a job never measured (``resource_usage`` empty) has no
load. Live, node agents measure and pick the migrations; in the simulator nobody sets
``migration_requested`` and MLF-H picks them from the utilisation the engine reports (the same
function, the same rule: no branch on where it runs).

GPUs are never shared in mlsched, so §3.3.3's per-GPU overload rule (the lowest-priority ``p_s``
tasks of an overloaded GPU) cannot apply: moving the only task of a GPU moves its load with it.
Overload is judged on the resource types; a free GPU is refused only if its own load is above
``h_r`` (a process outside mlsched).

State: besides the memoised task graphs of :func:`.jobs.task_graph`, a
:class:`.book.PriorityBook`: per job of the latest cycle, the parts of Eq. 6 that do not read
the clock, kept while the job's own inputs are unchanged. It changes no decision (a test holds
it to :func:`.priority.task_priorities`). A cycle that can neither start nor move a job (no
free GPU on an underloaded server, no overload, no agent's request) renews the expired leases
and computes no priority: without lease-boundary preemption none would matter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

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
from controller.policy.mlfs.book import PriorityBook
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.moves import (
    Mover,
    find_movers,
    hot_servers,
    idle,
    place_mover,
    place_queued,
    queued_demand,
    unload_busy,
    unload_movers,
)
from controller.policy.mlfs.preempt import lease_victims
from controller.policy.mlfs.priority import TaskKey
from controller.policy.ranks import for_agents
from controller.policy.retreat import HOLD_S, NO_HOST, keep_off


@dataclass
class MlfhPolicy:
    """MLF-H (module docstring). ``resources``: the resource types compared, in order;
    ``preempt_ratio``: a queued job displaces an expired one only if its priority exceeds the
    victim's times this. The default, infinity, never preempts for priority: in MLFS §3.3 a
    running task leaves its server only when the server is overloaded, and "preempted tasks"
    are those migration tasks. A finite ratio adds lease-boundary preemption (1: strictly
    higher priority; larger damps the time-slicing Eq. 2's 1 / I term causes,
    ``docs/mlfs.md``)."""

    config: MlfsConfig = field(default_factory=MlfsConfig)
    load_control: bool = False
    lease_s: float | None = None  # None: the controller's default lease
    resources: tuple[str, ...] = DEFAULT_RESOURCES
    preempt_ratio: float = math.inf
    name: str = "mlf-h"
    retreat_hold_s: float = HOLD_S  # controller.policy.retreat: where nothing was measured
    _book: PriorityBook | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.preempt_ratio >= 1.0:
            raise ValueError(f"preempt_ratio must be >= 1, got {self.preempt_ratio}")

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        """Steps 1-5 (module docstring), a job an overload request sent back kept off the
        nodes it left while they cannot take it (:func:`~controller.policy.retreat.keep_off`)."""
        return keep_off(self._decide, snapshot, self.config.h_r, self.retreat_hold_s)

    def _decide(self, snapshot: ClusterSnapshot) -> Decision:
        lease = self.lease_s or snapshot.default_lease_s
        stops = self._stops(snapshot)
        stopped = {s.job_id for s in stops}
        active = [v for v in snapshot.active if v.id not in stopped]
        pool = HostPool(snapshot.nodes, self.resources, self.config)
        unload_busy(pool, snapshot.busy, self.resources)
        hot = hot_servers(pool, active, self.config.h_r)
        now = snapshot.now
        # only the active jobs that may move (or, with a finite preempt_ratio, yield) need a
        # priority (Eqs. 3, 5 stay in a job)
        preempting = math.isfinite(self.preempt_ratio)
        if not preempting and idle(pool, hot, active):
            expired = (v for v in snapshot.expired() if v.id not in stopped)
            return Decision(renew=tuple(Renew(v.id, lease) for v in expired), stop=stops)
        involved = [
            v
            for v in active
            if (preempting and v.lease_expires_at is not None and v.lease_expires_at <= now)
            or v.migration_requested
            or any(p.node_id in hot for p in v.placement)
        ]
        priorities = self._book_for().priorities(snapshot.queued, involved, now)
        tasks, job_priority = priorities.tasks, priorities.job
        movers = find_movers(hot, active, pool, tasks, self.config, self.resources)
        unload_movers(pool, movers.values(), self.resources)

        items = [(v, False) for v in snapshot.queued] + [(m.view, True) for m in movers.values()]
        items.sort(key=lambda item: (-job_priority[item[0].id], item[0].id))
        launches, migrations, suspends, waiting = self._queue_pass(
            items, movers, pool, tasks, lease
        )

        expired = [v for v in snapshot.expired() if v.id not in movers and v.id not in stopped]
        victims = (
            lease_victims(
                waiting,
                expired,
                job_priority,
                pool,
                snapshot.busy,
                movers.values(),
                self.preempt_ratio,
            )
            if preempting
            else []
        )
        suspends.extend(Suspend(v.id, reason) for v, reason in victims)
        gone = {v.id for v, _ in victims}
        renewals = tuple(Renew(v.id, lease) for v in expired if v.id not in gone)
        decision = Decision(
            launch=tuple(launches),
            renew=renewals,
            suspend=tuple(suspends),
            migrate=tuple(migrations),
            stop=stops,
        )
        return for_agents(job_priority, decision, involved)  # the agents' (docs/overload.md)

    def _queue_pass(
        self,
        items: Sequence[tuple[JobView, bool]],
        movers: Mapping[str, Mover],
        pool: HostPool,
        tasks: Mapping[TaskKey, float],
        lease: float,
    ) -> tuple[list[Launch], list[Migrate], list[Suspend], list[JobView]]:
        """Step 3 of the module docstring over ``items`` (job, moving) in priority order: the
        launches, migrations, movers sent back, and the queued jobs left waiting (in order)."""
        launches: list[Launch] = []
        migrations: list[Migrate] = []
        suspends: list[Suspend] = []
        waiting: list[JobView] = []
        room = pool.room(1) > 0
        scan = _Scan(items, pool, self.resources) if room else None
        index = 0
        while index < len(items):
            if scan is not None and room:  # queued jobs that cannot fit by capacity: skipped
                ahead = scan.next_candidate(index, pool)
                waiting.extend(view for view, _ in items[index:ahead])
                if ahead == len(items):
                    break
                index = ahead
            view, moving = items[index]
            index += 1
            if moving:
                mover = movers[view.id]
                placement = place_mover(mover, pool, tasks, self.resources) if room else None
                if placement is None:
                    suspends.append(Suspend(view.id, NO_HOST))
                else:
                    reason = f"moved off overloaded {', '.join(sorted(mover.sources))}"
                    migrations.append(Migrate(view.id, placement, lease, reason))
            else:
                placement = None
                if scan is not None and room:
                    placement = place_queued(view, scan.demand[index - 1], pool, tasks)
                if placement is None:
                    waiting.append(view)
                else:
                    launches.append(Launch(view.id, placement, lease))
            room = room and pool.room(1) > 0
        return launches, migrations, suspends, waiting

    # --- priorities -------------------------------------------------------------------------

    def task_priorities(self, snapshot: ClusterSnapshot) -> dict[TaskKey, float]:
        """P of Eq. 6 per task of every queued and active job; a data-parallel job is keyed by
        its task 0 alone (all its tasks are alike)."""
        return dict(self._priorities(snapshot.queued, snapshot.active, snapshot.now))

    def job_priorities(self, snapshot: ClusterSnapshot) -> dict[str, float]:
        """Each queued and active job's priority: the largest of its tasks'."""
        return _job_priorities(self.task_priorities(snapshot))

    def _priorities(
        self, queued: Sequence[JobView], active: Sequence[JobView], now: float
    ) -> dict[TaskKey, float]:
        return self._book_for().priorities(queued, active, now).tasks

    def _book_for(self) -> PriorityBook:
        """The policy's :class:`.book.PriorityBook` (its only state), for its current config."""
        if self._book is None or self._book.config is not self.config:
            self._book = PriorityBook(self.config)
        return self._book

    # --- lease boundaries -------------------------------------------------------------------

    def _stops(self, snapshot: ClusterSnapshot) -> tuple[Stop, ...]:
        if not self.load_control:
            return ()
        from controller.policy.mlfs.loadcontrol import load_control  # MLF-C, §3.5

        return tuple(load_control(snapshot, self.config))


class _Scan:
    """The queue pass's shortcut: a queued job whose tasks the servers cannot take by
    ``HostPool.capacity`` is skipped by ``place_queued`` without a change, so runs of them are
    found with one array test per kind of job (demand, GPUs per task) instead of one call each.
    Movers are never skipped."""

    def __init__(
        self, items: Sequence[tuple[JobView, bool]], pool: HostPool, resources: tuple[str, ...]
    ) -> None:
        kinds: dict[tuple[tuple[float, ...], int], int] = {}
        self.demand: list[tuple[float, ...]] = []
        kind, tasks = [], []
        for view, moving in items:
            demand = () if moving else queued_demand(view, pool, resources)
            self.demand.append(demand)
            key = (demand, view.spec.gpus_per_process)
            kind.append(-1 if moving else kinds.setdefault(key, len(kinds)))
            tasks.append(view.spec.num_tasks)
        width = len(resources)
        self.demands = np.array([d for d, _ in kinds], dtype=np.float64).reshape(-1, width)
        self.per_task = np.array([p for _, p in kinds], dtype=np.int64)
        self.kind = np.array(kind, dtype=np.intp)
        self.tasks = np.array(tasks, dtype=np.int64)
        self.moving = self.kind < 0

    def next_candidate(self, start: int, pool: HostPool) -> int:
        """The first item from ``start`` on that is a mover or may fit (len: none)."""
        capacity = np.append(pool.capacities(self.demands, self.per_task), 0)
        tasks = self.tasks[start:]
        fits = (tasks >= 1) & (capacity[self.kind[start:]] >= tasks)  # a mover: the last, 0
        hits = np.flatnonzero(self.moving[start:] | fits)
        return start + int(hits[0]) if hits.size else len(self.kind)


def _job_priorities(tasks: Mapping[TaskKey, float]) -> dict[str, float]:
    best: dict[str, float] = {}
    for (job_id, _), p in tasks.items():
        if job_id not in best or p > best[job_id]:
            best[job_id] = p
    return best
