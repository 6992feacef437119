"""Per-task TCP traffic from the kernel's socket counters (nodeagent/sockstats.py,
TaskMetricsSampler): two real processes send different amounts over loopback; each task is
credited exactly the bytes its own sockets moved, and loopback is left out by default."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from nodeagent_testkit import FakeClock

from nodeagent.gpus import VirtualGpus
from nodeagent.metrics import TaskMetricsSampler
from nodeagent.model import NodeMetrics, RunningTask, TaskMetrics, TaskRef
from nodeagent.overload import Capacity, measure_load
from nodeagent.sockstats import Unavailable, read_tcp_sockets, socket_inodes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sock_diag: Linux")

SENDER = r"""
import socket, sys
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
size = int(sys.stdin.readline())  # the test says when (and how much) to send
conn.sendall(b"x" * size)
print("sent", flush=True)
sys.stdin.readline()  # keep the socket open until told to end
"""
HEAVY, LIGHT = 8_000_000, 500_000


class Sink:
    """A loopback server that reads and counts everything its peers send."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.received = 0
        self.cond = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 16):
                with self.cond:
                    self.received += len(data)
                    self.cond.notify_all()

    def wait_for(self, total: int, timeout: float = 30.0) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.received >= total, timeout), self.received


def acked(pid: int) -> int:
    table = read_tcp_sockets()
    return sum(table[i].sent for i in socket_inodes([pid]) if i in table)


@pytest.fixture
def senders():
    sink = Sink()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SENDER, str(sink.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "connected"
    yield sink, procs
    for p in procs:
        p.kill()
        p.wait()
    sink.server.close()


def test_each_task_is_credited_the_bytes_its_sockets_moved(senders):
    try:
        read_tcp_sockets()
    except Unavailable as exc:
        pytest.skip(f"sock_diag unavailable here: {exc}")
    sink, (heavy, light) = senders
    clock = FakeClock()
    refs = [(TaskRef("heavy", 0, 1), heavy.pid), (TaskRef("light", 0, 1), light.pid)]
    sampler = TaskMetricsSampler(VirtualGpus(2), clock, include_loopback=True)
    plain = TaskMetricsSampler(VirtualGpus(2), clock)  # loopback left out (the default)
    assert [m.net_bytes_per_s for m in sampler.sample(refs)] == [0.0, 0.0]  # baseline
    plain.sample(refs)
    for proc, size in ((heavy, HEAVY), (light, LIGHT)):
        proc.stdin.write(f"{size}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "sent"
    sink.wait_for(HEAVY + LIGHT)
    deadline = time.monotonic() + 30
    # the last ACKs in flight (bytes_acked also counts the SYN, 1 byte before the baseline)
    while acked(heavy.pid) < HEAVY + 1 or acked(light.pid) < LIGHT + 1:
        assert time.monotonic() < deadline, (acked(heavy.pid), acked(light.pid))
        time.sleep(0.01)
    clock.advance(2.0)
    got = sampler.sample(refs)
    assert [m.net_bytes_per_s for m in got] == [HEAVY / 2.0, LIGHT / 2.0]
    assert all(m.net_measured for m in got)
    assert [m.net_bytes_per_s for m in plain.sample(refs)] == [0.0, 0.0]


def test_measured_traffic_replaces_the_equal_split():
    # 16 MB/s capacity; the node's interfaces moved 10 MB/s. Measured: a 6 MB/s, b 1 MB/s.
    capacity = Capacity(cpu_cores=8.0, memory_bytes=1 << 34, bandwidth_bytes_per_s=16e6)
    node = NodeMetrics(1.0, 0.0, 0, 1 << 34, 6e6, 4e6, ())
    a, b = TaskRef("a", 0, 1), TaskRef("b", 0, 1)
    tasks = [RunningTask(a, 1, (), 0.0), RunningTask(b, 2, (), 0.0)]
    measured = [TaskMetrics(a, 0.0, 0, 0, 6e6, True), TaskMetrics(b, 0.0, 0, 0, 1e6, True)]
    load = measure_load(node, list(zip(tasks, measured, strict=True)), capacity)
    assert [t.demand["bandwidth"] for t in load.tasks] == pytest.approx([6 / 16, 1 / 16])
    assert load.utilization["bandwidth"] == pytest.approx(7 / 16)  # the tasks' own traffic
    # not measured (sock_diag unavailable): the node's 10 MB/s split equally, 5 / 16 each
    unmeasured = [TaskMetrics(a, 0.0, 0), TaskMetrics(b, 0.0, 0)]
    load = measure_load(node, list(zip(tasks, unmeasured, strict=True)), capacity)
    assert [t.demand["bandwidth"] for t in load.tasks] == pytest.approx([5 / 16, 5 / 16])
    assert load.utilization["bandwidth"] == pytest.approx(10 / 16)


def test_a_sampler_without_counters_says_so_once(caplog):
    def refused():
        raise Unavailable("netlink refused")

    sampler = TaskMetricsSampler(VirtualGpus(1), FakeClock(), sockets=refused)
    ref = [(TaskRef("a", 0, 1), 1)]
    assert [m.net_measured for m in sampler.sample(ref)] == [False]
    assert [m.net_measured for m in sampler.sample(ref)] == [False]
    assert sum("cannot be measured" in r.getMessage() for r in caplog.records) == 1
