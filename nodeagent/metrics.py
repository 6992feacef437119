"""Node and per-task resource sampling (psutil, plus the GPU backend)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

import psutil

from nodeagent.clock import Clock, SystemClock
from nodeagent.gpus import GpuBackend
from nodeagent.model import NodeMetrics, TaskMetrics, TaskRef
from nodeagent.sockstats import SocketBytes, read_tcp_sockets, socket_inodes

log = logging.getLogger(__name__)


def counter_rate(previous: int, current: int, elapsed_s: float) -> float:
    """Per-second rate between two readings of a byte counter.

    Returns 0 when no time passed or the counter went backwards (interface reset, wrap).
    """
    if elapsed_s <= 0 or current < previous:
        return 0.0
    return (current - previous) / elapsed_s


def read_net_counters() -> tuple[int, int]:
    """Received and sent bytes summed over every interface except loopback."""
    rx = tx = 0
    for name, counters in psutil.net_io_counters(pernic=True).items():
        if name == "lo" or name.startswith("lo:"):
            continue
        rx += counters.bytes_recv
        tx += counters.bytes_sent
    return rx, tx


def read_memory() -> tuple[int, int]:
    """Used (total minus available) and total memory in bytes."""
    vm = psutil.virtual_memory()
    return int(vm.total - vm.available), int(vm.total)


def read_cpu_percent() -> float:
    """Node CPU utilisation since the previous call (all cores, 0-100)."""
    return float(psutil.cpu_percent(interval=None))


class NodeMetricsSampler:
    """Samples the node; network rates come from successive counter readings.

    The first sample reports network rates of 0 (no previous reading yet).
    """

    def __init__(
        self,
        gpus: GpuBackend,
        clock: Clock | None = None,
        *,
        net_counters: Callable[[], tuple[int, int]] = read_net_counters,
        memory: Callable[[], tuple[int, int]] = read_memory,
        cpu_percent: Callable[[], float] = read_cpu_percent,
        disk_free: Callable[[], int] | None = None,
        min_free_disk_bytes: int = 0,
    ) -> None:
        self._gpus = gpus
        self._disk_free = disk_free  # free bytes on the state disk; None: not measured
        self._min_free_disk = min_free_disk_bytes
        self._clock = clock or SystemClock()
        self._net_counters = net_counters
        self._memory = memory
        self._cpu_percent = cpu_percent
        self._last_net: tuple[float, int, int] | None = None
        self._cpu_percent()  # prime psutil's "since the previous call" baseline

    def sample(self, busy_gpus: Collection[int] = ()) -> NodeMetrics:
        """Take one sample; ``busy_gpus`` are the slots held by tasks."""
        now = self._clock.monotonic()
        rx, tx = self._net_counters()
        rx_rate = tx_rate = 0.0
        if self._last_net is not None:
            then, last_rx, last_tx = self._last_net
            rx_rate = counter_rate(last_rx, rx, now - then)
            tx_rate = counter_rate(last_tx, tx, now - then)
        self._last_net = (now, rx, tx)
        used, total = self._memory()
        free, full = self._state_disk()
        return NodeMetrics(
            time=self._clock.time(),
            cpu_percent=self._cpu_percent(),
            memory_used_bytes=used,
            memory_total_bytes=total,
            net_rx_bytes_per_s=rx_rate,
            net_tx_bytes_per_s=tx_rate,
            gpus=tuple(self._gpus.metrics(busy_gpus)),
            state_disk_free_bytes=free,
            state_disk_full=full,
        )

    def _state_disk(self) -> tuple[int, bool]:
        """Free bytes on the state disk and whether they are under the reserve (an unreadable
        disk counts as full: the agent could not record a new task there)."""
        if self._disk_free is None:
            return 0, False
        try:
            free = max(int(self._disk_free()), 0)
        except OSError as exc:
            log.warning("cannot read the state disk's free space: %s", exc)
            return 0, True
        return free, free < self._min_free_disk


@dataclass(frozen=True)
class ProcessSample:
    """CPU time and resident memory of one process."""

    pid: int
    create_time: float
    cpu_seconds: float
    rss_bytes: int


def read_process_tree(pid: int) -> list[ProcessSample]:
    """Sample a process and all its descendants; processes that vanish meanwhile are skipped."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return []
    samples = []
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                samples.append(
                    ProcessSample(
                        proc.pid,
                        proc.create_time(),
                        times.user + times.system,
                        int(proc.memory_info().rss),
                    )
                )
        except psutil.Error:
            continue
    return samples


