"""A network partition between an agent (in its own network namespace) and the controller:
the cut-off agent suspends its own tasks before the controller gives their GPUs and jobs to
a new attempt (issue 11 #2, #4). Skipped where network namespaces cannot be made."""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultkit import (
    AGENT_FLAGS,
    TIMING,
    all_events,
    spec,
    terminal_states,
    trainers,
    wait_gone,
    wait_job,
)
from injector import check_checkpoints, check_ends, check_gpus

from mlsched.localcluster import LocalCluster
from mlsched.model import JobState

pytestmark = pytest.mark.integration

HOST_IP, NS_IP = "10.77.0.1", "10.77.0.2"


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    """A namespace joined to this one by a veth pair (host end 10.77.0.1, namespace end .2)."""
    suffix = secrets.token_hex(3)
    ns, host_end, ns_end = f"mls-{suffix}", f"mlh{suffix}", f"mln{suffix}"
    steps = [
        ("netns", "add", ns),
        ("link", "add", host_end, "type", "veth", "peer", "name", ns_end),
        ("link", "set", ns_end, "netns", ns),
        ("addr", "add", f"{HOST_IP}/24", "dev", host_end),
        ("link", "set", host_end, "up"),
        ("-n", ns, "addr", "add", f"{NS_IP}/24", "dev", ns_end),
        ("-n", ns, "link", "set", ns_end, "up"),
        ("-n", ns, "link", "set", "lo", "up"),
    ]
    try:
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(
                    f"cannot build a network namespace: ip {' '.join(step)}: {done.stderr.strip()}"
                )
        yield ns, host_end
    finally:
        _ip("link", "del", host_end)
        _ip("netns", "del", ns)


class NamespacedCluster(LocalCluster):
    """A local cluster whose controller listens on the veth's host end and whose agents named
    in ``inside`` run in the namespace."""

    def __init__(self, root: Path, ns: str, inside: set[str]) -> None:
        # Plaintext (one shared token): the agent in the namespace reaches the controller at
        # the veth's address, which the certificates of a secure local cluster do not name.
        super().__init__(root, TIMING, insecure=True)
        self.address = f"{HOST_IP}:0"
        self._ns, self._inside, self._starting = ns, inside, ""

    def _mlsched(self) -> list[str]:
        base = [sys.executable, "-m", "mlsched"]
        return ["ip", "netns", "exec", self._ns, *base] if self._starting in self._inside else base

    def start_agent(self, node_id, gpus=2, extra=None):  # type: ignore[no-untyped-def]
        self._starting = node_id
        try:
            return super().start_agent(node_id, gpus, extra)
        finally:
            self._starting = ""


def test_a_partitioned_agent_fences_its_tasks_before_they_run_elsewhere(
    tmp_path: Path, netns: tuple[str, str]
) -> None:
    ns, host_end = netns
    cluster = NamespacedCluster(tmp_path / "cluster", ns, {"node-p"})
    try:
        cluster.start_controller()
        cluster.start_agent("node-p", gpus=1, extra=AGENT_FLAGS)
        cluster.wait_for_nodes({"node-p"})
        with cluster.client("alice") as client:
            job = client.submit(spec("partitioned"))
            wait_job(cluster, client, job.id, lambda j: j.checkpoint_step > 0)
            cluster.start_agent("node-a", gpus=1, extra=AGENT_FLAGS)
            cluster.wait_for_nodes({"node-a"})
            [old] = trainers(cluster)
            seq = max(e.seq for e in all_events(client))
            assert _ip("link", "set", host_end, "down").returncode == 0  # the partition
            cluster.wait_for_event(
                lambda e: e.kind == "node_dead" and e.node_id == "node-p", 60, after_seq=seq
            )
            wait_gone(old.pid, 60)  # the cut-off agent suspended it
            at_exit = max(e.seq for e in all_events(client))
            resumed = wait_job(cluster, client, job.id, lambda j: j.attempt == 2, 120)
            assert _ip("link", "set", host_end, "up").returncode == 0  # healed
            cluster.wait_for_event(
                lambda e: e.kind == "node_registered" and e.node_id == "node-p", 90, at_exit
            )
            client.stop(job.id, "enough")
            wait_job(cluster, client, job.id, lambda j: j.state.terminal)
            events = all_events(client)
            jobs = {j.id: j for j, _ in client.list()}
    finally:
        for process in cluster.agents.values():
            process.send_signal(signal.SIGCONT)
        cluster.stop()
    starts = [e for e in events if e.job_id == job.id and "-> STARTING" in e.message]
    # Every later attempt started after the old process had exited.
    assert len(starts) >= 2 and all(s.seq > at_exit for s in starts[1:])
    assert resumed.node_history[1] == "node-a"  # not on the dead node
    assert jobs[job.id].state is JobState.COMPLETED
    assert terminal_states(events, job.id) == ["COMPLETED"]
    assert check_ends(events, [job.id]) + check_checkpoints(cluster, events, jobs) == []
    assert check_gpus(cluster) == []
