"""Faults injected into a live local cluster, and the invariants checked after each.

Used by the CI part of the suite (tests/faults/test_fault_cycle.py, a few seeded faults) and by
``scripts/fault_soak.py`` (many). A fault is injected at a seeded random point of the
scheduling cycle: after a seeded number of the cluster's events, not after a sleep. The
invariants read what the system records, never the clock:

- every job ends exactly once (the controller's job_state events: one terminal state, none
  after it);
- no checkpoint newer than another is lost (the step each job's LATEST names is at least every
  step the controller recorded in a checkpoint_saved event, and every resume restored the
  newest checkpoint recorded before it);
- no GPU runs two tasks at once (each agent's log: a task starts on a GPU only after the
  task that held it ended).
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from faultkit import (
    AGENT_FLAGS,
    FOREVER,
    all_events,
    checkpoint_steps,
    spec,
    trainers,
    wait_gone,
    wait_job,
)

from mlsched.localcluster import LocalCluster
from mlsched.model import Event, IterationStop, JobState

_STARTED = re.compile(r"started task (\S+): pid \d+, gpus \[([\d, ]*)\]")
_ENDED = re.compile(r"task (\S+) (?:ended|failed to launch)")


@dataclass
class Report:
    faults: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Injector:
    """A cluster of ``nodes`` one-GPU agents under a stream of seeded faults."""

    KINDS = (
        "kill9-controller",
        "kill9-agent",
        "sigstop-agent",
        "second-controller",
        "corrupt-row",
        "dropped-connection",
    )

    def __init__(self, cluster: LocalCluster, seed: int, iterations: int = 400) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.iterations = iterations
        self.report = Report()

    # ------------------------------------------------------------------ the run

    def submit(self, count: int) -> None:
        with self.cluster.client("alice") as client:
            for _ in range(count):
                name = f"soak-{len(self.report.jobs)}"
                job = client.submit(spec(name, IterationStop(self.iterations)))
                self.report.jobs.append(job.id)

    def at_random_point(self) -> None:
        """Wait for a seeded number (0-6) of new cluster events: a random point of a cycle."""
        count = self.rng.randint(0, 6)
        with self.cluster.client("harness") as client:
            after = max((e.seq for e in all_events(client)), default=0)
        seen = {"n": 0}

        def counted(event: Event) -> bool:
            seen["n"] += 1
            return seen["n"] >= count

        if count:
            with contextlib.suppress(TimeoutError):  # a quiet cluster: inject now
                self.cluster.wait_for_event(counted, 10, after_seq=after)

    def inject(self, kind: str) -> None:
        getattr(self, "_" + kind.replace("-", "_"))()
        self.report.faults.append(kind)

    def finish(self, timeout_s: float = 600) -> None:
        """Wait for every job to end, then check the invariants."""
        with self.cluster.client("alice") as client:
            for job_id in self.report.jobs:
                if self.iterations >= FOREVER.iterations:  # ends when told: StopJob, completed
                    job, _ = client.get(job_id)
                    if not job.state.terminal:
                        client.stop(job_id, "the fault run is over")
                wait_job(self.cluster, client, job_id, lambda j: j.state.terminal, timeout_s)
            events = all_events(client)
            jobs = {j.id: j for j, _ in client.list()}
        self.report.problems += check_ends(events, self.report.jobs)
        self.report.problems += check_checkpoints(self.cluster, events, jobs)
        self.report.problems += check_gpus(self.cluster)

    # ------------------------------------------------------------------ faults

    def _node(self) -> str:
        return self.rng.choice(sorted(self.cluster.agents))

    def _restart_agent(self, node_id: str) -> None:
        self.cluster.start_agent(node_id, gpus=1, extra=AGENT_FLAGS)

    def _kill9_controller(self) -> None:
        self.cluster.kill_controller(signal.SIGKILL)
        self.cluster.start_controller()

    def _kill9_agent(self) -> None:
        node_id = self._node()
        self.cluster.kill_agent(node_id, signal.SIGKILL)
        self._restart_agent(node_id)  # re-adopts its running tasks

    def _sigstop_agent(self) -> None:
        """Stopped until the controller declares the node dead and its trainers fenced
        themselves (the shims' deadline), then continued."""
        node_id = self._node()
        stopped = [t.pid for t in trainers(self.cluster) if t.node_id == node_id]
        with self.cluster.client("harness") as client:
            after = max((e.seq for e in all_events(client)), default=0)
        process = self.cluster.agents[node_id]
        process.send_signal(signal.SIGSTOP)
        try:
            self.cluster.wait_for_event(
                lambda e: e.kind == "node_dead" and e.node_id == node_id, 60, after_seq=after
            )
            for pid in stopped:
                wait_gone(pid, 60)
        finally:
            process.send_signal(signal.SIGCONT)

    def _second_controller(self) -> None:
        second = LocalCluster(self.cluster.root, self.cluster.timing, self.cluster.policy)
        try:
            second.start_controller(timeout_s=30)
        except RuntimeError:
            assert second.controller is not None
            code = second.controller.wait(30)
            if code != 3:
                self.report.problems.append(f"a second controller exited {code}, not 3")
            return
        second.kill_controller(signal.SIGKILL)
        self.report.problems.append("a second controller started on the same state directory")

    def _corrupt_row(self) -> None:
        """A node row that no longer decodes (controller down): it is quarantined at start and
        the node registers again."""
        node_id = self._node()
        self.cluster.kill_controller(signal.SIGKILL)
        db = sqlite3.connect(self.cluster.root / "controller" / "controller.db")
        with db:
            db.execute("UPDATE nodes SET data = ? WHERE id = ?", ('{"corrupt', node_id))
        db.close()
        self.cluster.start_controller()
        with self.cluster.client("harness") as client:
            kinds = {e.kind for e in all_events(client)}
        if "state_row_quarantined" not in kinds:
            self.report.problems.append("a corrupt node row was not quarantined")

    def _dropped_connection(self) -> None:
        """Every TCP connection to the controller is reset (ss -K); the agents reconnect."""
        port = self.cluster.address.rsplit(":", 1)[1]
        with self.cluster.client("harness") as client:
            after = max((e.seq for e in all_events(client)), default=0)
        done = subprocess.run(
            ["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            self.report.skipped.append(f"dropped-connection: ss -K failed: {done.stderr.strip()}")
            return
        try:  # an agent whose session was reset registers again
            self.cluster.wait_for_event(lambda e: e.kind == "node_registered", 30, after)
        except TimeoutError:
            self.report.skipped.append("dropped-connection: ss -K reset no agent session")


# ---------------------------------------------------------------------- invariants


def check_ends(events: list[Event], job_ids: list[str]) -> list[str]:
    """Every job ends exactly once, with no state change after its end."""
    terminal = {s.value for s in JobState if s.terminal}
    problems = []
    for job_id in job_ids:
        states = [
            e.message.split(" -> ", 1)[1].split(":", 1)[0]
            for e in events
            if e.job_id == job_id and e.kind == "job_state"
        ]
        ends = [i for i, s in enumerate(states) if s in terminal]
        if len(ends) != 1 or ends[0] != len(states) - 1:
            problems.append(f"{job_id} ended {len(ends)} times: {states}")
    return problems


def check_checkpoints(cluster: LocalCluster, events: list[Event], jobs: dict) -> list[str]:
    """No recorded checkpoint is lost; every resume restored the newest recorded before it."""
    problems = []
    for job_id, job in jobs.items():
        saved = [
            int(e.message.split()[1])
            for e in events
            if e.job_id == job_id and e.kind == "checkpoint_saved"
        ]
        latest = _latest_step(cluster, job_id)
        if saved and latest < max(saved):
            problems.append(f"{job_id}: LATEST is step {latest}, step {max(saved)} was saved")
        for resume in job.resumes:
            if resume.restored_step is not None and resume.restored_step < resume.checkpoint_step:
                problems.append(
                    f"{job_id}: resumed from {resume.restored_step}, "
                    f"checkpoint {resume.checkpoint_step} existed"
                )
    return problems


def _latest_step(cluster: LocalCluster, job_id: str) -> int:
    latest = cluster.checkpoint_root / job_id / "LATEST"
    try:
        name = latest.read_text().strip()
    except FileNotFoundError:
        return max(checkpoint_steps(cluster, job_id))
    return int(re.findall(r"step-(\d+)", name)[0])


def check_gpus(cluster: LocalCluster) -> list[str]:
    """From each agent's log: a task starts on a GPU only once the previous holder ended."""
    problems = []
    for log in sorted(cluster.root.glob("*.log")):
        if log.name == "controller.log":
            continue
        holders: dict[int, str] = {}
        for line in log.read_text(errors="replace").splitlines():
            if started := _STARTED.search(line):
                task = started.group(1)
                for gpu in (int(g) for g in started.group(2).split(",") if g.strip()):
                    if gpu in holders:
                        problems.append(
                            f"{log.stem}: GPU {gpu} given to {task} while {holders[gpu]} ran"
                        )
                    holders[gpu] = task
            elif ended := _ENDED.search(line):
                task = ended.group(1)
                for gpu in [g for g, t in holders.items() if t == task]:
                    del holders[gpu]
    return problems


def run_faults(
    cluster: LocalCluster,
    seed: int,
    faults: int,
    jobs_per_fault: float = 0.5,
    kinds: tuple[str, ...] = Injector.KINDS,
    on_fault: Callable[[int, str], None] | None = None,
    in_order: bool = False,
    iterations: int = 400,
) -> Report:
    """Inject ``faults`` seeded faults (``kinds`` in turn when ``in_order``) while jobs run,
    then let every job end and check the invariants."""
    injector = Injector(cluster, seed, iterations)
    injector.submit(2)
    for n in range(faults):
        if injector.rng.random() < jobs_per_fault:
            injector.submit(1)
        kind = kinds[n % len(kinds)] if in_order else injector.rng.choice(kinds)
        injector.at_random_point()
        injector.inject(kind)
        if on_fault is not None:
            on_fault(n, kind)
    injector.finish()
    return injector.report
