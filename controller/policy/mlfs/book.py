"""Eq. 6 priorities of many jobs per cycle, with what does not move between cycles kept.

A job's Eq. 2/4 features (:func:`~controller.policy.mlfs.jobs.job_features`) and its tasks'
``P^ML`` (Eq. 3: urgency, iteration, losses, partition shares, the graph) change only when the
job's own inputs change; only ``P^C`` (Eq. 4) moves with the clock, through the waiting time and
``d - t``. A :class:`PriorityBook` keeps, per job id, the features and Eq. 3 sums together with
the inputs they came from (:func:`inputs`); a job whose inputs are unchanged costs a dictionary
look-up and a tuple comparison, and ``P^C`` and ``P`` of all jobs are then computed at once
with NumPy. Only the jobs of the latest cycle are kept, so the book is bounded by live jobs.

The result is the one :func:`~controller.policy.mlfs.priority.task_priorities` gives, to the
bit: Eq. 4 and Eq. 6 are the same IEEE operations in the same order (NumPy's element-wise
``+ - * /`` round as Python's do), and a task graph's Eq. 5 sums run in Python over its
children in order, as :func:`~controller.policy.mlfs.priority._discounted_sums` does. A test
holds the two together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from operator import attrgetter

import numpy as np

from controller.policy.base import JobView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.jobs import job_template
from controller.policy.mlfs.priority import (
    TaskFeatures,
    TaskKey,
    TaskPriority,
    loss_ratio,
)

Inputs = tuple[object, ...]
_ID = attrgetter("id")
_ORDER = attrgetter("order")


def inputs(view: JobView, queued: bool) -> Inputs:
    """What :func:`~controller.policy.mlfs.jobs.job_features` reads of a job besides the
    clock. Compared with ``==``, which finds an unchanged spec by identity first."""
    return (
        view.spec,
        view.iteration,
        view.losses,
        view.submit_time,
        view.estimated_remaining_s,
        view.queued_since if queued else None,
    )


@dataclass(eq=False)
class _Entry:
    """A job's now-independent part: task 0's features (waiting time 0), each task's Eq. 3
    ``P^ML``, the graph in an order that puts every task after its children (None: one
    task), and the absolute deadline and remaining time (infinity: none). ``view``: the
    latest view object found to have these inputs (views are immutable: the same object
    has the same inputs)."""

    view: JobView
    queued: bool
    inputs: Inputs
    first: TaskFeatures
    keys: tuple[TaskKey, ...]
    ml: tuple[float, ...]
    children: tuple[tuple[int, ...], ...]
    order: tuple[int, ...] | None
    deadline: float
    remaining: float
    queued_since: float | None
    # what _evaluate reads, as one row: queued_since (0: none), 1 if none, deadline,
    # remaining, task 0's P^ML, 1 if the remaining time is unknown
    row: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        since = self.queued_since
        self.row = (
            0.0 if since is None else since,
            float(since is None),
            self.deadline,
            self.remaining,
            self.ml[0],
            float(self.first.remaining_s is None),
        )


def _entry(view: JobView, queued: bool, key: Inputs, config: MlfsConfig) -> _Entry:
    first, shares, children = job_template(view, view.queued_since, queued)  # waiting 0
    # MLFS Eq. 2 as priority.own_ml_priority: L^J * (1 / I) * ratio * S_k, left to right
    scale = first.urgency / first.iteration * loss_ratio(first)
    if len(shares) == 1:
        order = None
        ml = (scale * first.partition,)
    else:
        order = _post_order(children)
        sums = [0.0] * len(shares)
        for task in order:  # MLFS Eq. 3, as priority._discounted_sums adds it up
            value = scale * shares[task]
            for child in children[task]:
                value += config.gamma * sums[child]
            sums[task] = value
        ml = tuple(sums)
    return _Entry(
        view=view,
        queued=queued,
        inputs=key,
        first=first,
        keys=tuple((view.id, k) for k in range(len(shares))),
        ml=ml,
        children=children,
        order=order,
        deadline=math.inf if first.deadline is None else first.deadline,
        remaining=math.inf if first.remaining_s is None else first.remaining_s,
        queued_since=view.queued_since if queued else None,
    )


@lru_cache(maxsize=1024)
def _post_order(children: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The tasks, each after all its children; :class:`ValueError` on a cycle (never from
    :func:`~controller.policy.mlfs.jobs.task_graph`, which drops a cyclic graph). Memoised:
    a pure function of the graph, which jobs of one model and size share."""
    order: list[int] = []
    state = [0] * len(children)  # 0 new, 1 on the path, 2 done
    for root in range(len(children)):
        if state[root]:
            continue
        state[root] = 1
        stack = [(root, iter(children[root]))]
        while stack:
            task, kids = stack[-1]
            for child in kids:
                if state[child] == 1:
                    raise ValueError(f"dependency cycle through task {child}")
                if state[child] == 0:
                    state[child] = 1
                    stack.append((child, iter(children[child])))
                    break
            else:
                stack.pop()
                state[task] = 2
                order.append(task)
    return tuple(order)