class TaskMetricsSampler:
    """Per-task CPU, memory and TCP traffic summed over each task's process tree.

    CPU percent is CPU time consumed between two samples over the elapsed (injected) clock time,
    in percent of one core; processes seen for the first time contribute from their next sample.

    Traffic (``net_bytes_per_s``, sent plus received, ``net_measured`` True) comes from the
    kernel's per-socket counters (``sockstats.py``): the bytes moved between two samples on the
    TCP sockets the tree holds open, a socket first seen counted whole (it opened since the
    last sample) except at the task's first sample; sockets to loopback peers count only with
    ``include_loopback``. Where the counters cannot be read, this is logged once and every
    task reports ``net_measured`` False (the load measurement then splits the node's traffic
    equally).
    """

    def __init__(
        self,
        gpus: GpuBackend,
        clock: Clock | None = None,
        *,
        process_tree: Callable[[int], list[ProcessSample]] = read_process_tree,
        sockets: Callable[[], Mapping[int, SocketBytes]] | None = read_tcp_sockets,
        open_sockets: Callable[[Iterable[int]], set[int]] = socket_inodes,
        include_loopback: bool = False,
    ) -> None:
        self._gpus = gpus
        self._clock = clock or SystemClock()
        self._process_tree = process_tree
        self._last: dict[TaskRef, tuple[float, dict[tuple[int, float], float]]] = {}
        self._sockets = sockets
        self._open_sockets = open_sockets
        self._include_loopback = include_loopback
        self._net_last: dict[TaskRef, tuple[float, dict[int, int]]] = {}

    def _read_sockets(self) -> Mapping[int, SocketBytes] | None:
        if self._sockets is None:
            return None
        try:
            return self._sockets()
        except OSError as exc:
            log.warning(
                "per-task network traffic cannot be measured (%s): the node's traffic is split"
                " equally among its tasks",
                exc,
            )
            self._sockets = None
            return None

    def _net_rate(
        self, ref: TaskRef, pids: Iterable[int], table: Mapping[int, SocketBytes], now: float
    ) -> tuple[float, tuple[float, dict[int, int]]]:
        """The task's bytes per second since its last sample, and what to remember."""
        totals = {
            inode: table[inode].sent + table[inode].received
            for inode in self._open_sockets(pids)
            if inode in table and (self._include_loopback or not table[inode].loopback)
        }
        previous = self._net_last.get(ref)
        if previous is None or now <= previous[0]:
            return 0.0, (now, totals)
        then, before = previous
        moved = sum(max(0, v - before.get(inode, 0)) for inode, v in totals.items())
        return moved / (now - then), (now, totals)

    def sample(self, tasks: Iterable[tuple[TaskRef, int]]) -> list[TaskMetrics]:
        """Sample each ``(task, root pid)``; forgets tasks no longer listed."""
        now = self._clock.monotonic()
        try:
            gpu_memory = self._gpus.process_memory()
        except Exception:
            log.exception("cannot read per-process GPU memory")
            gpu_memory = {}
        out = []
        seen: dict[TaskRef, tuple[float, dict[tuple[int, float], float]]] = {}
        table = self._read_sockets()
        net_seen: dict[TaskRef, tuple[float, dict[int, int]]] = {}
        for ref, pid in tasks:
            procs = self._process_tree(pid)
            net = 0.0
            if table is not None:
                net, net_seen[ref] = self._net_rate(ref, [p.pid for p in procs], table, now)
            cpu_now = {(p.pid, p.create_time): p.cpu_seconds for p in procs}
            percent = 0.0
            previous = self._last.get(ref)
            if previous is not None and now > previous[0]:
                then, cpu_then = previous
                used = sum(
                    max(0.0, cpu - cpu_then[key]) for key, cpu in cpu_now.items() if key in cpu_then
                )
                percent = 100.0 * used / (now - then)
            seen[ref] = (now, cpu_now)
            out.append(
                TaskMetrics(
                    ref=ref,
                    cpu_percent=percent,
                    memory_rss_bytes=sum(p.rss_bytes for p in procs),
                    gpu_memory_bytes=sum(gpu_memory.get(p.pid, 0) for p in procs),
                    net_bytes_per_s=net,
                    net_measured=table is not None,
                )
            )
        self._last = seen
        self._net_last = net_seen
        return out
