"""A full controller disk refuses new work and keeps running jobs running (issue 11 #6)."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from faultkit import (
    AGENT_FLAGS,
    TIMING,
    all_events,
    checkpoint_steps,
    spec,
    terminal_states,
    trainers,
    wait_job,
    wait_until,
)

from mlsched.localcluster import LocalCluster
from mlsched.model import JobState

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def _tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount`` (the test is skipped where mounting is not permitted)."""
    mount.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs for the controller's state."""
    with _tmpfs(tmp_path / "cluster" / "controller", "2m") as mount:
        yield mount


def _fill(directory: Path) -> Path:
    """Write zeros until the file system is full; returns the filler."""
    filler = directory / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_state_disk_refuses_submits_and_running_jobs_go_on(small_disk: Path) -> None:
    cluster = LocalCluster(small_disk.parent, TIMING, insecure=True)
    try:
        cluster.start_controller()
        for node_id in ("node-a", "node-b"):
            cluster.start_agent(node_id, gpus=1, extra=AGENT_FLAGS)
        cluster.wait_for_nodes({"node-a", "node-b"})
        with cluster.client("alice") as client:
            running = client.submit(spec("running"))
            wait_job(cluster, client, running.id, lambda j: j.checkpoint_step > 0)
            filler = _fill(small_disk)
            with pytest.raises(grpc.RpcError) as refused:
                client.submit(spec("refused"))
            assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "state disk is full" in refused.value.details()
            # The running job trains on: it checkpoints past what it had (outside this disk).
            seen = max(checkpoint_steps(cluster, running.id))
            wait_until(lambda: max(checkpoint_steps(cluster, running.id)) > seen, 60)
            assert [t.job_id for t in trainers(cluster)] == [running.id]
            filler.unlink()
            accepted = client.submit(spec("accepted"))
            wait_job(cluster, client, accepted.id, lambda j: j.state is JobState.RUNNING)
            for job in (running, accepted):
                client.cancel(job.id)
                wait_job(cluster, client, job.id, lambda j: j.state.terminal)
            events = all_events(client)
            names = {j.spec.name for j, _ in client.list()}
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
    assert names == {"running", "accepted"}  # the refused submit left nothing behind
    for job in (running, accepted):
        assert terminal_states(events, job.id) == ["CANCELLED"]


@pytest.fixture
def small_agent_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs for node-a's agent state."""
    with _tmpfs(tmp_path / "cluster" / "node-a", "4m") as mount:
        yield mount


def test_a_full_agent_disk_gets_no_new_tasks_until_it_has_room(small_agent_disk: Path) -> None:
    """node-a's agent reports its state disk under its reserve (1 MiB of 4): the controller
    sends new work to node-b only, and to node-a again once the disk has room."""
    cluster = LocalCluster(small_agent_disk.parent, TIMING, insecure=True)
    try:
        cluster.start_controller()
        for node_id in ("node-a", "node-b"):
            flags = [*AGENT_FLAGS, "--min-free-disk", str(1 << 20)]
            cluster.start_agent(node_id, gpus=1, extra=flags)
        cluster.wait_for_nodes({"node-a", "node-b"})
        filler = _fill(small_agent_disk)
        full = cluster.wait_for_event(
            lambda e: e.kind == "node_disk_full" and e.node_id == "node-a", 60
        )
        with cluster.client("alice") as client:
            first = client.submit(spec("first"))
            wait_job(cluster, client, first.id, lambda j: j.state is JobState.RUNNING)
            second = client.submit(spec("second"))
            _, first_tasks = client.get(first.id)
            # node-a's GPU is free, but its disk is full: only node-b took work.
            assert [t.node_id for t in first_tasks] == ["node-b"]
            assert client.get(second.id)[0].state is JobState.PENDING
            filler.unlink()
            cluster.wait_for_event(
                lambda e: e.kind == "node_disk_ok" and e.node_id == "node-a", 60, full.seq
            )
            wait_job(cluster, client, second.id, lambda j: j.state is JobState.RUNNING)
            _, second_tasks = client.get(second.id)
            assert [t.node_id for t in second_tasks] == ["node-a"]
            for job in (first, second):
                client.cancel(job.id)
                wait_job(cluster, client, job.id, lambda j: j.state.terminal)
            events = all_events(client)
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
    for job in (first, second):
        assert terminal_states(events, job.id) == ["CANCELLED"]