class Priorities:
    """One cycle's priorities: ``tasks`` maps every task key (a data-parallel job: its task
    0) to ``P``; ``job`` maps each job id to its largest task ``P`` (ties: the lower task).

    Per job, also by row (``index``): ``clock``, a (jobs x 6) array of what the clock-dependent
    features read (the deadline, infinity if none; the remaining time, 0 if unknown; the
    waiting time; the best task's ``P``, ``P^ML`` and ``P^C``)."""

    def __init__(self, entries: Sequence[_Entry], ids: Sequence[str], clock: np.ndarray):
        self.tasks: Mapping[TaskKey, float] = {}
        self._job: dict[str, float] | None = {}
        self._totals: list[float] = []  # per row, where ``job`` is made when first read
        self.index: dict[str, int] = dict(zip(ids, range(len(ids)), strict=True))
        self.clock = clock
        self.entries = entries  # per row: the job's kept Eq. 6 inputs (:meth:`source`)
        # the queued views given, when rows 0..len-1 are theirs in order (no id twice)
        self.head: Sequence[JobView] | None = None

    @property
    def job(self) -> dict[str, float]:
        """Each job id's ``P`` (its best task's)."""
        if self._job is None:
            self._job = dict(zip(self.index, self._totals, strict=True))
        return self._job

    @job.setter
    def job(self, value: dict[str, float]) -> None:
        self._job = value

    def flat(self, totals: list[float]) -> None:
        """No job has a task graph: row ``i``'s job has one task key, ``(id, 0)``, with
        ``P`` ``totals[i]``; ``tasks`` and ``job`` read them when asked (no mapping built per
        cycle that no one reads)."""
        self._totals = totals
        self._job = None
        self.tasks = _FirstTasks(self.index, totals)

    def source(self, job_id: str) -> object:
        """A token that stays the same object while the job's Eq. 6 inputs are unchanged
        (between cycles of one :class:`PriorityBook`): for callers that keep more per job."""
        return self.entries[self.index[job_id]]

    def best(self, job_id: str) -> TaskPriority:
        """The job's priority as :class:`TaskPriority`: that of its best task."""
        row = self.clock[self.index[job_id]]
        return TaskPriority(float(row[4]), float(row[5]), self.job[job_id])

    def parts(self, job_id: str) -> tuple[TaskFeatures, float]:
        """Task 0's features with waiting time 0, and the waiting time now (:meth:`first`
        puts the two together)."""
        i = self.index[job_id]
        return self.entries[i].first, float(self.clock[i, 2])

    def first(self, job_id: str) -> TaskFeatures:
        """Task 0's Eq. 2/4 features, waiting time included."""
        f, waiting = self.parts(job_id)
        if waiting == f.waiting_s:
            return f
        g = object.__new__(TaskFeatures)  # as jobs._variant: valid by construction
        g.__dict__.update(f.__dict__)
        g.__dict__["waiting_s"] = waiting
        return g


