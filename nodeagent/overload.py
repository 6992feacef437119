"""The node's load as MLFS sees it, and the overload detector (MLFS §3.3.2-3.3.3).

Load (:func:`measure_load`): shares (0-1) of this agent's capacities per resource type
("gpu", "cpu", "memory", "bandwidth"), for the server (``U_s``) and for every running task
(``U_k``), from the samples the agent already takes (NVML and psutil, ``metrics.py``).

- **Capacities** are what the agent counts as 100%: ``--cpu-capacity`` cores,
  ``--memory-capacity`` bytes and ``--bandwidth-capacity`` bytes/s, by default the machine's
  (:func:`machine_capacity`: every CPU, all memory, the summed link speed of the non-loopback
  interfaces that are up; 0 when no speed is known, which makes the bandwidth share 0).
- **Scope.** ``tasks`` (default): the server's load is the sum of this agent's tasks, so load
  that is not mlsched's (a CPU hog, data loading outside a task, another agent's tasks on the
  same machine) never makes the server overloaded, and a real GPU no task holds counts 0.
  ``machine`` (an operator's explicit choice, ``--load-scope machine``): the server's CPU,
  memory, network and GPUs are the whole machine's, whoever uses them. Under ``tasks`` the
  network is the sum of the tasks' measured traffic, or the node's (while a task runs) where
  traffic cannot be attributed (below).
- **Per task**: CPU is the CPU time of the task's process tree over the sample interval (one
  busy core = 1 core), memory its summed resident set, network the TCP bytes its processes'
  sockets moved (``metrics.TaskMetricsSampler``, ``sockstats.py``: the kernel's per-socket
  counters, loopback peers left out). Where those counters cannot be read (not Linux, an old
  kernel, netlink refused; logged once) the node's non-loopback rate is split equally among
  the running tasks.
- **GPUs**: a real GPU's utilisation is NVML's. A virtual GPU measures nothing; its
  utilisation is the summed CPU share of the tasks on it (a task's cores over the CPU capacity,
  split over the virtual GPUs it holds), since a task on a virtual GPU trains on the CPU. Each
  task's own share of a GPU is that CPU share on a virtual GPU; on a real one (NVML gives no
  per-task utilisation here) the GPU's utilisation split in proportion to the slots each task
  holds on it, all of it for a task alone on its GPU. The server's "gpu" share is the mean over
  its physical GPUs; a task's "gpu" demand is the sum of its own shares over the server's GPU
  count. On the wire (``gpu_utilization``, a task's ``gpu_index``) GPUs are the slots the
  controller knows, each reporting its physical GPU's utilisation; a task's ``gpu_index`` is
  its busiest slot and ``gpu_utilization`` that GPU's.
- **GPU sharing** (``--gpu-slices K``, ``nodeagent/gpus.py`` ``SlicedGpus``): the agent offers
  each GPU as K time-sliced slots; slot ``s`` is on physical GPU ``s // K``. With K = 1 (the
  default) slots are GPUs and every rule here is as without sharing.

Detector (:class:`OverloadDetector`): the server is overloaded when a resource type or a GPU
is above ``h_r`` (§3.3.2). Once that holds for ``samples`` samples in a row (no flapping on one
busy moment), :func:`~controller.policy.mlfs.euclid.choose_migrations` picks the tasks to move
out: the Euclidean distance to the ideal virtual task, among the lowest-priority ``p_s`` of the
tasks on overloaded GPUs while a GPU is overloaded, repeated until the server would not be
overloaded (§3.3.3). Tasks already asked for count as gone (their load is taken off first) and
are not asked for again until they leave or ``cooldown_s`` passes.

Hysteresis: once a request went out, the server is *disarmed*: it picks no further task until
every resource type and GPU that was above ``h_r`` then has fallen to ``clear_below`` or less
(default ``h_r`` - 0.1); then the count of overloaded samples starts again from 0. So a server
relieved to just under ``h_r`` that a new task takes over it again is not asked to move one
more task each time (flip-flopping). While disarmed, a task of that request still here after
its cool-down is asked for again (the controller may have lost or refused the request): a
retry, not a new choice.

Only a physical GPU that several running tasks share (hold a slot of) counts for the per-GPU
rule. The paper's tasks share GPUs; with whole GPUs (K = 1) a GPU busy with its one task is
that task using what it holds: moving it moves the load along (and no host could take it:
§3.3.2's host check adds the task's GPU load to the target GPU). So, as in MLF-H's policy, a
GPU held by one task never makes the server overloaded; its utilisation still counts in the
server's "gpu" share. On a sliced node (K > 1) two tasks on the slots of one GPU share it: the
GPU's utilisation can pass ``h_r``, and the p_s rule then chooses among the lowest-priority
tasks on it. A task's load on that GPU for the rule (what leaving takes off it) is its own
share of it.

Priorities: the controller sends each task's priority in its policy's order (Eq. 6 under
MLFS; ``controller/policy/ranks.py``, ``nodeagent/priorities.py``). A task that never received
one falls back to the old stand-in, the start of its attempt (the oldest lowest: a task that
has trained longest has had its largest loss reductions already, which Eq. 2 rewards least),
below every task with a received priority. Suspending or stopping tasks are not candidates;
traffic between tasks is not measured, so every traffic share is 0.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import psutil

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import (
    DEFAULT_RESOURCES,
    Server,
    TaskLoad,
    choose_migrations,
    remove,
)
from nodeagent.clock import Clock, SystemClock
from nodeagent.gpus import physical_indices
from nodeagent.model import NodeMetrics, RunningTask, TaskMetrics, TaskRef
from nodeagent.priorities import fallback

log = logging.getLogger(__name__)

RESOURCES = DEFAULT_RESOURCES  # ("gpu", "cpu", "memory", "bandwidth")
SCOPES = ("tasks", "machine")  # the first is the default
_EPS = 1e-9  # as euclid: reaching h_r exactly is not an overload


@dataclass(frozen=True)
class Capacity:
    """What counts as 100% of each resource type on this node."""

    cpu_cores: float
    memory_bytes: int
    bandwidth_bytes_per_s: float = 0.0  # 0: unknown


def machine_capacity(
    cpu_cores: float | None = None,
    memory_bytes: int | None = None,
    bandwidth_bytes_per_s: float | None = None,
) -> Capacity:
    """The given capacities, the machine's where one is None."""
    if cpu_cores is None:
        cpu_cores = float(os.cpu_count() or 1)
    if memory_bytes is None:
        memory_bytes = int(psutil.virtual_memory().total)
    if bandwidth_bytes_per_s is None:
        bandwidth_bytes_per_s = link_speed_bytes_per_s()
    return Capacity(cpu_cores, memory_bytes, bandwidth_bytes_per_s)


