"""Helpers of the fault-injection suite: a local cluster with short fencing spans, training
processes found by their environment, and the invariants every fault must leave intact."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from mlsched.client import Client
from mlsched.localcluster import ClusterTiming, LocalCluster
from mlsched.model import Event, IterationStop, Job, JobSpec, JobState

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
FOREVER = IterationStop(10**9)  # no machine reaches it: such a job ends when the test says

# Short spans so that a fault is over in seconds: the shim of an agent's task suspends after
# F = T = 4 s of silence and exits by F + 2G + X = 4 + 2 + 1 = 7 s; the controller holds a dead
# node's GPUs until h + T + M, M = I + K + 2G + X + 2P = 0.5 + 15 + 2 + 1 + 0.4 = 18.9 s.
TIMING = ClusterTiming(
    lease_s=600.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=4.0,
    suspend_grace_s=1.0,
)
AGENT_FLAGS = ["--suspend-save-extension", "1"]


def make_cluster(
    root: Path,
    nodes: dict[str, int],
    timing: ClusterTiming = TIMING,
    agent_flags: list[str] | None = None,
) -> LocalCluster:
    # Plaintext with one shared token: faults restart agents and controllers many times, and
    # what is checked here does not depend on the transport's security.
    cluster = LocalCluster(root, timing, insecure=True)
    cluster.start_controller()
    for node_id, gpus in nodes.items():
        cluster.start_agent(node_id, gpus=gpus, extra=AGENT_FLAGS + (agent_flags or []))
    cluster.wait_for_nodes(set(nodes))
    return cluster


def slow_save_spec(name: str, save_s: float) -> JobSpec:
    """A job of ``slow_save_train.py``: one checkpoint at its end that takes ``save_s``."""
    return JobSpec(
        name=name,
        command=(sys.executable, str(HERE / "slow_save_train.py"), str(save_s)),
        gpus=1,
        stopping=FOREVER,
        working_dir=str(HERE),
        env=(("OMP_NUM_THREADS", "1"), ("PYTHONPATH", str(HERE.parents[1]))),
    )


def spec(name: str, stopping: IterationStop = FOREVER, every: int = 50) -> JobSpec:
    return JobSpec(
        name=name,
        command=(
            sys.executable,
            str(EXAMPLES / "mlp_classifier.py"),
            "--checkpoint-every",
            str(every),
            "--hidden",
            "32",
        ),
        gpus=1,
        stopping=stopping,
        working_dir=str(EXAMPLES),
        env=(("OMP_NUM_THREADS", "1"),),
    )


@dataclass(frozen=True)
class Trainer:
    """A live training process of this cluster."""

    pid: int
    node_id: str
    job_id: str
    rank: int
    attempt: int
    gpus: str


def trainers(cluster: LocalCluster) -> list[Trainer]:
    """Every training process whose environment points at this cluster's checkpoints."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            env = proc.environ()
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        if not env.get("MLSCHED_CHECKPOINT_DIR", "").startswith(str(cluster.checkpoint_root)):
            continue
        job_id, rank, attempt = env["MLSCHED_TASK_ID"].rsplit("/", 2)
        gpus = env.get("CUDA_VISIBLE_DEVICES", "")
        node_id = Path(env["MLSCHED_EXIT_FILE"]).relative_to(cluster.root).parts[0]
        found.append(Trainer(proc.pid, node_id, job_id, int(rank), int(attempt), gpus))
    return found


def gone(pid: int) -> bool:
    """The process has exited (a zombie whose parent is stopped counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int, timeout_s: float) -> None:
    """Block until ``pid`` has exited (psutil's wait, in slices, so a zombie also counts)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        proc = psutil.Process(pid)
        for _ in range(int(timeout_s / 0.2)):
            if gone(pid):
                return
            with contextlib.suppress(psutil.TimeoutExpired):
                proc.wait(0.2)
        raise AssertionError(f"process {pid} still running after {timeout_s} s")


def all_events(client: Client) -> list[Event]:
    return list(client.events(after_seq=0, follow=False))


def exit_record(cluster: LocalCluster, node_id: str, job_id: str, rank: int, attempt: int) -> dict:
    path = cluster.root / node_id / "tasks" / job_id / f"rank-{rank}-attempt-{attempt}.exit.json"
    return json.loads(path.read_text())


def terminal_states(events: list[Event], job_id: str) -> list[str]:
    """The terminal states the job entered, in order (exactly one when it ended once)."""
    terminal = {s.value for s in JobState if s.terminal}
    entered = [
        e.message.split(" -> ", 1)[1].split(":", 1)[0]
        for e in events
        if e.job_id == job_id and e.kind == "job_state"
    ]
    return [state for state in entered if state in terminal]


def wait_job(
    cluster: LocalCluster,
    client: Client,
    job_id: str,
    predicate: Callable[[Job], bool],
    timeout_s: float = 120.0,
) -> Job:
    """Block until the job satisfies ``predicate``, re-checking on each of its events."""
    job, _ = client.get(job_id)
    if predicate(job):
        return job
    seen: dict[str, Job] = {}

    def check(event: Event) -> bool:
        seen["job"] = client.get(job_id)[0]
        return predicate(seen["job"])

    try:
        cluster.wait_for_event(lambda e: e.job_id == job_id and check(e), timeout_s)
    except TimeoutError:
        raise AssertionError(f"job {job_id} never got there: {client.get(job_id)}") from None
    return seen["job"]


def checkpoint_steps(cluster: LocalCluster, job_id: str) -> list[int]:
    """Steps of the job's published checkpoints ([0] before the first)."""
    directory = cluster.checkpoint_root / job_id
    steps = [int(p.name[len("step-") : -len(".pt")]) for p in directory.glob("step-*.pt")]
    return steps or [0]


def wait_until(predicate: Callable[[], object], timeout_s: float) -> None:
    """Poll ``predicate`` (a condition on files or processes, which signal nothing)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.1)