class _FirstTasks(Mapping[TaskKey, float]):
    """``Priorities.tasks`` when no job has a task graph: ``(id, 0)`` -> that job's ``P``,
    read from the row index and the per-row values (no tuple key made per job)."""

    def __init__(self, index: Mapping[str, int], totals: Sequence[float]) -> None:
        self._index = index
        self._totals = totals

    def __getitem__(self, key: TaskKey) -> float:
        job_id, task = key
        if task != 0:
            raise KeyError(key)
        return self._totals[self._index[job_id]]

    def get(self, key: TaskKey, default: float | None = None) -> float | None:  # type: ignore[override]
        """The task's ``P``, ``default`` for a key not here (as ``dict.get``)."""
        job_id, task = key
        i = self._index.get(job_id) if task == 0 else None
        return default if i is None else self._totals[i]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 2 and key[1] == 0 and key[0] in self._index

    def __iter__(self) -> Iterator[TaskKey]:
        return zip(self._index, repeat(0))

    def __len__(self) -> int:
        return len(self._index)


class SameViews:
    """Where each view of a list stood in the list given the call before, matched by object
    identity (views are immutable: the same object has the same inputs), with NumPy rather
    than a look-up per view. The last list is held, so no other object can take one of its
    views' addresses (``id``) while they are compared."""

    def __init__(self) -> None:
        self._views: list[object] = []
        self._sorted = np.empty(0, dtype=np.int64)  # their id()s, sorted
        self._order = np.empty(0, dtype=np.intp)  # their positions, in that order

    def match(self, views: Sequence[object]) -> np.ndarray:
        """Per view, its position in the previous call's list (the first, if it was there
        twice), -1 if it was not there; ``views`` is remembered for the next call."""
        n = len(views)
        ids = np.fromiter(map(id, views), dtype=np.int64, count=n)
        if self._sorted.size and n:
            at = np.minimum(np.searchsorted(self._sorted, ids), self._sorted.size - 1)
            out = np.where(self._sorted[at] == ids, self._order[at], -1)
        else:
            out = np.full(n, -1, dtype=np.intp)
        self._views = list(views)
        self._order = np.argsort(ids, kind="stable")
        self._sorted = ids[self._order]
        return out

    def forget(self) -> None:
        """Match nothing next time."""
        self.__init__()  # type: ignore[misc]