def link_speed_bytes_per_s() -> float:
    """Summed speed of the non-loopback interfaces that are up (0 when none is known)."""
    try:
        stats = psutil.net_if_stats()
    except (OSError, psutil.Error):
        return 0.0
    mbit = sum(
        s.speed
        for name, s in stats.items()
        if s.isup and s.speed > 0 and not (name == "lo" or name.startswith("lo:"))
    )
    return mbit * 1e6 / 8


@dataclass(frozen=True)
class TaskShare:
    """One task's demand: shares of this node's capacities."""

    ref: TaskRef
    demand: Mapping[str, float]
    gpu_index: int | None
    gpu_utilization: float
    priority: float
    movable: bool
    gpu_indices: tuple[int, ...] = ()  # every GPU slot it holds
    # its own load on each physical GPU it holds (None: each GPU's whole load)
    gpu_shares: Mapping[int, float] | None = None


@dataclass(frozen=True)
class NodeLoadReport:
    """The server's shares, per resource type and per GPU, and its tasks'."""

    utilization: Mapping[str, float]
    gpu_utilization: Mapping[int, float]
    capacity: Capacity
    tasks: tuple[TaskShare, ...] = ()
    gpu_slices: int = 1  # GPU slots per physical GPU: slot s is on GPU s // gpu_slices


