"""What an MLF-RL cycle needs of each queued job, kept between cycles (none of it changing a
decision).

Per queued view the cycle needs its :class:`~controller.policy.mlfs.rl.features.Candidate`,
its fit-test demand (``moves.queued_demand``: its task load, none if oversized), its kind for
the fit test (demand, GPUs per task, servers to avoid) and for the step rows (GPUs per task,
servers to avoid) and its task count. A :class:`QueueBook` keeps these per job in a
:class:`Queued` record while the view is the *same object* (views are immutable; the
simulator keeps a queued job's view), for the latest cycle's jobs only, and forgets them all
when what ``queued_demand`` reads of the pool (the servers' sizes, ``h_r``, the resource
types) changes. Kinds are numbered once (:class:`Kinds`), so a cycle finds its kinds with
NumPy rather than by hashing a key per job. The records' job-row columns that do not read the
clock live in one matrix, a row per record (:class:`StaticRows`).

:func:`order` sorts the candidates as MLF-H does (priority ``P`` descending, then job id)
with one NumPy sort, and one ``lexsort`` for the runs of equal ``P``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import repeat
from operator import attrgetter, eq, is_, itemgetter
from typing import Generic, TypeVar

import numpy as np

from controller.policy.base import JobView
from controller.policy.mlfs.book import Priorities, SameViews
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.moves import queued_demand
from controller.policy.mlfs.rl.features import (
    DYNAMIC,
    JOB_FEATURES,
    Candidate,
    RowBook,
    dynamic_columns,
)

K = TypeVar("K", bound=Hashable)


class Kinds(Generic[K]):
    """Numbers for kind keys: the same key, the same number, for as long as it is used. Numbers
    are never reused; :meth:`compact` starts afresh (callers number their keys again)."""

    def __init__(self) -> None:
        self.keys: list[K] = []
        self._number: dict[K, int] = {}

    def number(self, key: K) -> int:
        """The key's number (a new one for a new key)."""
        n = self._number.get(key)
        if n is None:
            n = self._number[key] = len(self.keys)
            self.keys.append(key)
        return n

    def __len__(self) -> int:
        return len(self.keys)

    def compact(self) -> None:
        """Forget every key."""
        self.keys, self._number = [], {}


FitKey = tuple[tuple[float, ...], int, frozenset[str]]  # demand, GPUs per task, to avoid
StepKey = tuple[int, frozenset[str]]  # GPUs per task (at least 1), servers to avoid


_NEVER: tuple[object, int, MlfsConfig | None] = (None, -1, None)  # columns not made yet
_MADE_FOR = attrgetter("made_for")
_SLOT = attrgetter("slot")
_SOURCE, _GPUS, _CONFIG = itemgetter(0), itemgetter(1), itemgetter(2)


class Queued:
    """One candidate's per-cycle constants (module docstring)."""

    __slots__ = ("candidate", "demand", "fit", "made_for", "slot", "step", "tasks", "view")

    def __init__(
        self,
        candidate: Candidate,
        demand: tuple[float, ...],
        fit: int,
        step: int,
        tasks: int,
        slot: int,
    ) -> None:
        self.view = candidate.view
        self.candidate = candidate
        self.demand = demand
        self.fit = fit  # number of its FitKey
        self.step = step  # number of its StepKey
        self.tasks = tasks  # Candidate.tasks
        # its row of the book's StaticRows, which holds the job row's clock-free columns
        # (job_rows), and what they were made for: the book's entry (Priorities.source),
        # total GPUs, config
        self.slot = slot
        self.made_for: tuple[object, int, MlfsConfig | None] = _NEVER


class StaticRows:
    """The records' clock-free job-row columns, one row of one matrix per record (its
    ``slot``), so a cycle gathers them with one index instead of stacking an array per
    record. Slots are handed out in order; when more than four times as many are out as the
    latest records need (plus 1,024), :meth:`compact` moves those records' rows to the front
    of a new matrix and renumbers them, so the matrix stays within a few times the queue."""

    def __init__(self, width: int) -> None:
        self.matrix = np.zeros((1024, width), dtype=np.float64)
        self.used = 0

    def slot(self) -> int:
        """A new slot (its row's contents undefined until written)."""
        if self.used == self.matrix.shape[0]:
            grown = np.zeros((2 * self.used, self.matrix.shape[1]), dtype=np.float64)
            grown[: self.used] = self.matrix
            self.matrix = grown
        self.used += 1
        return self.used - 1

    def compact(self, records: Sequence[Queued]) -> None:
        """Keep only ``records``' rows (each record once), renumbered from 0."""
        moved: dict[int, int] = {}  # old slot -> new
        for r in records:
            new = moved.get(r.slot)
            if new is None:
                new = moved[r.slot] = len(moved)
            r.slot = new
        matrix = np.zeros((max(1024, 2 * len(moved)), self.matrix.shape[1]), dtype=np.float64)
        if moved:
            old = np.fromiter(moved.keys(), dtype=np.intp, count=len(moved))
            matrix[: len(moved)] = self.matrix[old]
        self.matrix, self.used = matrix, len(moved)


