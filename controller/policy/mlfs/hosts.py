"""The servers as MLF-H sees them during one decision (MLFS §3.3.2), placements applied as
they are chosen and undone when a job does not fit whole.

A server's point is its measured utilisation per resource type (``NodeView.utilization``);
a type not measured falls back to busy GPUs / GPUs. Its GPUs are its free ones, each with its
measured load (``NodeView.gpu_utilization``, 0 when not measured). mlsched never shares a GPU, so
only servers with enough free GPUs for a task are candidates for it, and a task is given the
least-loaded free GPUs of the chosen server whole.

q, the migration degradation of §3.3.2 (``euclid``'s docstring), is computed per server from
the task's ``move_s`` (:func:`move_cost_s`: measured t_sr, else modelled) and remaining time.

Host choice is :func:`~controller.policy.mlfs.euclid.choose_host`'s rule, evaluated for all
servers at once: the pool keeps each server's point, free GPUs, least GPU load and overload
flag in NumPy arrays, so a task costs a few array operations rather than a Python loop over
the servers (:meth:`HostPool.choose`; a test holds it to ``choose_host``). The threshold
tests are the same IEEE sums and comparisons; the distance of the winner, and of every server
whose NumPy distance is within rounding of the least, is ``math.dist`` as in ``choose_host``,
so ties and near-ties are settled exactly as there (smallest distance, then server id).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from operator import attrgetter, is_, le
from types import MappingProxyType
from typing import Any

import numpy as np

from controller.policy.base import JobView, NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import (
    MIN_HEADROOM,
    UNKNOWN_REMAINING_S,
    HostChoice,
    Server,
    TaskLoad,
    is_overloaded,
)
from controller.policy.mlfs.priority import TaskKey

Placed = tuple[TaskKey, str, tuple[int, ...]]  # task, server, GPU indices
_EPS = 1e-9  # the rounding allowance of euclid's threshold tests
_SLACK = 1e-6  # capacity() rounds up rather than down
_NEAR = 1e-9  # relative: NumPy's and math.dist's distances differ by far less
_NODE_ID = attrgetter("id")
# q's model of t_sr before a job has a measured one (simulator/jobmodel.py's, UniSched Fig. 3)
MODEL_SUSPEND_S = 4.0
MODEL_RESUME_S = 20.0
MODEL_RESUME_PER_GPU_S = 5.0 / 14.0


class HostPool:
    """Mutable server state for one decision (module docstring)."""

    def __init__(
        self,
        nodes: Iterable[NodeView],
        resources: Sequence[str],
        config: MlfsConfig,
        memo: NodeMemo | None = None,
    ) -> None:
        self.config = config
        self.resources = tuple(resources)
        self.servers: dict[str, Server] = {}
        self.measured: set[str] = set()  # servers whose utilisation was measured
        self.sizes: dict[str, int] = {}  # GPUs per server
        memo = memo.start(self.resources, config.h_r) if memo is not None else None
        ordered = sorted(nodes, key=_NODE_ID)
        kept = memo.pool(ordered) if memo is not None else None
        if kept is not None:  # every node the same view as in the last pool: its start
            self._start(*kept)
            return
        rows: list[tuple[int, int, float, bool]] = []
        for node in ordered:
            held = memo.get(node) if memo is not None else None
            if held is None:
                size = len(node.gpu_indices)
                busy = (size - len(node.free_gpu_indices)) / size if size else 0.0
                point = tuple(_unit(node.utilization.get(r, busy)) for r in self.resources)
                loads = {g: _unit(node.gpu_utilization.get(g, 0.0)) for g in node.free_gpu_indices}
                server = _server(node.id, point, loads)
                held = (node, server, size, _summary(server, config.h_r))
                if memo is not None:
                    memo.put(held)
            _, server, size, row = held
            self.servers[node.id] = server
            self.sizes[node.id] = size
            rows.append(row)
            if node.utilization:
                self.measured.add(node.id)
        servers = list(self.servers.values())
        point = np.array([s.utilisation for s in servers], dtype=np.float64).reshape(
            len(servers), len(self.resources)
        )
        free = np.array([r[0] for r in rows], dtype=np.int64)
        usable = np.array([r[1] for r in rows], dtype=np.int64)
        least = np.array([r[2] for r in rows], dtype=np.float64)
        hot = np.array([r[3] for r in rows], dtype=bool)
        state = (dict(self.servers), dict(self.sizes), set(self.measured))
        self._start(*state, point, free, usable, least, hot)
        if memo is not None:
            memo.keep_pool(ordered, (*state, point, free, usable, least, hot))

    def _start(
        self,
        servers: dict[str, Server],
        sizes: dict[str, int],
        measured: set[str],
        point: np.ndarray,
        free: np.ndarray,
        usable: np.ndarray,
        least: np.ndarray,
        hot: np.ndarray,
    ) -> None:
        """The pool as built from its nodes (copies: the pool changes its own)."""
        self.servers, self.sizes, self.measured = dict(servers), dict(sizes), set(measured)
        self._journal: list[Server] = []  # servers as they were before each change
        self._room: dict[int, int] = {}  # room(per_task) with nothing excluded, until a change
        self._capacity: dict[tuple[tuple[float, ...], int], int] = {}  # likewise capacity()
        self._idle: dict[tuple[tuple[float, ...], int], int] = {}  # idle_capacity()
        # Per server, in id order (the order of ``servers``): point, free GPUs, free GPUs not
        # above h_r, least free-GPU load (inf: none) and whether it is overloaded.
        self._ids = list(self.servers)
        self._row = {sid: i for i, sid in enumerate(self._ids)}
        self._point = point.copy()
        self._free = free.copy()
        self._usable = usable.copy()
        self._least = least.copy()
        self._hot = hot.copy()

    def _index(self, s: Server) -> None:
        """Bring the arrays up to date with ``s`` (now ``servers[s.id]``)."""
        i = self._row[s.id]
        self._point[i] = s.utilisation
        self._free[i], self._usable[i], self._least[i], self._hot[i] = _summary(s, self.config.h_r)

    def _set(self, s: Server) -> None:
        self.servers[s.id] = s
        self._index(s)
        self._room.clear()
        self._capacity.clear()

    def _open(self, per_task: int, exclude: Collection[str]) -> np.ndarray:
        """Underloaded servers with ``per_task`` free GPUs, none in ``exclude``."""
        mask = (self._free >= per_task) & ~self._hot
        for sid in exclude:
            row = self._row.get(sid)
            if row is not None:
                mask[row] = False
        return mask

    def room(self, per_task: int, exclude: Collection[str] = ()) -> int:
        """How many ``per_task``-GPU tasks the underloaded servers could still take by count."""
        if not exclude and per_task in self._room:
            return self._room[per_task]
        count = int((self._free // per_task)[self._open(per_task, exclude)].sum())
        if not exclude:
            self._room[per_task] = count
        return count

    def slots(self, per_task: int, exclude: Collection[str] = ()) -> tuple[int, int]:
        """Free ``per_task``-GPU slots (free GPUs in whole chunks) on the underloaded servers
        outside ``exclude``: in all, and the most on one server (0: none)."""
        chunks = (self._free // per_task)[self._open(per_task, exclude)]
        return int(chunks.sum()), int(chunks.max()) if chunks.size else 0

    def capacity(
        self, demand: Sequence[float], per_task: int, exclude: Collection[str] = ()
    ) -> int:
        """How many tasks of load ``demand`` the servers can take in all, one by one: on each
        underloaded server, the fewer of its free GPUs (in tasks, a GPU loaded above ``h_r``
        refused) and the tasks it holds before a resource type would exceed ``h_r``.

        A job's tasks all have the same load, so :meth:`place` places all ``n`` of them exactly
        when this is at least ``n``: ``choose_host`` fails only when no server fits, and a
        server fits the next task until it reaches this count. (Rounding can make it count one
        more than fit, never fewer: it is a pre-check, :meth:`place` has the last word.)"""
        key = (tuple(demand), per_task)
        if not exclude and key in self._capacity:
            return self._capacity[key]
        limit = self.config.h_r + _EPS
        mask = self._open(per_task, exclude)
        fit = np.minimum(self._free // per_task, -(-self._usable // per_task))
        for m, d in enumerate(demand):
            if d > 0:
                room = np.floor((limit - self._point[:, m]) / d + _SLACK)
                fit = np.minimum(fit, np.maximum(0, room).astype(np.int64))
        total = int(fit[mask].sum())
        if not exclude:
            self._capacity[key] = total
        return total

    def capacities(self, demands: np.ndarray, per_task: np.ndarray) -> np.ndarray:
        """:meth:`capacity` (nothing excluded) for many kinds of task at once: ``demands``
        (kinds x resource types), ``per_task`` (kinds) -> tasks per kind. The same sums and
        comparisons, element by element."""
        kinds = len(per_task)
        if kinds == 0 or not self._ids:
            return np.zeros(kinds, dtype=np.int64)
        limit = self.config.h_r + _EPS
        per = per_task[:, None]
        fit = np.minimum(self._free // per, -(-self._usable // per))  # kinds x servers
        headroom = limit - self._point  # servers x types
        for m in range(demands.shape[1]):
            d = demands[:, m : m + 1]
            loaded = d[:, 0] > 0
            if loaded.any():
                room = np.floor(headroom[None, :, m] / np.where(d > 0, d, 1.0) + _SLACK)
                room = np.maximum(0, room).astype(np.int64)
                fit = np.where(loaded[:, None], np.minimum(fit, room), fit)
        usable = (self._free >= per) & ~self._hot
        return np.where(usable, fit, 0).sum(axis=1)

    def idle_capacity(self, demand: Sequence[float], per_task: int) -> int:
        """:meth:`capacity` on the same servers idle: every GPU free, nothing loaded."""
        key = (tuple(demand), per_task)
        if key in self._idle:
            return self._idle[key]
        limit = self.config.h_r + _EPS
        total = 0
        for size, servers in Counter(self.sizes.values()).items():
            fit = size // per_task
            for d in demand:
                if d > 0:
                    fit = min(fit, math.floor(limit / d + _SLACK))
            total += fit * servers
        self._idle[key] = total
        return total

    def load_summary(self) -> tuple[int, tuple[float, ...], float, int]:
        """Free GPUs, each resource type's utilisation summed over the servers (in id order,
        one after another), the largest utilisation and the number of overloaded servers."""
        sums = np.cumsum(self._point, axis=0)[-1] if len(self._ids) else self._point.sum(axis=0)
        peak = float(self._point.max()) if self._point.size else 0.0
        return int(self._free.sum()), tuple(sums.tolist()), peak, int(self._hot.sum())

    def free_map(self) -> dict[str, tuple[int, ...]]:
        """The GPUs still free (not given away in this decision), per server."""
        return {s.id: tuple(sorted(s.gpus)) for s in self.servers.values()}

    def place(
        self,
        tasks: Sequence[TaskLoad],
        per_task: int,
        placement: dict[TaskKey, str],
        exclude: Collection[str] = (),
    ) -> list[Placed] | None:
        """Place every task, one by one, each on ``choose_host``'s server (never one in
        ``exclude``); ``placement`` (task -> server of tasks already placed, for the traffic
        share) gains the new ones. None, with nothing changed, when one does not fit."""
        mark = len(self._journal)
        placed: list[Placed] = []
        under = self._open(per_task, exclude)
        fits: dict[tuple[tuple[float, ...], float], np.ndarray] = {}
        lowest = self._lowest(under)
        gaps = self._gaps(lowest)
        for task in tasks:
            key = (task.demand, task.gpu)
            if key not in fits:
                fits[key] = self._fits(task, under)
            choice = self._choose(task, under, fits[key], placement, lowest, gaps)
            if choice is None:
                self._undo(mark)
                for key, _, _ in placed:
                    del placement[key]
                return None
            row = self._row[choice.server_id]  # the only server that changes
            least = lowest.tolist()
            was_lowest = any(map(le, self.servers[choice.server_id].utilisation, least))
            gpus = self._take(choice.server_id, task.demand, per_task)
            under[row] = self._free[row] >= per_task and not self._hot[row]
            if was_lowest:  # a take only raises its server's load: others keep the minimum
                lowest = self._lowest(under)
                gaps = self._gaps(lowest)
            else:
                point = self.servers[choice.server_id].utilisation
                gaps[row] = sum([(u - m) * (u - m) for u, m in zip(point, least, strict=True)])
            for (demand, gpu), mask in fits.items():
                mask[row] = under[row] and self._fit_row(row, demand, gpu)
            placement[task.key] = choice.server_id
            placed.append((task.key, choice.server_id, gpus))
        return placed

    def choose(
        self,
        task: TaskLoad,
        per_task: int,
        placement: Mapping[TaskKey, str],
        exclude: Collection[str] = (),
    ) -> HostChoice | None:
        """``choose_host(task, servers, placement)`` over the underloaded servers with
        ``per_task`` free GPUs outside ``exclude`` (module docstring), q included."""
        under = self._open(per_task, exclude)
        lowest = self._lowest(under)
        fits = self._fits(task, under)
        return self._choose(task, under, fits, placement, lowest, self._gaps(lowest))

    def _lowest(self, under: np.ndarray) -> np.ndarray:
        """Each resource type's least utilisation over the servers of ``under`` (inf: none):
        the resource part of the ideal virtual host U_V (§3.3.2)."""
        if not under.any():
            return np.full(self._point.shape[1], math.inf)
        return self._point[under].min(axis=0)

    def _gaps(self, lowest: np.ndarray) -> np.ndarray:
        """Squared distance of each server's utilisation to ``lowest``: the resource part of
        ``_choose``'s first, rough distance (the last word is ``math.dist``'s)."""
        gaps = self._point - lowest
        return (gaps * gaps).sum(axis=1)

    def _fits(self, task: TaskLoad, under: np.ndarray) -> np.ndarray:
        """Which servers of ``under`` can take the task within ``h_r`` (``fitting_gpu``)."""
        limit = self.config.h_r + _EPS
        fits = under & ~(self._least + task.gpu > limit)
        fits &= ~(self._point + np.asarray(task.demand, dtype=np.float64) > limit).any(axis=1)
        return fits

    def _fit_row(self, row: int, demand: tuple[float, ...], gpu: float) -> bool:
        """:meth:`_fits` for one server."""
        limit = self.config.h_r + _EPS
        if self._least[row] + gpu > limit:
            return False
        point = self.servers[self._ids[row]].utilisation
        return not any(u + d > limit for u, d in zip(point, demand, strict=True))

    def _choose(
        self,
        task: TaskLoad,
        under: np.ndarray,
        fits: np.ndarray,
        placement: Mapping[TaskKey, str],
        lowest: np.ndarray,
        gaps: np.ndarray,
    ) -> HostChoice | None:
        """``choose_host`` over the rows of ``fits``; ``lowest``: :meth:`_lowest` of
        ``under`` and ``gaps``: :meth:`_gaps` of it (both kept up to date by :meth:`place`)."""
        rows = np.flatnonzero(fits)
        if rows.size == 0:  # no server fits (or none is underloaded)
            return None
        # MLFS §3.3.2: the traffic share with each server, as choose_host adds it up
        share: dict[int, float] = {}
        total = sum(task.traffic.values()) if placement else 0.0  # no peer placed: no share
        if total > 0:
            for peer, where in _placed_peers(task.traffic, placement):
                row = self._row.get(where)
                if row is not None and under[row]:
                    share[row] = share.get(row, 0.0) + task.traffic[peer] / total
        # MLFS §3.3.2: U_V = (min u_m over underloaded servers ..., max u_BW, q = 0)
        ideal = (*lowest.tolist(), max([0.0, *share.values()]), 0.0)
        # MLFS §3.3.2: min ||U_s - U_V||, first NumPy's to narrow down, then math.dist's
        rough = gaps[rows]
        if share:  # (share - max share)^2: max^2 where no peer is
            top = ideal[-2]
            extra = np.full(len(self._ids), top * top)
            for row, value in share.items():
                extra[row] = (value - top) * (value - top)
            rough += extra[rows]
        q = self._degradation(task)
        if q is not None:
            rough += q[rows] ** 2
        near = rows[rough <= rough.min() * (1 + _NEAR) + 1e-300]
        best: HostChoice | None = None
        for row in near.tolist():  # in id order: ties go to the smaller id
            s = self.servers[self._ids[row]]
            q_row = 0.0 if q is None else float(q[row])
            distance = math.dist((*s.utilisation, share.get(row, 0.0), q_row), ideal)
            if best is None or distance < best.distance:
                gpu = min(s.gpus, key=lambda g: (s.gpus[g], g))
                best = HostChoice(s.id, gpu, distance)
        return best

    def _degradation(self, task: TaskLoad) -> np.ndarray | None:
        """q per server row (``euclid.degradation``, the same operations); None: 0 for all
        (nothing to restore, or no bandwidth type)."""
        if task.move_s <= 0 or "bandwidth" not in self.resources:
            return None
        busy = self._point[:, self.resources.index("bandwidth")]
        cost = task.move_s / np.maximum(1.0 - busy, MIN_HEADROOM)
        left = UNKNOWN_REMAINING_S if task.remaining_s is None else max(0.0, task.remaining_s)
        return cost / (cost + left)

    def unload(self, server_id: str, demand: Sequence[float]) -> None:
        """Take a leaving task's load off its server (its GPUs are not free yet)."""
        s = self.servers[server_id]
        point = tuple(max(0.0, u - d) for u, d in zip(s.utilisation, demand, strict=True))
        self._set(_server(server_id, point, s.gpus))

    def _take(self, server_id: str, demand: Sequence[float], count: int) -> tuple[int, ...]:
        """Give the task the ``count`` least-loaded free GPUs and add its load (§3.3.2)."""
        s = self.servers[server_id]
        gpus = sorted(s.gpus, key=lambda g: (s.gpus[g], g))[:count]
        point = tuple([min(1.0, u + d) for u, d in zip(s.utilisation, demand, strict=True)])
        loads = {g: v for g, v in s.gpus.items() if g not in gpus}
        self._journal.append(s)
        self._set(_server(server_id, point, loads))
        return tuple(sorted(gpus))

    def _undo(self, mark: int) -> None:
        while len(self._journal) > mark:
            self._set(self._journal.pop())


