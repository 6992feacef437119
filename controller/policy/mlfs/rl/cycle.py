"""One MLF-RL scheduling cycle with the choices left to a *chooser* (MLFS §3.4).

The paper's action gives every waiting task, and every task selected to move off an overloaded
server, a destination: a node or the queue. mlsched launches a job's tasks together, so the
unit here is the job, and the action is factorised into a sequence of steps:

1. The candidates are the queued jobs and the *movers*: jobs with tasks chosen to leave an
   overloaded server by MLF-H's Euclidean rule (:func:`~controller.policy.mlfs.euclid.
   choose_migrations`, or a node agent's ``migration_requested``). Their load leaves the server
   at once (queued virtually, §3.3.3).
2. At each step the chooser sees every candidate that the underloaded servers can still take
   whole by free GPUs and load (``HostPool.capacity``; :class:`Step`), or with
   ``max_candidates`` only the first that many of them in MLF-H's order, and answers one of
   them or *hold*. A chosen queued job is placed task by task on MLF-H's Euclidean host
   (:class:`~controller.policy.mlfs.hosts.HostPool`, §3.3.2) and launched, a chosen mover's
   leaving tasks likewise (a :class:`Migrate`). One that does not fit after all stays queued (a
   mover goes back to the queue, :class:`Suspend`). The steps go on until the chooser holds,
   no candidate fits or no underloaded server has a free GPU; what is left stays in the queue
   (movers: back to it, as §3.3.3 does with unassigned migration tasks).
3. Like MLF-H, with a finite ``preempt_ratio`` a queued job left waiting may displace active
   jobs whose lease expired (:mod:`controller.policy.mlfs.preempt`, MLF-H's own rule); every
   other expired lease is renewed, except a mover's (its Migrate or Suspend answers it).
   With ``load_control`` MLF-C's stops come first and those jobs take no further part (§3.5).

So the chooser decides *which job goes next and when to stop*; the host is the Euclidean
choice. The chooser that always answers the candidate with the highest MLF-H priority
(:class:`MlfhChooser`) reproduces :class:`~controller.policy.mlfs.policy.MlfhPolicy` with the
same ``preempt_ratio`` (a test holds the two together); MLF-RL's network is
another chooser. Candidates are offered in MLF-H's order (priority, then id). Steps 1-2 use
MLF-H's own rules (:mod:`controller.policy.mlfs.moves`), so the two cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

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
from controller.policy.mlfs.book import Priorities, PriorityBook
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.hosts import HostPool, NodeMemo
from controller.policy.mlfs.jobs import task_demand
from controller.policy.mlfs.moves import (
    find_movers,
    hot_servers,
    idle,
    place_mover,
    place_queued,
    unload_busy,
    unload_movers,
)
from controller.policy.mlfs.preempt import lease_victims
from controller.policy.mlfs.rl.features import (
    JOB_FEATURES,
    Candidate,
    RowBook,
    StepKinds,
    candidate_matrix,
    context_row,
)
from controller.policy.mlfs.rl.queue import (
    FitKey,
    QueueBook,
    Queued,
    StaticRows,
    job_rows,
    order,
)
from controller.policy.retreat import LEFT_QUEUED, NO_HOST

_VIEW_ID = attrgetter("view.id")
_FIT, _TASKS = attrgetter("fit"), attrgetter("tasks")


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
    memory: Memory | None = None,
    preempt_ratio: float = math.inf,
    max_candidates: int | None = None,
) -> Decision:
    """The cycle's decision with ``chooser`` making the choices (module docstring).
    ``memory``: what a policy keeps between its cycles (:class:`Memory`); the decision is the
    same with or without it. ``preempt_ratio``: MLF-H's lease-boundary preemption
    (:mod:`controller.policy.mlfs.preempt`); infinite: none. ``max_candidates``: a step
    offers at most this many candidates, the first that fit in MLF-H's order (None: all)."""
    if max_candidates is not None and max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    memory = memory if memory is not None and memory.config is config else Memory(config)
    lease = lease_s or snapshot.default_lease_s
    stops: tuple[Stop, ...] = ()
    if load_control:
        from controller.policy.mlfs.loadcontrol import load_control as mlf_c  # MLF-C, §3.5

        stops = tuple(mlf_c(snapshot, config))
    stopped = {s.job_id for s in stops}
    active = [v for v in snapshot.active if v.id not in stopped]
    now = snapshot.now
    pool = HostPool(snapshot.nodes, resources, config, memory.nodes)
    unload_busy(pool, snapshot.busy, resources)
    hot = hot_servers(pool, active, config.h_r)
    preempting = math.isfinite(preempt_ratio)
    if not preempting and idle(pool, hot, active):
        expired = (v for v in snapshot.expired() if v.id not in stopped)
        return Decision(renew=tuple(Renew(v.id, lease) for v in expired), stop=stops)
    involved = [
        v
        for v in active
        if (preempting and v.lease_expires_at is not None and v.lease_expires_at <= now)
        or v.migration_requested
        or (hot and any(p.node_id in hot for p in v.placement))
    ]
    priorities = memory.book.priorities(snapshot.queued, involved, now)
    totals = priorities.tasks
    movers = find_movers(hot, active, pool, totals, config, resources)
    unload_movers(pool, movers.values(), resources)

    records = memory.queue.records(snapshot.queued, pool, resources)
    records += [
        memory.queue.record(
            Candidate(m.view, True, m.sources, m.ranks), task_demand(m.view, resources)
        )
        for m in movers.values()
    ]
    p_all, book_rows = _job_priorities(records, priorities, snapshot.queued)
    ranked = order(p_all, list(map(_VIEW_ID, records)))
    records = list(map(records.__getitem__, ranked.tolist()))
    candidates = list(map(attrgetter("candidate"), records))
    demands = list(map(attrgetter("demand"), records))
    total_gpus = sum(len(n.gpu_indices) for n in snapshot.nodes)
    p_job = p_all[ranked]
    fits = _FitTest(records, memory.queue.fit_kinds.keys)
    memory.rows.start()
    rows = _JobRows(
        records,
        book_rows[ranked],
        memory.rows,
        memory.queue.static,
        priorities,
        now,
        total_gpus,
        config,
    )
    kinds = StepKinds.numbered(
        np.fromiter(map(attrgetter("step"), records), dtype=np.intp, count=len(records)),
        memory.queue.step_kinds.keys,
        np.maximum(1, fits.tasks),
    )

    launches: list[Launch] = []
    migrations: list[Migrate] = []
    suspends: list[Suspend] = []
    unplaced: list[int] = []  # queued candidates chosen that did not fit after all
    given: dict[str, float] = {}  # Eq. 6 P of each job launched or moved, for the agents
    remaining = np.arange(len(candidates))
    while remaining.size and pool.room(1) > 0:
        eligible = remaining[fits.mask(pool, remaining)][:max_candidates].tolist()
        if not eligible:
            break
        offered = tuple(map(candidates.__getitem__, eligible))
        context = np.asarray(context_row(pool, total_gpus, len(eligible)), dtype=np.float32)
        step = Step(
            candidates=offered,
            features=candidate_matrix(
                rows.take(eligible), kinds.rows(eligible, p_job[eligible], pool), context
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
        remaining = remaining[remaining != index]
        chosen = candidates[index]
        if chosen.moving:
            placement = place_mover(movers[chosen.view.id], pool, totals, resources)
            if placement is None:
                suspends.append(Suspend(chosen.view.id, NO_HOST))
            else:
                reason = f"moved off overloaded {', '.join(sorted(chosen.sources))}"
                migrations.append(Migrate(chosen.view.id, placement, lease, reason))
                given[chosen.view.id] = float(p_job[index])
        else:
            placement = place_queued(chosen.view, demands[index], pool, totals)
            if placement is None:
                unplaced.append(index)
            else:
                launches.append(Launch(chosen.view.id, placement, lease))
                given[chosen.view.id] = float(p_job[index])
    for index in remaining.tolist() if movers else ():  # only movers are moving
        if candidates[index].moving:
            suspends.append(Suspend(candidates[index].view.id, LEFT_QUEUED))
    expired = [v for v in snapshot.expired() if v.id not in movers and v.id not in stopped]
    if preempting:
        left = sorted(unplaced + [i for i in remaining.tolist() if not candidates[i].moving])
        victims = lease_victims(
            [candidates[i].view for i in left],
            expired,
            priorities.job,
            pool,
            snapshot.busy,
            movers.values(),
            preempt_ratio,
        )
        suspends.extend(Suspend(v.id, reason) for v, reason in victims)
        gone = {v.id for v, _ in victims}
        expired = [v for v in expired if v.id not in gone]
    return Decision(
        launch=tuple(launches),
        renew=tuple(Renew(v.id, lease) for v in expired),
        suspend=tuple(suspends),
        migrate=tuple(migrations),
        stop=stops,
        priorities=given,
    )


class Memory:
    """What an MLF-RL policy keeps between cycles, none of it changing a decision: the Eq. 6
    inputs per job (:class:`~controller.policy.mlfs.book.PriorityBook`), the clock-free
    columns of the job rows (:class:`~controller.policy.mlfs.rl.features.RowBook`), the
    queued jobs' candidates, demands and kinds (:class:`~controller.policy.mlfs.rl.queue.
    QueueBook`), each for the jobs of the latest cycle only, and the servers of the latest
    cycle's nodes (:class:`~controller.policy.mlfs.hosts.NodeMemo`)."""

    def __init__(self, config: MlfsConfig) -> None:
        self.config = config
        self.book = PriorityBook(config)
        self.rows = RowBook()
        self.queue = QueueBook()
        self.nodes = NodeMemo()


def _job_priorities(
    records: Sequence[Queued], priorities: Priorities, views: Sequence[JobView]
) -> tuple[np.ndarray, np.ndarray]:
    """Each record's job ``P`` (``Priorities.job``) and its row in the book's arrays
    (``Priorities.index``), from the book's array where its rows are ``views`` in order (no
    job id twice; ``Priorities.head``), else by look-up. The first ``len(views)`` records are
    ``views``' (``QueueBook.records``: one per view, in order), the others the movers'."""
    clock, index = priorities.clock, priorities.index
    queued = len(views)
    if priorities.head is views:
        head = clock[:queued, 3]
        head_rows = np.arange(queued, dtype=np.intp)
    else:
        head = np.array([priorities.job[r.view.id] for r in records[:queued]], dtype=np.float64)
        head_rows = np.array([index[r.view.id] for r in records[:queued]], dtype=np.intp)
    tail = [priorities.job[r.view.id] for r in records[queued:]]
    tail_rows = np.array([index[r.view.id] for r in records[queued:]], dtype=np.intp)
    return (
        np.concatenate([head, np.array(tail, dtype=np.float64)]),
        np.concatenate([head_rows, tail_rows]),
    )


class _JobRows:
    """The cycle's job rows (float32), each made when a step first offers its candidate
    (:func:`~controller.policy.mlfs.rl.queue.job_rows`); ``book_rows``: each record's row in
    the priorities' arrays."""

    def __init__(
        self,
        records: Sequence[Queued],
        book_rows: np.ndarray,
        book: RowBook,
        kept: StaticRows,
        priorities: Priorities,
        now: float,
        total_gpus: int,
        config: MlfsConfig,
    ) -> None:
        self._records = records
        self._book_rows = book_rows
        self._make = lambda chosen, at: job_rows(
            chosen, book, kept, priorities, now, total_gpus, config, at
        )
        self._matrix = np.zeros((len(records), len(JOB_FEATURES)), dtype=np.float32)
        self._made = np.zeros(len(records), dtype=bool)

    def take(self, indices: Sequence[int]) -> np.ndarray:
        """The rows of ``indices``, in order."""
        index = np.asarray(indices, dtype=np.intp)
        new = index[~self._made[index]]
        if new.size:
            chosen = new.tolist()
            self._matrix[new] = self._make(
                list(map(self._records.__getitem__, chosen)), self._book_rows[new]
            )
            self._made[new] = True
        return self._matrix[index]


# --- placement (§3.3.2): the rules are MLF-H's, in controller.policy.mlfs.moves ----------


class _FitTest:
    """Whether the underloaded servers can take each candidate's tasks whole (a pre-check:
    placing them has the last word), by ``HostPool.capacity`` once per kind of candidate
    (demand, GPUs per task, servers to avoid; numbered in ``keys``) and step; the kinds that
    avoid no server all at once (``HostPool.capacities``)."""

    def __init__(self, records: Sequence[Queued], keys: Sequence[FitKey]):
        n = len(records)
        self.kind = np.fromiter(map(_FIT, records), dtype=np.intp, count=n)
        self.tasks = np.fromiter(map(_TASKS, records), dtype=np.int64, count=n)
        self.keys = keys
        used = np.unique(self.kind).tolist()
        self.open = [k for k in used if not keys[k][2]]
        self.closed = [k for k in used if keys[k][2]]
        width = len(keys[used[0]][0]) if used else 0
        self.demands = np.array([keys[k][0] for k in self.open], dtype=np.float64).reshape(
            len(self.open), width
        )
        self.per_task = np.array([keys[k][1] for k in self.open], dtype=np.int64)
        self.size = max(used) + 1 if used else 0

    def mask(self, pool: HostPool, indices: np.ndarray) -> np.ndarray:
        """Which of ``indices`` fit now."""
        kinds = self.kind[indices]
        capacity = np.zeros(self.size, dtype=np.int64)
        capacity[self.open] = pool.capacities(self.demands, self.per_task)
        if self.closed:
            for k in np.unique(kinds).tolist():
                demand, per_task, sources = self.keys[k]
                if sources:
                    capacity[k] = pool.capacity(demand, per_task, sources)
        tasks = self.tasks[indices]
        return (tasks >= 1) & (capacity[kinds] >= tasks)