class QueueBook:
    """Per queued job id: its :class:`Queued` record (module docstring)."""

    def __init__(self) -> None:
        self.fit_kinds: Kinds[FitKey] = Kinds()
        self.step_kinds: Kinds[StepKey] = Kinds()
        # the last cycle's queued views (matched by identity) and their records, aligned
        self._same = SameViews()
        self._held: list[Queued] = []
        self._pool_key: object = None
        self.static = StaticRows(len(JOB_FEATURES))  # the records' clock-free columns

    def records(
        self, views: Sequence[JobView], pool: HostPool, resources: tuple[str, ...]
    ) -> list[Queued]:
        """A record per queued view, the last cycle's where the view is the same object."""
        key = (tuple(pool.sizes.items()), pool.config.h_r, resources)
        if key != self._pool_key:
            self._pool_key, self._held = key, []
            self._same.forget()
        if len(self.fit_kinds) + len(self.step_kinds) > 4 * len(views) + 1024:
            self._held = []  # number the kinds afresh: only those in use
            self._same.forget()
            self.fit_kinds.compact()
            self.step_kinds.compact()
        at = self._same.match(views)
        held = self._held
        # held[-1] where not matched (in C): each such place is given its own record below
        out: list[Queued] = (
            list(map(held.__getitem__, at.tolist())) if held else [None] * len(views)  # type: ignore[list-item]
        )
        for i in np.flatnonzero(at < 0).tolist():
            v = views[i]
            out[i] = self.record(Candidate(v), queued_demand(v, pool, resources))
        self._held = out
        if self.static.used > 4 * len(out) + 1024:
            self.static.compact(out)
        return out

    def record(self, candidate: Candidate, demand: tuple[float, ...]) -> Queued:
        """A new record (a mover's too: ``demand`` is then its task load)."""
        per_task = candidate.view.spec.gpus_per_process
        fit = self.fit_kinds.number((demand, per_task, candidate.sources))
        step = self.step_kinds.number((max(1, per_task), candidate.sources))
        return Queued(candidate, demand, fit, step, candidate.tasks, self.static.slot())


def order(p: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """The indices of ``p`` in MLF-H's order: ``P`` descending, then id (``sorted`` with key
    ``(-P, id)``; ids are unique). One NumPy sort by ``P``, then one ``lexsort`` of the members
    of runs of equal ``P`` by (``-P``, id): they keep the positions their runs hold, which the
    ``P`` order fixes. NumPy compares strings by code point, as Python does; an id with a NUL
    (which NumPy's strings drop at the end) or a NaN (which ``sorted`` orders by position)
    falls back to ``sorted`` itself."""
    n = len(ids)
    if np.isnan(p).any():
        return _sorted_order(p, ids)
    out = np.argsort(-p, kind="stable")
    ranked = p[out]
    same = ranked[1:] == ranked[:-1]
    if same.any():
        tied = np.zeros(n, dtype=bool)
        tied[1:] = same
        tied[:-1] |= same
        at = np.flatnonzero(tied)
        members = out[at]
        names = [ids[i] for i in members.tolist()]
        if "\0" in "".join(names):
            return _sorted_order(p, ids)
        out[at] = members[np.lexsort((np.array(names), -ranked[at]))]
    return out


def _sorted_order(p: np.ndarray, ids: Sequence[str]) -> np.ndarray:
    """:func:`order` by ``sorted`` itself."""
    return np.array(sorted(range(len(ids)), key=lambda i: (-p[i], ids[i])), dtype=np.intp)


def job_rows(
    records: Sequence[Queued],
    book: RowBook,
    kept: StaticRows,
    priorities: Priorities,
    now: float,
    total_gpus: int,
    config: MlfsConfig,
    at: np.ndarray | None = None,
) -> np.ndarray:
    """``RowBook.rows`` of the records' candidates (float32, one row each), the clock-free
    columns kept in ``kept`` (the records' book's) while the record's view (its own), its book
    entry and the cluster's GPUs and config are the same objects / values; else from
    ``book``. ``at``: each record's row in ``priorities`` (``Priorities.index``) where known."""
    entries = priorities.entries
    if at is None:
        index = priorities.index
        at = np.array([index[r.view.id] for r in records], dtype=np.intp)
    sources = list(map(entries.__getitem__, at.tolist()))
    made = list(map(_MADE_FOR, records))
    n = len(records)
    # the records whose kept columns were made for these same objects / values, found
    # with C-level maps; the others (new jobs, changed inputs) are checked one by one
    same = np.fromiter(map(is_, map(_SOURCE, made), sources), dtype=bool, count=n)
    same &= np.fromiter(map(eq, map(_GPUS, made), repeat(total_gpus)), dtype=bool, count=n)
    same &= np.fromiter(map(is_, map(_CONFIG, made), repeat(config)), dtype=bool, count=n)
    for k in np.flatnonzero(~same).tolist():
        r, source = records[k], sources[k]
        held = r.made_for
        if (
            held[0] is not source
            or held[1] != total_gpus
            or (held[2] is not config and held[2] != config)
        ):
            kept.matrix[r.slot] = book.columns(r.candidate, source.first, total_gpus, config)
            r.made_for = (source, total_gpus, config)
    out = kept.matrix[np.fromiter(map(_SLOT, records), dtype=np.intp, count=n)]
    out[:, DYNAMIC] = dynamic_columns(priorities.clock[at], now, config)
    return out.astype(np.float32)