class NodeMemo:
    """A pool's servers kept between decisions (on a policy object), one per node view: a
    node whose view is the *same object* as last time (views are immutable; the simulator
    keeps an unchanged node's view) gets its :class:`Server` and summary row back instead of
    being read again. Servers are immutable, so a pool that changes one replaces it and the
    memo's stays valid. Kept for the latest pool's nodes only, and only while the resource
    types and ``h_r`` are the same."""

    def __init__(self) -> None:
        self._key: tuple[tuple[str, ...], float] | None = None
        self._held: dict[str, tuple[NodeView, Server, int, tuple[int, int, float, bool]]] = {}
        self._next: dict[str, tuple[NodeView, Server, int, tuple[int, int, float, bool]]] = {}
        # the latest pool's nodes (sorted by id) and its start (HostPool._start's arguments)
        self._pool: tuple[list[NodeView], tuple[Any, ...]] | None = None

    def start(self, resources: tuple[str, ...], h_r: float) -> NodeMemo:
        """A new pool: keep last pool's nodes (all of them forgotten if the key changed)."""
        if self._key != (resources, h_r):
            self._key, self._next, self._pool = (resources, h_r), {}, None
        self._held, self._next = self._next, {}
        return self

    def get(
        self, node: NodeView
    ) -> tuple[NodeView, Server, int, tuple[int, int, float, bool]] | None:
        """The node's kept entry if its view is the same object, else None."""
        held = self._held.get(node.id)
        if held is None or held[0] is not node:
            return None
        self._next[node.id] = held
        return held

    def put(self, held: tuple[NodeView, Server, int, tuple[int, int, float, bool]]) -> None:
        """Keep a node's new entry (node view, server, GPUs, summary row)."""
        self._next[held[0].id] = held

    def pool(self, nodes: Sequence[NodeView]) -> tuple[Any, ...] | None:
        """The last pool's start (``keep_pool``) if ``nodes`` are its nodes, the same view
        objects in the same order; every node is then kept for the next pool."""
        last = self._pool
        if last is None or len(last[0]) != len(nodes) or not all(map(is_, last[0], nodes)):
            return None
        self._next = self._held
        return last[1]

    def keep_pool(self, nodes: Sequence[NodeView], start: tuple[Any, ...]) -> None:
        """Remember a new pool's nodes and its start (never changed afterwards)."""
        self._pool = (list(nodes), start)


