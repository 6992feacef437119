"""The live control plane under load (issue 12 #4): the real controller process against N
lightweight agents (``control_plane_agents.py``: real gRPC sessions, heartbeats, task reports;
simulated tasks) and M jobs submitted through the real client.

    python benchmarks/bench_control_plane.py --agents 100 --jobs 2000 --json
    python benchmarks/bench_control_plane.py --agents 300 --jobs 3000 --profile

Figures:

- ``agents_registered``: sessions that got ``Registered``; ``jobs_completed``: jobs whose end
  the controller acknowledged to the agent, within ``--timeout``;
- ``submit_per_s``: M over the time the submitting threads took;
- ``heartbeat_p99_s``: from ``ListNodes`` samples every 2 s, the controller's ``last_seen`` of a
  node minus the send time in its latest metrics report (send to handling);
- ``command_p99_s``: a launch's receipt at the agent minus the job's ``-> STARTING`` event
  (the decision);
- ``cycle_p99_s``: scheduling cycles (``Scheduler.run_cycle``, timed inside the controller
  process by this script's wrapper); ``rss_mib`` / ``peak_rss_mib``: the controller's at the end;
  ``controller_cpu_s``: its user + system CPU over the run; ``rss_samples_mib``: its RSS every
  ``--rss-every-s`` from the first submit (a soak: ``--jobs`` large, ``--retain-finished``
  passed on with ``--controller-arg``).

``--profile`` samples every controller thread's Python stack every 5 ms and prints the functions
seen most often in busy threads (py-spy is not installed; a waiting thread is left out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PER_WORKER = 250  # agents per asyncio process

# Leaf functions of a thread that waits (not counted by the sampler).
IDLE_LEAVES = frozenset(
    {"wait", "_wait_once", "select", "poll", "sleep", "get", "_next", "next", "read", "accept"}
)


def p99(values: list[float]) -> float | None:
    """Nearest-rank 99th percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


# --- inside the controller process ------------------------------------------------------------
class StackSampler(threading.Thread):
    """Counts, every ``interval_s``, the functions on the stacks of busy threads."""

    def __init__(self, interval_s: float = 0.005) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.interval_s = interval_s
        self.samples = 0
        self.leaf: dict[str, int] = {}
        self.inclusive: dict[str, int] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        me = threading.get_ident()
        while not self.halt.wait(self.interval_s):
            for tid, frame in sys._current_frames().items():
                if tid == me or frame.f_code.co_name in IDLE_LEAVES:
                    continue
                self.samples += 1
                names = []
                while frame is not None:
                    code = frame.f_code
                    names.append(f"{Path(code.co_filename).name}:{code.co_name}")
                    frame = frame.f_back
                self.leaf[names[0]] = self.leaf.get(names[0], 0) + 1
                for name in set(names):
                    self.inclusive[name] = self.inclusive.get(name, 0) + 1

    def top(self, n: int = 12) -> dict[str, list[tuple[str, float]]]:
        def share(d: dict[str, int]) -> list[tuple[str, float]]:
            ranked = sorted(d.items(), key=lambda kv: -kv[1])[:n]
            return [(k, round(v / max(1, self.samples), 3)) for k, v in ranked]

        return {"leaf": share(self.leaf), "inclusive": share(self.inclusive)}


def serve_controller(stats_path: str, profile: bool, argv: list[str]) -> int:
    """``mlsched controller`` with its scheduling cycles timed (and optionally sampled)."""
    from controller.scheduler import Scheduler
    from mlsched.cli import main

    cycles: list[float] = []
    untimed = Scheduler.run_cycle

    def timed(self: Scheduler):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return untimed(self)
        finally:
            cycles.append(time.perf_counter() - started)

    Scheduler.run_cycle = timed  # type: ignore[method-assign]
    handled = _time_reports()
    sampler = StackSampler()
    if profile:
        sampler.start()
    rc = main(["controller", *argv])
    sampler.halt.set()
    Path(stats_path).write_text(
        json.dumps({"cycles": cycles, "profile": sampler.top(), "reports": handled})
    )
    return rc


def _time_reports() -> dict[str, list[float]]:
    """Agent reports as the controller's report applier handles them: per message kind,
    [count, seconds under the state lock]; "_batches": [batches, largest queue seen]."""
    from controller.report_applier import ReportApplier
    from controller.servicer import AgentServicer

    handled: dict[str, list[float]] = {"_batches": [0, 0]}
    untimed_handle, untimed_take = AgentServicer._handle, ReportApplier._take

    def handle(self, node_id, request):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return untimed_handle(self, node_id, request)
        finally:
            row = handled.setdefault(request.WhichOneof("message"), [0, 0.0])
            row[0] += 1
            row[1] += time.perf_counter() - started

    def take(self):  # type: ignore[no-untyped-def]
        batch = untimed_take(self)
        row = handled["_batches"]
        row[0] += 1
        row[1] = max(row[1], len(batch[0]) + self._queue.qsize())
        return batch

    AgentServicer._handle = handle  # type: ignore[method-assign]
    ReportApplier._take = take  # type: ignore[method-assign]
    return handled


