"""Measure how a training job slows beside CPU, memory-bandwidth and network hogs; fit curves.

    .venv/bin/python benchmarks/calibrate_interference.py --repeats 3 --phase-s 8 \
        --out simulator/interference.json

One training job (``examples/mlp_classifier.py`` in the shim's local mode, one thread) runs
throughout; its progress is read from the checkpoint directory's ``LATEST`` (a checkpoint
every ``--every`` steps), so no process is started per measurement. Phases alternate: *off*
(no hog) then *on* (one hog at one level), each ``--phase-s`` seconds, the conditions in a
new random order every repeat. A condition's slowdown is the rate of its *off* phase over the
rate of its *on* phase, so load from other work on the machine that changes slowly cancels.

Levels are shares of the machine (what the simulator's server utilisation means):

* ``cpu``: one spinning process per core, each busy ``u`` of every 20 ms;
* ``memory``: one process per core copying 32 MiB arrays (past the caches), busy ``u``;
* ``bandwidth``: a loopback TCP stream at ``u`` x ``--link-gbit`` (paced in 20 ms slots; the
  rate reached is what is recorded).

Each phase gives two rates: steps per wall second, and steps per CPU second of the trainer
(``/proc/<pid>/stat``). The second leaves out time-sharing of the CPU with everything else on
the machine, which on a shared machine swamps what the hog itself does. Per resource,
``slowdown(u) = 1 + a u^b`` is fitted (``scipy.optimize.curve_fit``) to every (level,
slowdown) point, for both rates. Prints the points per level (median, range) and the fits;
``--out`` writes them as JSON, the per-CPU-second fits as ``fits`` (what
``simulator.interference`` loads) and the wall ones as ``fits_wall``. ``--refit FILE`` fits the
raw points of an earlier ``--out`` file again without measuring.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"cpu": (0.25, 0.5, 1.0), "memory": (0.25, 0.5, 1.0), "bandwidth": (0.1, 0.3, 0.6)}
SLOT_S = 0.02

CPU_HOG = """
import sys, time
u, slot = float(sys.argv[1]), float(sys.argv[2])
while True:
    end = time.perf_counter() + u * slot
    while time.perf_counter() < end:
        pass
    time.sleep((1 - u) * slot)
"""

MEMORY_HOG = """
import sys, time
import numpy as np
u, slot = float(sys.argv[1]), float(sys.argv[2])
a = np.ones(4 << 20); b = np.empty_like(a)  # 32 MiB each
while True:
    end = time.perf_counter() + u * slot
    while time.perf_counter() < end:
        np.copyto(b, a)
    time.sleep((1 - u) * slot)
"""

NET_HOG = """
import socket, sys, time
port, rate, slot = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
chunk = b"x" * (1 << 16)
per_slot = rate * slot
while True:
    start = time.perf_counter()
    sent = 0
    while sent < per_slot:
        s.sendall(chunk)
        sent += len(chunk)
    time.sleep(max(0.0, slot - (time.perf_counter() - start)))
"""


class Sink:
    """A loopback TCP server that reads and counts what the network hog sends."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.bytes = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 20):
                self.bytes += len(data)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Progress:
    """The trainer's (time, step) samples, read from ``LATEST`` every 20 ms."""

    def __init__(self, directory: Path) -> None:
        self.latest = directory / "LATEST"
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        last = None
        while not self.stop.is_set():
            try:
                name = self.latest.read_text().strip()
            except OSError:
                name = ""
            if name and name != last:
                last = name
                self.samples.append((time.perf_counter(), int(name.split("-")[1].split(".")[0])))
            time.sleep(0.02)

    def steps(self, start: float, end: float) -> tuple[int, float]:
        """Steps made between the first and the last sample in [start, end], and the seconds
        between those samples (0: fewer than two samples)."""
        inside = [(t, s) for t, s in self.samples if start <= t <= end]
        if len(inside) < 2:
            return 0, 0.0
        return inside[-1][1] - inside[0][1], inside[-1][0] - inside[0][0]


def phase(progress: Progress, pid: int, seconds: float) -> tuple[float, float]:
    """Run for ``seconds``: the trainer's steps per wall second and per CPU second."""
    t0, c0 = time.perf_counter(), cpu_seconds(pid)
    time.sleep(seconds)
    t1, c1 = time.perf_counter(), cpu_seconds(pid)
    steps, wall = progress.steps(t0, t1)
    cpu = c1 - c0
    nan = float("nan")
    busy = cpu * wall / (t1 - t0)  # the trainer's CPU seconds within the sampled span
    return (steps / wall if wall > 0 else nan), (steps / busy if busy > 0 else nan)


def start_hog(resource: str, level: float, sink: Sink, link_bps: float) -> list:
    py = sys.executable
    cores = os.cpu_count() or 1
    if resource == "cpu":
        return [
            subprocess.Popen([py, "-c", CPU_HOG, str(level), str(SLOT_S)]) for _ in range(cores)
        ]
    if resource == "memory":
        return [
            subprocess.Popen([py, "-c", MEMORY_HOG, str(level), str(SLOT_S)]) for _ in range(cores)
        ]
    rate = level * link_bps / 8
    return [subprocess.Popen([py, "-c", NET_HOG, str(sink.port), str(rate), str(SLOT_S)])]