class PriorityBook:
    """Per-job memory of the now-independent parts of Eq. 6 (module docstring)."""

    def __init__(self, config: MlfsConfig) -> None:
        self.config = config
        self._entries: dict[str, _Entry] = {}
        # the last call's queued views (SameViews), their entries and Eq. 6 rows (_Entry.row),
        # kept only when that call had no job id twice
        self._same = SameViews()
        self._queued: list[_Entry] = []
        self._table = np.empty((0, 6), dtype=np.float64)

    def __len__(self) -> int:
        return len(self._entries)

    def priorities(
        self, queued: Sequence[JobView], active: Sequence[JobView], now: float
    ) -> Priorities:
        """Eq. 6 for the tasks of ``queued`` (waiting time counted) and ``active`` jobs at
        ``now``; a job id given twice counts as the last one given."""
        old = self._entries
        # A queued view that was queued last call, the same object, has the same entry (the
        # loop below would find it by id and identity); the others go through that loop.
        at = self._same.match(queued)
        kept = self._queued
        # kept[-1] where not matched (in C): each such place is given its own entry below
        listed: list[_Entry | None] = (
            list(map(kept.__getitem__, at.tolist())) if kept else [None] * len(queued)
        )
        missing = np.flatnonzero(at < 0).tolist()
        for i in missing:
            listed[i] = self._entry_for(old, queued[i], True)
        entries: dict[str, _Entry] = dict(zip(map(_ID, queued), listed, strict=True))  # type: ignore[arg-type]
        unique = len(entries) == len(queued)
        if not unique:  # a job id twice: one by one, as the loop below does
            entries = {}
            for view in queued:
                entries[view.id] = self._entry_for(old, view, True)
        for view in active:
            entries[view.id] = self._entry_for(old, view, False)
        self._entries = entries
        table = None
        if unique and len(entries) == len(queued) + len(active):
            # the queued jobs' Eq. 6 rows: last call's where kept, the others' own
            table = np.empty((len(entries), 6), dtype=np.float64)
            hit = at >= 0
            table[: len(queued)][hit] = self._table[at[hit]]
            for i in missing:
                table[i] = listed[i].row  # type: ignore[union-attr]
            self._queued = listed  # type: ignore[assignment]
        else:
            self._same.forget()
            self._queued = []
        out = self._evaluate(entries, now, table, len(queued) if table is not None else 0)
        if table is not None:
            self._table = table[: len(queued)].copy()
            out.head = queued
        return out

    def _entry_for(self, old: Mapping[str, _Entry], view: JobView, queued: bool) -> _Entry:
        """The view's entry: ``old``'s if its inputs are unchanged, else a new one."""
        entry = old.get(view.id)
        if entry is None or entry.view is not view or entry.queued != queued:
            key = inputs(view, queued)
            if entry is None or entry.queued != queued or entry.inputs != key:
                entry = _entry(view, queued, key, self.config)
            entry.view = view
        return entry

    def _evaluate(
        self,
        entries: Mapping[str, _Entry],
        now: float,
        table: np.ndarray | None = None,
        filled: int = 0,
    ) -> Priorities:
        """Eq. 6 of ``entries``; ``table``: their rows (``_Entry.row``), the first ``filled``
        of them already in place (the others are filled here)."""
        config = self.config
        unit, floor, a = config.time_unit_s, config.min_horizon_s, config.alpha
        values = list(entries.values())
        ids = list(entries)
        n = len(values)
        if table is None:
            table, filled = np.empty((n, 6), dtype=np.float64), 0
        if filled < n:
            rest = chain.from_iterable([e.row for e in values[filled:]])
            table[filled:] = np.fromiter(rest, dtype=np.float64, count=6 * (n - filled)).reshape(
                n - filled, 6
            )
        since = np.where(table[:, 1] == 1.0, now, table[:, 0])
        deadline, remaining, ml = table[:, 2], table[:, 3], table[:, 4]
        # MLFS Eq. 4, as priority.own_computation_priority: max(x, y) keeps x unless y > x
        waited = now - since
        waiting = np.where(waited > 0.0, waited, 0.0)
        to_deadline = deadline - now
        c = config.gamma_w * waiting / unit
        c = c + config.gamma_d * unit / np.where(floor > to_deadline, floor, to_deadline)
        c = c + config.gamma_r * unit / np.where(floor > remaining, floor, remaining)
        total = a * ml + (1 - a) * c  # MLFS Eq. 6
        unknown = table[:, 5] == 1.0
        clock = np.stack(
            [deadline, np.where(unknown, 0.0, remaining), waiting, total, ml, c], axis=1
        ).reshape(len(values), 6)
        out = Priorities(values, ids, clock)
        totals = total.tolist()
        orders = list(map(_ORDER, values))
        if orders.count(None) == n:  # no task graph: each job's task 0 is (its id, 0)
            out.flat(totals)
            return out
        own_c = c.tolist()
        for i, (job_id, e) in enumerate(entries.items()):
            if e.order is None:
                out.tasks[e.keys[0]] = totals[i]
                out.job[job_id] = totals[i]
            else:
                self._graph(out, i, job_id, e, own_c[i])
        return out

    def _graph(self, out: Priorities, row: int, job_id: str, e: _Entry, own_c: float) -> None:
        """A task graph's Eq. 5 sums and Eq. 6 per task (as ``_discounted_sums``)."""
        gamma, a = self.config.gamma, self.config.alpha
        c = [0.0] * len(e.keys)
        assert e.order is not None
        for task in e.order:
            value = own_c
            for child in e.children[task]:
                value += gamma * c[child]
            c[task] = value
        best = None
        for task, key in enumerate(e.keys):
            p = a * e.ml[task] + (1 - a) * c[task]
            out.tasks[key] = p
            if best is None or p > best[0]:
                best = (p, e.ml[task], c[task])
        assert best is not None
        out.job[job_id] = best[0]
        out.clock[row, 3:] = best