# --- the driver -------------------------------------------------------------------------------
def _proc_status(pid: int) -> dict[str, float]:
    """VmRSS / VmHWM in MiB and user + system CPU seconds of ``pid``."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    out["cpu_s"] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


class Counts:
    """Sums of the workers' ``registered`` / ``done`` lines."""

    def __init__(self, workers: int) -> None:
        self.registered = [0] * workers
        self.done = [0] * workers
        self.changed = threading.Condition()

    def follow(self, index: int, stream) -> None:  # type: ignore[no-untyped-def]
        for line in stream:
            key, _, value = line.decode().partition(" ")
            with self.changed:
                getattr(self, key)[index] = int(value)
                self.changed.notify_all()

    def wait_for(self, key: str, target: int, deadline: float) -> int:
        with self.changed:
            while sum(getattr(self, key)) < target and time.monotonic() < deadline:
                self.changed.wait(timeout=1.0)
            return sum(getattr(self, key))


def _plaintext_flags() -> list[str]:
    """``--insecure`` where the controller serves TLS unless told (the agents here speak
    plaintext with a shared join token)."""
    usage = subprocess.run(
        [sys.executable, "-m", "mlsched", "controller", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return ["--insecure"] if "--insecure" in usage else []


def start_controller(args: argparse.Namespace, tmp: Path) -> tuple[subprocess.Popen, str]:
    (tmp / "token").write_text("bench-token\n")
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve-controller",
        str(tmp / "controller-stats.json"),
        *(["--profile"] if args.profile else []),
        "--",
        "--listen",
        "127.0.0.1:0",
        "--state-dir",
        str(tmp / "state"),
        "--join-token-file",
        str(tmp / "token"),
        "--policy",
        args.policy,
        "--cycle-seconds",
        str(args.cycle_s),
        "--heartbeat-interval",
        str(args.heartbeat_s),
        "--heartbeat-timeout",
        str(args.heartbeat_timeout_s),
        "--lease-seconds",
        "3600",
        *_plaintext_flags(),
        *args.controller_arg,
    ]
    log = open(tmp / "controller.log", "ab")  # noqa: SIM115 - handed to the process
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
    log.close()
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("listening on "):
        raise SystemExit(f"controller did not start; see {tmp / 'controller.log'}")
    return proc, line.split()[-1]


def start_workers(args: argparse.Namespace, tmp: Path, address: str) -> list[subprocess.Popen]:
    workers = []
    for first in range(0, args.agents, PER_WORKER):
        count = min(PER_WORKER, args.agents - first)
        cmd = [
            sys.executable,
            str(HERE / "control_plane_agents.py"),
            *("--address", address, "--token-file", str(tmp / "token")),
            *("--first", str(first), "--count", str(count)),
            *("--task-heartbeats", str(args.task_heartbeats)),
            *("--out", str(tmp / f"agents{first}.json")),
        ]
        workers.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    return workers


def submit_all(address: str, jobs: int, threads: int, deadline: float) -> tuple[float, int]:
    """Submit ``jobs`` one-task jobs (1, 2, 4 or 8 GPUs) until ``deadline`` (monotonic);
    returns the seconds taken and how many submits failed (not retried)."""
    import grpc

    from mlsched.client import Client
    from mlsched.model import IterationStop, JobSpec

    failed = [0] * threads

    def submit(start: int) -> None:
        with Client(address, f"user{start % 7}", timeout_s=30.0, retry_delays_s=()) as client:
            for i in range(start, jobs, threads):
                if time.monotonic() > deadline:
                    failed[start] += 1
                    continue
                gpus = (1, 2, 4, 8)[i % 4]
                spec = JobSpec(
                    f"bench-{i}", ("true",), gpus, IterationStop(1000), gpus_per_process=gpus
                )
                try:
                    client.submit(spec)
                except grpc.RpcError:
                    failed[start] += 1

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(submit, range(threads)))
    return time.perf_counter() - started, sum(failed)


class RssProbe(threading.Thread):
    """The controller's resident memory every ``interval_s`` (memory flat over a soak)."""

    def __init__(self, pid: int, interval_s: float) -> None:
        super().__init__(name="rss-probe", daemon=True)
        self.pid = pid
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval_s):
            try:
                self.samples.append(round(_proc_status(self.pid)["VmRSS"], 1))
            except (OSError, KeyError):  # the controller ended
                return


class HeartbeatProbe(threading.Thread):
    """``ListNodes`` every 2 s: last_seen minus the latest metrics report's send time."""

    def __init__(self, address: str) -> None:
        super().__init__(name="heartbeat-probe", daemon=True)
        self.address = address
        self.delays: list[float] = []
        self.halt = threading.Event()
        self.failures = 0

    def run(self) -> None:
        from mlsched.client import Client

        with Client(self.address, "bench-probe", timeout_s=30.0) as client:
            while not self.halt.wait(2.0):
                try:
                    nodes = client.nodes()
                except Exception:  # a timed-out probe is a finding, not a crash
                    self.failures += 1
                    continue
                for node, _ in nodes:
                    if node.alive and node.metrics is not None:
                        self.delays.append(max(0.0, node.last_seen - node.metrics.time))


