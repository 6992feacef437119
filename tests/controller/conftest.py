"""Shared fixtures for the controller tests: a whole controller core without the network.

``Cluster`` wires a real :class:`ControllerState` (SQLite store, in memory unless a path is
given), a :class:`ManualClock`, a recording command sink standing in for the agent dispatcher,
:class:`AgentEvents`, :class:`JobOperations` and a :class:`Scheduler`. Agents are simulated by
calling ``AgentEvents`` the way the servicer does when messages arrive.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from controller.agent_events import AgentEvents
from controller.clock import ManualClock
from controller.commands import Command, TaskRef, TaskReport
from controller.jobs import JobOperations
from controller.policy.base import Decision, Policy
from controller.policy.fifo import FifoPolicy
from controller.scheduler import Scheduler
from controller.state import ControllerSettings, ControllerState
from controller.store import SqliteStore, Store
from mlsched.model import (
    GpuInfo,
    IterationStop,
    Job,
    JobSpec,
    Node,
    StoppingCriterion,
    Task,
    TaskState,
)

START = 1_000.0
SETTINGS = ControllerSettings(
    lease_s=100.0,
    cycle_s=5.0,
    heartbeat_timeout_s=30.0,
    suspend_grace_s=10.0,
    master_port_range=(29500, 29999),
)


class RecordingSink:
    """Stands in for ``dispatch.AgentSessions.send``: remembers every (node_id, command)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Command]] = []

    def __call__(self, node_id: str, command: Command) -> None:
        self.sent.append((node_id, command))

    def of(self, kind: type) -> list[tuple[str, Command]]:
        return [(n, c) for n, c in self.sent if isinstance(c, kind)]

    def kinds(self) -> list[str]:
        return [type(c).__name__ for _, c in self.sent]

    def clear(self) -> None:
        self.sent.clear()


def make_node(node_id: str, gpus: int = 2, address: str | None = None) -> Node:
    return Node(
        id=node_id,
        address=address if address is not None else f"{node_id}.cluster.local",
        hostname=f"host-{node_id}",
        gpus=tuple(GpuInfo(i, "NVIDIA H100", False, 80 << 30) for i in range(gpus)),
        cpu_count=32,
        memory_total_bytes=256 << 30,
        alive=False,
        last_seen=0.0,
    )


def make_spec(
    name: str = "train",
    gpus: int = 1,
    *,
    gpus_per_process: int = 1,
    max_retries: int = 0,
    stopping: StoppingCriterion | None = None,
) -> JobSpec:
    return JobSpec(
        name=name,
        command=("python", "train.py", "--epochs", "3"),
        gpus=gpus,
        stopping=stopping or IterationStop(1000),
        gpus_per_process=gpus_per_process,
        max_retries=max_retries,
    )


class Cluster:
    """A controller core plus helpers that play the part of node agents."""

    def __init__(
        self,
        store_path: str | Path = ":memory:",
        *,
        settings: ControllerSettings = SETTINGS,
        policy: Policy | None = None,
        clock: ManualClock | None = None,
        store: Store | None = None,
    ) -> None:
        self.clock = clock or ManualClock(START)
        self.sink = RecordingSink()
        self.store = store if store is not None else SqliteStore(store_path)
        self.state = ControllerState(self.store, self.clock, self.sink, settings)
        self.events = AgentEvents(self.state)
        self.jobs = JobOperations(self.state)
        self.disconnected: list[str] = []
        self.scheduler = Scheduler(self.state, policy or FifoPolicy(), self.disconnected.append)

    # --- building blocks ---------------------------------------------------------------------
    node = staticmethod(make_node)
    spec = staticmethod(make_spec)

    def add_node(
        self, node_id: str, gpus: int = 2, reports: Iterable[TaskReport] = (), address=None
    ) -> Node:
        node = make_node(node_id, gpus, address)
        self.events.register(node, list(reports))
        return node

    def submit(self, gpus: int = 1, user: str = "alice", name: str = "train", **kw) -> Job:
        return self.jobs.submit(user, make_spec(name, gpus, **kw))

    def cycle(self) -> Decision:
        return self.scheduler.run_cycle()

    def advance(self, seconds: float, heartbeat: bool = False) -> None:
        """Move the clock; with ``heartbeat`` every connected agent then reports in."""
        self.clock.advance(seconds)
        if heartbeat:
            for node_id in sorted(self.state.connected):
                self.events.heartbeat(node_id)

    # --- reading state -----------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        job = self.state.job(job_id)
        assert job is not None
        return job

    def tasks(self, job_id: str) -> list[Task]:
        return self.state.job_tasks(job_id)

    def task(self, job_id: str, rank: int = 0) -> Task:
        return next(t for t in self.tasks(job_id) if t.rank == rank)

    def event_kinds(self, job_id: str = "") -> list[str]:
        return [e.kind for e in self.store.events_after(0, job_id)]

    # --- playing the agents ------------------------------------------------------------------
    def report_of(self, job_id: str, rank: int, state: TaskState, **kw) -> TaskReport:
        """A status report as a real agent sends it: it repeats the task's steps it knows."""
        task = self.task(job_id, rank)
        attempt = kw.pop("attempt", None)
        if attempt is None:
            attempt = task.attempt
        if "restored_step" in kw:
            kw.setdefault("restored", True)  # the trainer reported what it restored
        if attempt == task.attempt:
            kw.setdefault("checkpoint_step", task.checkpoint_step)
            if task.restored_step is not None:
                kw.setdefault("restored_step", task.restored_step)
                kw.setdefault("restored", True)
        return TaskReport(TaskRef(job_id, rank, attempt), state, **kw)

    def report(self, job_id: str, rank: int, state: TaskState, node: str = "", **kw) -> None:
        report = self.report_of(job_id, rank, state, **kw)
        self.events.task_status(node or self.task(job_id, rank).node_id, report)

    def report_all(self, job_id: str, state: TaskState, **kw) -> None:
        for task in list(self.tasks(job_id)):
            self.report(job_id, task.rank, state, **kw)


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.store.close()


@pytest.fixture
def make_cluster():
    """``make_cluster(store_path, settings=..., policy=..., clock=...)`` for special setups."""
    made: list[Cluster] = []

    def make(*args, **kwargs) -> Cluster:
        made.append(Cluster(*args, **kwargs))
        return made[-1]

    yield make
    for c in made:
        c.store.close()