def stop_hog(procs: list) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def slowdown(u: np.ndarray, a: float, b: float) -> np.ndarray:
    return 1.0 + a * np.power(u, b)


def fit(points: list[tuple[float, float]]) -> dict[str, float]:
    u = np.array([p[0] for p in points])
    s = np.array([p[1] for p in points])
    (a, b), _ = curve_fit(slowdown, u, s, p0=(0.2, 1.0), bounds=([0.0, 0.5], [10.0, 3.0]))
    return {"a": round(float(a), 4), "b": round(float(b), 4)}


def _points(rows: list[dict], key: str) -> list[tuple[float, float]]:
    return [
        (float(r["level"]), float(r[key]))
        for r in rows
        if np.isfinite(float(r[key])) and np.isfinite(float(r["level"]))
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--phase-s", type=float, default=8.0)
    parser.add_argument("--every", type=int, default=25, help="checkpoint every N steps")
    parser.add_argument("--link-gbit", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--refit", type=Path, help="fit the raw points of this earlier --out file; no measuring"
    )
    args = parser.parse_args()
    if args.refit:
        earlier = json.loads(args.refit.read_text())
        raw, meta = (
            earlier["raw"],
            {k: earlier[k] for k in ("date", "cores", "load_average_at_end")},
        )
    else:
        raw = measure(args)
        meta = {
            "date": time.strftime("%Y-%m-%d"),
            "cores": os.cpu_count(),
            "load_average_at_end": os.getloadavg()[0],
        }
    return report(raw, meta, args.out)


def measure(args: argparse.Namespace) -> list[dict]:
    """Run the trainer and the phases (module docstring): one row per condition and repeat."""
    link_bps = args.link_gbit * 1e9
    rng = random.Random(args.seed)
    sink = Sink()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        trainer = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "mlp_classifier.py"),
             "--max-iterations", "100000000", "--eval-every", "1000000000",
             "--checkpoint-every", str(args.every), "--checkpoint-dir", tmp],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        progress = Progress(Path(tmp))
        while len(progress.samples) < 2:
            if trainer.poll() is not None:
                raise SystemExit("the trainer exited before its second checkpoint")
            time.sleep(0.1)
        raw: list[dict[str, float | str | int]] = []
        try:
            for repeat in range(args.repeats):
                conditions = [(r, u) for r, levels in LEVELS.items() for u in levels]
                rng.shuffle(conditions)
                for resource, level in conditions:
                    off, off_cpu = phase(progress, trainer.pid, args.phase_s)
                    before = sink.bytes
                    procs = start_hog(resource, level, sink, link_bps)
                    time.sleep(0.5)  # the hog settles
                    t1 = time.perf_counter()
                    on, on_cpu = phase(progress, trainer.pid, args.phase_s)
                    reached = (sink.bytes - before) * 8 / (time.perf_counter() - t1 + 0.5)
                    stop_hog(procs)
                    row = {
                        "repeat": repeat,
                        "resource": resource,
                        "level": level if resource != "bandwidth" else round(reached / link_bps, 4),
                        "asked": level,
                        "rate_off": round(off, 2),
                        "rate_on": round(on, 2),
                        "slowdown": round(off / on, 4),
                        "cpu_rate_off": round(off_cpu, 2),
                        "cpu_rate_on": round(on_cpu, 2),
                        "cpu_slowdown": round(off_cpu / on_cpu, 4),
                    }
                    raw.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            progress.stop.set()
            trainer.terminate()
            trainer.wait()
    return raw


def report(raw: list[dict], meta: dict, out: Path | None) -> int:
    """Print the points per level and the fits; write them to ``out`` if given."""
    fits: dict[str, dict[str, float]] = {}
    fits_cpu: dict[str, dict[str, float]] = {}
    for resource in LEVELS:
        mine = [r for r in raw if r["resource"] == resource]
        fits[resource] = fit(_points(mine, "slowdown"))
        fits_cpu[resource] = fit(_points(mine, "cpu_slowdown"))
        for level in LEVELS[resource]:
            for key in ("slowdown", "cpu_slowdown"):
                got = [float(r[key]) for r in mine if r["asked"] == level]
                got = [g for g in got if np.isfinite(g)]
                if got:
                    print(
                        f"{resource:>9} u={level:<5} {key:>12} median {statistics.median(got):.3f}"
                        f" range {min(got):.3f}-{max(got):.3f} (n={len(got)})"
                    )
        for name, f in (("wall", fits[resource]), ("cpu", fits_cpu[resource])):
            print(f"{resource:>9} fit ({name}): slowdown = 1 + {f['a']} u^{f['b']}")
    if out:
        doc = {
            "model": "slowdown(u) = 1 + a * u**b per resource; a job's time per iteration is "
            "multiplied by the product over its server's resources",
            "measured_with": "benchmarks/calibrate_interference.py",
            **meta,
            "fits": {**fits_cpu, "gpu": None},
            "fits_are": "per CPU second of the trainer (cpu_slowdown): the machine was shared "
            "with other work, so the wall rate mostly measured time-sharing with it",
            "gpu": "not measured: no GPU on the measuring machine; no shared-GPU slowdown",
            "fits_wall": fits,
            "raw": raw,
        }
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