def launch_decisions(address: str) -> dict[str, float]:
    """ "job/attempt" -> time of the job's ``-> STARTING`` event (the launch decision)."""
    from mlsched.client import Client

    decided: dict[str, float] = {}
    attempts: dict[str, int] = {}
    with Client(address, "bench") as client:
        for event in client.events():
            if event.kind == "job_state" and "-> STARTING" in event.message:
                attempts[event.job_id] = attempts.get(event.job_id, 0) + 1
                decided[f"{event.job_id}/{attempts[event.job_id]}"] = event.time
    return decided


def run(args: argparse.Namespace) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-cp-"))
    controller, address = start_controller(args, tmp)
    workers: list[subprocess.Popen] = []
    try:
        workers = start_workers(args, tmp, address)
        return measure(args, tmp, controller, address, workers)
    finally:
        for w in workers:
            if w.stdin is not None and not w.stdin.closed:
                w.stdin.close()
        if controller.poll() is None:
            controller.send_signal(signal.SIGTERM)
            controller.wait(timeout=60)


def measure(
    args: argparse.Namespace,
    tmp: Path,
    controller: subprocess.Popen,
    address: str,
    workers: list[subprocess.Popen],
) -> dict[str, object]:
    counts = Counts(len(workers))
    for i, w in enumerate(workers):
        threading.Thread(target=counts.follow, args=(i, w.stdout), daemon=True).start()
    started = time.monotonic()
    registered = counts.wait_for("registered", args.agents, started + args.register_timeout)
    register_s = time.monotonic() - started
    probe = HeartbeatProbe(address)
    probe.start()
    rss = RssProbe(controller.pid, args.rss_every_s)
    rss.start()
    deadline = time.monotonic() + args.timeout
    submit_s, submit_failed = submit_all(address, args.jobs, args.submit_threads, deadline)
    done = counts.wait_for("done", args.jobs - submit_failed, deadline)
    run_s = time.monotonic() - started
    probe.halt.set()
    rss.halt.set()
    decided = launch_decisions(address) if submit_failed < args.jobs else {}
    usage = _proc_status(controller.pid)
    receipts: dict[str, float] = {}
    errors: list[str] = []
    for first, w in zip(range(0, args.agents, PER_WORKER), workers, strict=True):
        assert w.stdin is not None
        w.stdin.close()
        w.wait(timeout=60)
        out = json.loads((tmp / f"agents{first}.json").read_text())
        receipts.update(out["launch_receipts"])
        errors += out["errors"]
    controller.send_signal(signal.SIGTERM)
    controller.wait(timeout=60)
    stats = json.loads((tmp / "controller-stats.json").read_text())
    commands = [t - decided[k] for k, t in receipts.items() if k in decided]
    result: dict[str, object] = {
        "agents": args.agents,
        "jobs": args.jobs,
        "agents_registered": registered,
        "register_s": round(register_s, 2),
        "jobs_completed": done,
        "submit_failed": submit_failed,
        "submit_per_s": round((args.jobs - submit_failed) / submit_s, 1),
        "heartbeat_p99_s": _round(p99(probe.delays)),
        "heartbeat_probe_failures": probe.failures,
        "command_p99_s": _round(p99(commands)),
        "cycle_p99_s": _round(p99(stats["cycles"])),
        "cycles": len(stats["cycles"]),
        "reports": {k: [round(v[0]), round(v[1], 2)] for k, v in stats["reports"].items()},
        "rss_mib": round(usage["VmRSS"], 1),
        "peak_rss_mib": round(usage["VmHWM"], 1),
        "controller_cpu_s": round(usage["cpu_s"], 1),
        "rss_samples_mib": rss.samples,
        "run_s": round(run_s, 1),
        "agent_errors": errors[:5],
        "state_dir": str(tmp),
    }
    if args.profile:
        result["profile"] = stats["profile"]
    return result


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-controller"]:
        profile = argv[2:3] == ["--profile"]
        rest = argv[argv.index("--") + 1 :]
        return serve_controller(argv[1], profile, rest)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--policy", default="fifo")
    p.add_argument("--heartbeat-s", type=float, default=1.0)
    p.add_argument("--heartbeat-timeout-s", type=float, default=30.0)
    p.add_argument("--cycle-s", type=float, default=1.0)
    p.add_argument("--task-heartbeats", type=int, default=3, help="a task's length")
    p.add_argument("--submit-threads", type=int, default=4)
    p.add_argument("--register-timeout", type=float, default=120.0)
    p.add_argument("--timeout", type=float, default=600.0, help="wait for completions")
    p.add_argument("--controller-arg", action="append", default=[], help="passed on")
    p.add_argument("--rss-every-s", type=float, default=30.0, help="RSS sample interval")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:>26}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
