"""The servers as MLF-H sees them during one decision (MLFS §3.3.2), placements applied as
they are chosen and undone when a job does not fit whole.

A server's point is its measured utilisation per resource type (``NodeView.utilization``);
a type not measured falls back to busy GPUs / GPUs. Its GPUs are its free ones, each with its
measured load (``NodeView.gpu_utilization``, 0 when not measured). mlsched never shares a GPU, so
only servers with enough free GPUs for a task are candidates for it, and a task is given the
least-loaded free GPUs of the chosen server whole.

Host choice is :func:`~controller.policy.mlfs.euclid.choose_host`. Candidates that host no peer
of the task and have the same point and GPU loads are interchangeable: only the one with the
smallest id is passed on, which leaves the answer unchanged (the ideal point is the same, the
others would tie with it and lose on id) and makes an idle cluster cheap to fill.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Sequence

from controller.policy.base import NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import Server, TaskLoad, choose_host, is_overloaded
from controller.policy.mlfs.priority import TaskKey

Placed = tuple[TaskKey, str, tuple[int, ...]]  # task, server, GPU indices
Key = tuple[tuple[float, ...], tuple[float, ...]]  # a server's point and sorted GPU loads
_EPS = 1e-9  # the rounding allowance of euclid's threshold tests
_SLACK = 1e-6  # capacity() rounds up rather than down


class HostPool:
    """Mutable server state for one decision (module docstring)."""

    def __init__(
        self, nodes: Iterable[NodeView], resources: Sequence[str], config: MlfsConfig
    ) -> None:
        self.config = config
        self.resources = tuple(resources)
        self.servers: dict[str, Server] = {}
        self.measured: set[str] = set()  # servers whose utilisation was measured
        self.sizes: dict[str, int] = {}  # GPUs per server
        for node in sorted(nodes, key=lambda n: n.id):
            size = len(node.gpu_indices)
            busy = (size - len(node.free_gpu_indices)) / size if size else 0.0
            point = tuple(_unit(node.utilization.get(r, busy)) for r in self.resources)
            loads = {g: _unit(node.gpu_utilization.get(g, 0.0)) for g in node.free_gpu_indices}
            self.servers[node.id] = Server(node.id, point, loads)
            self.sizes[node.id] = size
            if node.utilization:
                self.measured.add(node.id)
        self._journal: list[Server] = []  # servers as they were before each change
        self._room: dict[int, int] = {}  # room(per_task) with nothing excluded, until a change
        self._capacity: dict[tuple[tuple[float, ...], int], int] = {}  # likewise capacity()
        self._keys: dict[str, tuple[Server, Key | None]] = {}  # memo of _key

    def room(self, per_task: int, exclude: Collection[str] = ()) -> int:
        """How many ``per_task``-GPU tasks the underloaded servers could still take by count."""
        if not exclude and per_task in self._room:
            return self._room[per_task]
        h_r = self.config.h_r
        count = sum(
            len(s.gpus) // per_task
            for s in self.servers.values()
            if s.id not in exclude and len(s.gpus) >= per_task and not is_overloaded(s, h_r)
        )
        if not exclude:
            self._room[per_task] = count
        return count

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
        total = 0
        for s in self.servers.values():
            if len(s.gpus) < per_task or s.id in exclude or is_overloaded(s, self.config.h_r):
                continue
            usable = sum(1 for v in s.gpus.values() if v <= limit)
            fit = min(len(s.gpus) // per_task, -(-usable // per_task))
            for u, d in zip(s.utilisation, demand, strict=True):
                if d > 0:
                    fit = min(fit, max(0, math.floor((limit - u) / d + _SLACK)))
            total += fit
        if not exclude:
            self._capacity[key] = total
        return total

    def idle_capacity(self, demand: Sequence[float], per_task: int) -> int:
        """:meth:`capacity` on the same servers idle: every GPU free, nothing loaded."""
        limit = self.config.h_r + _EPS
        total = 0
        for size, servers in Counter(self.sizes.values()).items():
            fit = size // per_task
            for d in demand:
                if d > 0:
                    fit = min(fit, math.floor(limit / d + _SLACK))
            total += fit * servers
        return total

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
        for task in tasks:
            peers_on = {placement[k] for k in task.traffic if k in placement}
            servers = self._candidates(per_task, exclude, peers_on)
            choice = choose_host(task, servers, placement, None, self.config, self.resources)
            if choice is None:
                self._undo(mark)
                for key, _, _ in placed:
                    del placement[key]
                return None
            gpus = self._take(choice.server_id, task.demand, per_task)
            placement[task.key] = choice.server_id
            placed.append((task.key, choice.server_id, gpus))
        return placed

    def unload(self, server_id: str, demand: Sequence[float]) -> None:
        """Take a leaving task's load off its server (its GPUs are not free yet)."""
        s = self.servers[server_id]
        point = tuple(max(0.0, u - d) for u, d in zip(s.utilisation, demand, strict=True))
        self.servers[server_id] = Server(server_id, point, s.gpus)
        self._room.clear()
        self._capacity.clear()

    def _candidates(
        self, per_task: int, exclude: Collection[str], peers_on: Collection[str]
    ) -> list[Server]:
        """The servers ``choose_host`` needs to see: underloaded ones (an overloaded server is
        neither a host nor part of the ideal) with enough free GPUs, duplicates dropped."""
        seen: set[Key] = set()
        out = []
        for s in self.servers.values():  # in id order
            if len(s.gpus) < per_task or s.id in exclude:
                continue
            key = self._key(s)
            if key is None:
                continue  # overloaded
            if s.id not in peers_on:
                if key in seen:
                    continue
                seen.add(key)
            out.append(s)
        return out

    def _key(self, s: Server) -> Key | None:
        """A server's point and GPU loads, or None when it is overloaded; memoised per object."""
        cached = self._keys.get(s.id)
        if cached is not None and cached[0] is s:
            return cached[1]
        key = None
        if not is_overloaded(s, self.config.h_r):
            key = (s.utilisation, tuple(sorted(s.gpus.values())))
        self._keys[s.id] = (s, key)
        return key

    def _take(self, server_id: str, demand: Sequence[float], count: int) -> tuple[int, ...]:
        """Give the task the ``count`` least-loaded free GPUs and add its load (§3.3.2)."""
        s = self.servers[server_id]
        gpus = sorted(s.gpus, key=lambda g: (s.gpus[g], g))[:count]
        point = tuple(min(1.0, u + d) for u, d in zip(s.utilisation, demand, strict=True))
        loads = {g: v for g, v in s.gpus.items() if g not in gpus}
        self._journal.append(s)
        self.servers[server_id] = Server(server_id, point, loads)
        self._room.clear()
        self._capacity.clear()
        return tuple(sorted(gpus))

    def _undo(self, mark: int) -> None:
        while len(self._journal) > mark:
            s = self._journal.pop()
            self.servers[s.id] = s
        self._room.clear()
        self._capacity.clear()


def _unit(value: float) -> float:
    """A measured share clipped to [0, 1] (NaN: 0)."""
    return min(1.0, max(0.0, value)) if value == value else 0.0
