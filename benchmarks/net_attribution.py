"""Per-task network attribution (nodeagent/sockstats.py) measured on real processes.

Two sender processes stream over loopback to a sink in this process at paced rates (default
20 and 2 MB/s) for a few seconds; the agent's TaskMetricsSampler (with loopback counted, since
this machine has no second host) samples both every 0.5 s. Prints, per task, the rate the sink
received from it, the rate the sampler attributed, and the share each would get from the equal
split the agent used before; and the sampler's cost per sample.

    .venv/bin/python benchmarks/net_attribution.py [--seconds 6] [--rates 20e6,2e6]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time

from nodeagent.gpus import VirtualGpus
from nodeagent.metrics import TaskMetricsSampler
from nodeagent.model import TaskRef

SENDER = r"""
import socket, sys, time
rate, seconds = float(sys.argv[2]), float(sys.argv[3])
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
chunk = b"x" * 65536
start = time.monotonic()
sent = 0
while (now := time.monotonic()) - start < seconds:
    if sent < rate * (now - start):
        conn.sendall(chunk)
        sent += len(chunk)
    else:
        time.sleep(0.001)
print(sent, flush=True)
sys.stdin.readline()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--rates", default="20e6,2e6", help="bytes/s per sender")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received: dict[int, int] = {}

    def read(conn: socket.socket, key: int) -> None:
        while data := conn.recv(1 << 16):
            received[key] = received.get(key, 0) + len(data)

    def accept() -> None:
        for key in range(len(rates)):
            conn, _ = server.accept()
            threading.Thread(target=read, args=(conn, key), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    procs = []
    for rate in rates:
        cmd = [sys.executable, "-c", SENDER, str(port), str(rate), str(args.seconds)]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
        time.sleep(0.05)  # accept in order: key i is sender i
    refs = [(TaskRef(f"task{i}", 0, 1), p.pid) for i, p in enumerate(procs)]
    sampler = TaskMetricsSampler(VirtualGpus(1), include_loopback=True)
    totals = [0.0] * len(rates)
    costs = []
    start = time.monotonic()
    sampler.sample(refs)
    while time.monotonic() - start < args.seconds + 0.5:
        time.sleep(0.5)
        t0 = time.perf_counter()
        metrics = sampler.sample(refs)
        costs.append(time.perf_counter() - t0)
        for i, m in enumerate(metrics):
            totals[i] += m.net_bytes_per_s * 0.5
    elapsed = time.monotonic() - start
    sent = [int(p.stdout.readline()) for p in procs]
    for p in procs:
        p.kill()
    whole = sum(received.values())
    print(f"{len(rates)} senders over loopback, {elapsed:.1f} s, sampled every 0.5 s")
    print("task   sent MB  sink MB  attributed MB  attributed share  true share  equal split")
    for i in range(len(rates)):
        got = received.get(i, 0)
        print(
            f"task{i} {sent[i] / 1e6:8.1f} {got / 1e6:8.1f} {totals[i] / 1e6:14.1f}"
            f" {totals[i] / max(sum(totals), 1):17.3f} {got / max(whole, 1):11.3f}"
            f" {1 / len(rates):12.3f}"
        )
    costs.sort()
    print(
        f"sampler cost per sample: median {1e3 * costs[len(costs) // 2]:.2f} ms,"
        f" max {1e3 * costs[-1]:.2f} ms"
    )


if __name__ == "__main__":
    main()