def _share(used: float, capacity: float) -> float:
    if capacity <= 0 or not math.isfinite(used):
        return 0.0
    return min(1.0, max(0.0, used / capacity))


def measure_load(
    node: NodeMetrics,
    tasks: Sequence[tuple[RunningTask, TaskMetrics]],
    capacity: Capacity,
    *,
    scope: str = "tasks",
    virtual_gpus: Collection[int] = (),
    machine_cpus: int | None = None,
    priorities: Mapping[TaskRef, float] | None = None,
    gpu_slices: int = 1,
) -> NodeLoadReport:
    """The load of the server and of each task (module docstring) from one sample.
    ``priorities``: each task's for the overload choice (``nodeagent/priorities.py``); a task
    left out is ranked by the start of its attempt (None: every task). ``gpu_slices``: the
    slots per physical GPU (``--gpu-slices``); slot ``s`` is on GPU ``s // gpu_slices``."""
    if scope not in SCOPES:
        raise ValueError(f"load scope must be one of {SCOPES}, got {scope!r}")
    cpus = machine_cpus or os.cpu_count() or 1
    net = max(0.0, node.net_rx_bytes_per_s) + max(0.0, node.net_tx_bytes_per_s)
    attributed = bool(tasks) and all(m.net_measured for _, m in tasks)
    equal_share = net / len(tasks) if tasks else 0.0
    task_net = {t.ref: max(0.0, m.net_bytes_per_s) if attributed else equal_share for t, m in tasks}
    cores = {t.ref: max(0.0, m.cpu_percent) / 100.0 for t, m in tasks}
    slices = max(1, gpu_slices)
    gpu_util, own = _gpu_loads(node, tasks, capacity, cores, virtual_gpus, slices)
    gpu_count = len(gpu_util)  # physical GPUs
    given = dict(priorities or {})
    ranks = {**fallback([t for t, _ in tasks if t.ref not in given], given.values()), **given}
    slot_util = {g.index: gpu_util[g.index // slices] for g in node.gpus}
    shares = []
    for task, metrics in tasks:
        held = [i for i in task.gpu_indices if i in slot_util]
        busiest = min(held, key=lambda i: (-slot_util[i], i)) if held else None
        mine = own.get(task.ref, {})
        demand = {
            "gpu": min(1.0, sum(mine.values()) / gpu_count) if gpu_count else 0.0,
            "cpu": _share(cores[task.ref], capacity.cpu_cores),
            "memory": _share(metrics.memory_rss_bytes, capacity.memory_bytes),
            "bandwidth": _share(task_net[task.ref], capacity.bandwidth_bytes_per_s),
        }
        shares.append(
            TaskShare(
                ref=task.ref,
                demand=demand,
                gpu_index=busiest,
                gpu_utilization=slot_util[busiest] if busiest is not None else 0.0,
                priority=ranks[task.ref],
                movable=task.movable,
                gpu_indices=tuple(held),
                gpu_shares=dict(mine),
            )
        )
    if scope == "machine":
        used_cores = max(0.0, node.cpu_percent) / 100.0 * cpus
        used_memory = float(node.memory_used_bytes)
        used_net = net
        used_gpus = sum(gpu_util.values())
    else:
        used_cores = sum(cores.values())
        used_memory = float(sum(m.memory_rss_bytes for _, m in tasks))
        used_net = sum(task_net.values()) if attributed else (net if tasks else 0.0)
        held_gpus = {gpu for mine in own.values() for gpu in mine}
        used_gpus = sum(u for p, u in gpu_util.items() if p in held_gpus)
    utilization = {
        "gpu": used_gpus / gpu_count if gpu_count else 0.0,
        "cpu": _share(used_cores, capacity.cpu_cores),
        "memory": _share(used_memory, capacity.memory_bytes),
        "bandwidth": _share(used_net, capacity.bandwidth_bytes_per_s),
    }
    return NodeLoadReport(utilization, slot_util, capacity, tuple(shares), slices)


def _gpu_loads(
    node: NodeMetrics,
    tasks: Sequence[tuple[RunningTask, TaskMetrics]],
    capacity: Capacity,
    cores: Mapping[TaskRef, float],
    virtual_gpus: Collection[int],
    slices: int,
) -> tuple[dict[int, float], dict[TaskRef, dict[int, float]]]:
    """Every physical GPU's utilisation, and each task's own part of the GPUs it holds
    (module docstring: NVML's for a real GPU, split by the slots held; the CPU share of its
    tasks for a virtual one)."""
    util: dict[int, float] = {}
    virtual: set[int] = set()
    for g in node.gpus:
        gpu = g.index // slices
        if g.index in virtual_gpus:
            virtual.add(gpu)
            util.setdefault(gpu, 0.0)
        else:
            value = min(1.0, max(0.0, g.utilization_percent / 100.0))
            util[gpu] = max(util.get(gpu, 0.0), value)
    slots_held: dict[int, int] = {}
    for task, _ in tasks:
        for i in task.gpu_indices:
            if i // slices in util:
                slots_held[i // slices] = slots_held.get(i // slices, 0) + 1
    own: dict[TaskRef, dict[int, float]] = {}
    for task, _ in tasks:
        mine: dict[int, float] = {}
        on_virtual = [g for g in physical_indices(task.gpu_indices, slices) if g in virtual]
        for gpu in physical_indices(task.gpu_indices, slices):
            if gpu not in util:
                continue
            if gpu in virtual:  # it trains on the CPU: its CPU share, split over its GPUs
                mine[gpu] = _share(cores[task.ref], capacity.cpu_cores) / len(on_virtual)
            else:  # NVML's utilisation, split by the slots held
                held = sum(1 for i in task.gpu_indices if i // slices == gpu)
                mine[gpu] = util[gpu] * held / slots_held[gpu]
        own[task.ref] = mine
    for gpu in virtual:
        util[gpu] = min(1.0, sum(mine.get(gpu, 0.0) for mine in own.values()))
    return util, own


@dataclass(frozen=True)
class OverloadSettings:
    """The detector's parameters (flags of ``mlsched agent``)."""

    enabled: bool = True
    h_r: float = 0.9  # MLFS §4.1
    p_s: float = 0.1  # MLFS §4.1
    samples: int = 3  # consecutive overloaded samples before acting
    cooldown_s: float = 60.0  # before the same task may be asked for again
    clear_below: float | None = None  # re-armed once what was hot is at most this (h_r - 0.1)

    @property
    def clear_mark(self) -> float:
        """``clear_below``, or ``h_r`` - 0.1 (at least 0) when None."""
        return max(0.0, self.h_r - 0.1) if self.clear_below is None else self.clear_below

    def validate(self) -> None:
        """Raise ValueError when a parameter is out of range."""
        MlfsConfig(h_r=self.h_r, p_s=self.p_s)  # the paper's ranges, checked once
        if self.samples < 1:
            raise ValueError("overload samples must be >= 1")
        if not 0.0 <= self.clear_mark <= self.h_r:
            raise ValueError("the clear mark must be in [0, h_r]")
        if not self.cooldown_s >= 0:
            raise ValueError("the migration cool-down must be >= 0")


@dataclass(frozen=True)
class MigrationWish:
    """A task the Euclidean rule chose to move off this server."""

    ref: TaskRef
    server_utilization: Mapping[str, float]
    demand: Mapping[str, float]
    reason: str


def physical_gpus(load: NodeLoadReport) -> dict[int, float]:
    """Every physical GPU's utilisation (its slots report it: slot ``s`` is on GPU
    ``s // gpu_slices``)."""
    slices = max(1, load.gpu_slices)
    out: dict[int, float] = {}
    for index, u in load.gpu_utilization.items():
        out[index // slices] = max(out.get(index // slices, 0.0), u)
    return out


def shared_gpus(load: NodeLoadReport) -> dict[int, float]:
    """The physical GPUs more than one running task holds (a slot of), with their
    utilisation."""
    holders: dict[int, int] = {}
    for share in load.tasks:
        for gpu in physical_indices(share.gpu_indices, load.gpu_slices):
            holders[gpu] = holders.get(gpu, 0) + 1
    return {i: u for i, u in physical_gpus(load).items() if holders.get(i, 0) > 1}


def _task_load(share: TaskShare, shared: Mapping[int, float], slices: int) -> TaskLoad:
    """The task for the Euclidean rule; its GPU is its busiest shared one (None: no shared
    GPU, the per-GPU rule does not concern it), its load there its own share of that GPU."""
    mine = [i for i in physical_indices(share.gpu_indices, slices) if i in shared]
    busiest = min(mine, key=lambda i: (-shared[i], i)) if mine else None
    gpu = 0.0
    if busiest is not None:
        parts = share.gpu_shares
        gpu = shared[busiest] if parts is None else min(1.0, parts.get(busiest, 0.0))
    return TaskLoad(
        job_id=share.ref.job_id,
        task=share.ref.rank,
        demand=tuple(share.demand[r] for r in RESOURCES),
        gpu=gpu,
        gpu_index=busiest,
        priority=share.priority,
    )


def _wish(share: TaskShare, load: NodeLoadReport, reason: str) -> MigrationWish:
    return MigrationWish(share.ref, dict(load.utilization), dict(share.demand), reason)


class OverloadDetector:
    """Turns successive load reports into migration requests (module docstring).

    ``observe`` returns what to ask for; call ``requested`` for each request actually sent, so
    a request lost with a dropped session is made again at the next sample.
    """

    def __init__(
        self, node_id: str, settings: OverloadSettings, clock: Clock | None = None
    ) -> None:
        settings.validate()
        self._node_id = node_id
        self._settings = settings
        self._config = MlfsConfig(h_r=settings.h_r, p_s=settings.p_s)
        self._clock = clock or SystemClock()
        self._streak = 0
        self._pending: dict[TaskRef, float] = {}  # asked for at (monotonic)
        self._hot_now: frozenset[str] = frozenset()  # what the latest sample had above h_r
        self._episode: frozenset[str] | None = None  # disarmed: what was hot at the request
        self._asked: set[TaskRef] = set()  # tasks asked for since the last re-arming

    @property
    def streak(self) -> int:
        """Consecutive overloaded samples so far."""
        return self._streak

    def pending(self) -> frozenset[TaskRef]:
        """Tasks asked for and still within their cool-down."""
        return frozenset(self._pending)

    @property
    def armed(self) -> bool:
        """Whether a new overload may lead to a new request (module docstring, hysteresis)."""
        return self._episode is None

    def requested(self, ref: TaskRef) -> None:
        """A request for ``ref`` went out: the server is disarmed until what is hot now has
        fallen to the clear mark."""
        self._pending[ref] = self._clock.monotonic()
        self._asked.add(ref)
        if self._episode is None:
            self._episode = self._hot_now

    def hot(self, load: NodeLoadReport) -> list[str]:
        """What is above ``h_r``: resource types, then GPUs (empty: not overloaded)."""
        marks = self._marks(load)
        return [f"{name} {marks[name]:.3f}" for name in self._above(marks, self._config.h_r)]

    def observe(self, load: NodeLoadReport) -> list[MigrationWish]:
        """One sample: the tasks to ask the controller to move, in the order chosen."""
        if not self._settings.enabled:
            return []
        now = self._clock.monotonic()
        live = {t.ref for t in load.tasks}
        self._pending = {
            ref: at
            for ref, at in self._pending.items()
            if ref in live and now - at < self._settings.cooldown_s
        }
        marks = self._marks(load)
        above = self._above(marks, self._config.h_r)
        self._hot_now = frozenset(above)
        hot = [f"{name} {marks[name]:.3f}" for name in above]
        if self._episode is not None and all(
            marks.get(name, 0.0) <= self._settings.clear_mark + _EPS for name in self._episode
        ):
            log.info(
                "%s relieved: %s at most %.2f; overload detection armed again",
                self._node_id,
                ", ".join(f"{name} {marks.get(name, 0.0):.3f}" for name in sorted(self._episode)),
                self._settings.clear_mark,
            )
            self._episode, self._streak = None, 0  # relieved: armed again, counting anew
            self._asked.clear()
        if not hot:
            self._streak = 0
            return []
        self._streak += 1
        if self._streak < self._settings.samples:
            return []
        if self._episode is not None:
            return self._retries(load, hot)
        server = self._server(load)
        shared = dict(server.gpus)
        for share in load.tasks:
            if share.ref in self._pending:  # already asked to leave: count it as gone
                server = remove(server, _task_load(share, shared, load.gpu_slices))
        candidates = [
            share for share in load.tasks if share.movable and share.ref not in self._pending
        ]
        by_key = {(s.ref.job_id, s.ref.rank): s for s in candidates}
        loads = [_task_load(s, shared, load.gpu_slices) for s in candidates]
        chosen = choose_migrations(server, loads, self._config)
        rule = "closest to the ideal virtual task (MLFS §3.3.3)"
        if any(name.startswith("GPU ") for name in above):
            rule = (
                f"while a shared GPU is over h_r, among the lowest-priority p_s "
                f"{self._config.p_s:.2f} of its tasks; {rule}"
            )
        reason = (
            f"{self._node_id} overloaded for {self._streak} samples "
            f"({', '.join(hot)} > h_r {self._config.h_r:.2f}): {rule}"
        )
        return [_wish(by_key[pick.key], load, reason) for pick in chosen]

    def _retries(self, load: NodeLoadReport, hot: Sequence[str]) -> list[MigrationWish]:
        """Disarmed and still overloaded: only the tasks asked for before that are still here
        past their cool-down, asked for again."""
        reason = (
            f"{self._node_id} still overloaded ({', '.join(hot)} > h_r "
            f"{self._config.h_r:.2f}): asked again for the task chosen before (MLFS §3.3.3)"
        )
        return [
            _wish(share, load, reason)
            for share in load.tasks
            if share.ref in self._asked and share.movable and share.ref not in self._pending
        ]

    def _marks(self, load: NodeLoadReport) -> dict[str, float]:
        """Every resource type's share and every shared GPU's load, by name."""
        server = self._server(load)
        marks = dict(zip(RESOURCES, server.utilisation, strict=True))
        marks.update({f"GPU {i}": u for i, u in server.gpus.items()})
        return marks

    @staticmethod
    def _above(marks: Mapping[str, float], mark: float) -> list[str]:
        """The names in ``marks`` above ``mark``: resource types, then GPUs by index."""
        types = [r for r in RESOURCES if marks[r] > mark + _EPS]
        gpus = sorted(
            (name for name in marks if name.startswith("GPU ") and marks[name] > mark + _EPS),
            key=lambda name: int(name.split()[1]),
        )
        return types + gpus

    def _server(self, load: NodeLoadReport) -> Server:
        """The server for the Euclidean rule: its GPUs are the shared ones (module docstring)."""
        return Server(
            self._node_id,
            tuple(load.utilization.get(r, 0.0) for r in RESOURCES),
            shared_gpus(load),
        )