def move_cost_s(view: JobView) -> float:
    """What moving the job's tasks costs, for q (``euclid.degradation``): 0 for a job with
    nothing to restore (never ran); else its measured mean suspend + resume overhead t_sr
    (``JobView.sr_overhead_s``), or, before one is measured, the model the simulator uses
    (UniSched Fig. 3: suspend 4 s, resume 20 s + 5/14 s per GPU)."""
    if view.attempt == 0:
        return 0.0
    if view.sr_overhead_s is not None and math.isfinite(view.sr_overhead_s):
        return max(0.0, view.sr_overhead_s)
    return MODEL_SUSPEND_S + MODEL_RESUME_S + MODEL_RESUME_PER_GPU_S * view.gpus


def _placed_peers(
    traffic: Mapping[TaskKey, float], placement: Mapping[TaskKey, str]
) -> list[tuple[TaskKey, str]]:
    """The task's peers that have a server, with it: found by walking the smaller of the two
    mappings (the peers of a 32-task job are walked once per task otherwise). In the traffic's
    order when it is walked, else in the placement's, which for a queued job's tasks (placed
    by rank) is the same order; for a moving job's (its staying tasks first) the shares can
    be summed in another order than ``choose_host``'s, an ulp apart where volumes differ."""
    if len(placement) < len(traffic):
        return [(peer, where) for peer, where in placement.items() if peer in traffic]
    return [(peer, where) for peer in traffic if (where := placement.get(peer)) is not None]


def _server(server_id: str, point: tuple[float, ...], gpus: Mapping[int, float]) -> Server:
    """``Server(server_id, point, gpus)`` without ``__init__``'s checks, which cost more than
    the rest of a cycle's bookkeeping: every value here is a share clipped to [0, 1]."""
    s = object.__new__(Server)
    s.__dict__.update(id=server_id, utilisation=point, gpus=MappingProxyType(dict(gpus)))
    return s


def _summary(s: Server, h_r: float) -> tuple[int, int, float, bool]:
    """A server's free GPUs, those not loaded above ``h_r``, the least load among them (inf:
    none) and whether the server is overloaded."""
    limit = h_r + _EPS
    loads = s.gpus.values()
    usable = sum(1 for v in loads if v <= limit)
    return len(loads), usable, min(loads, default=math.inf), is_overloaded(s, h_r)


def _unit(value: float) -> float:
    """A measured share clipped to [0, 1] (NaN: 0)."""
    return min(1.0, max(0.0, value)) if value == value else 0.0
