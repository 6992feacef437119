"""Task records: persistence, and adoption of processes after an agent restart."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from nodeagent_testkit import wait_until

from nodeagent.model import ProgressInfo, TaskRef, TaskState, TaskStatusInfo
from nodeagent.paths import AgentPaths
from nodeagent.records import RecordStore, TaskRecord, process_matches
from nodeagent.tasks import NodeShape, TaskManager


class Events:
    """Collects what the task table reports."""

    def __init__(self) -> None:
        self.statuses: list[TaskStatusInfo] = []
        self.progress: list[tuple[TaskRef, ProgressInfo]] = []

    def task_status(self, status: TaskStatusInfo) -> None:
        self.statuses.append(status)

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        self.progress.append((ref, progress))


@pytest.fixture
def paths(tmp_path: Path) -> AgentPaths:
    return AgentPaths(tmp_path / "state", tmp_path / "ckpt")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A live process in its own session, like a task left behind by a previous agent."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def manager(paths: AgentPaths, events: Events) -> TaskManager:
    return TaskManager(
        paths=paths,
        node=NodeShape("node-a", frozenset({0, 1}), 2, 2),
        events=events,
        suspend_grace_s=30,
        kill_grace_s=1,
    )


def record(job: str, **fields: object) -> TaskRecord:
    return TaskRecord(job_id=job, rank=0, attempt=1, token="t", **fields)  # type: ignore[arg-type]


def test_round_trip_and_delete(paths: AgentPaths) -> None:
    store = RecordStore(paths)
    original = record("j-1", state="RUNNING", pid=42, create_time=1.5, gpu_indices=[0, 1])
    store.save(original)
    path = paths.record_file(original.ref)
    assert path == paths.state_dir / "tasks" / "j-1" / "rank-0-attempt-1.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert json.loads(path.read_text())["version"] == 1
    assert store.load_all() == [original]
    paths.exit_file(original.ref).write_text("{}")
    store.delete(original.ref)
    assert store.load_all() == []
    assert not path.parent.exists()


def test_a_saved_record_is_durable_rename_and_new_directory_fsynced(
    paths: AgentPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11 #8: the rename (and a new job directory) must reach the disk, not only the
    file's data."""
    synced: list[tuple[int, int]] = []  # (device, inode) of every fsynced directory
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            synced.append((st.st_dev, st.st_ino))
        real_fsync(fd)

    paths.tasks_dir.mkdir(parents=True)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    store = RecordStore(paths)
    rec = record("j-durable")
    store.save(rec)
    job_dir = paths.record_file(rec.ref).parent

    def key(p: Path) -> tuple[int, int]:
        return (p.stat().st_dev, p.stat().st_ino)

    assert key(job_dir) in synced  # the rename
    assert key(paths.tasks_dir) in synced  # the new job directory
    synced.clear()
    store.save(record("j-durable", state="RUNNING"))
    assert synced == [key(job_dir)]


def test_unreadable_records_are_set_aside(paths: AgentPaths) -> None:
    store = RecordStore(paths)
    store.save(record("j-ok"))
    bad = paths.tasks_dir / "j-bad" / "rank-0-attempt-1.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{")
    assert [r.job_id for r in store.load_all()] == ["j-ok"]
    assert bad.with_name(bad.name + ".corrupt").exists()


def test_process_matches(sleeper: subprocess.Popen[bytes]) -> None:
    create_time = psutil.Process(sleeper.pid).create_time()
    assert process_matches(sleeper.pid, create_time)
    assert not process_matches(sleeper.pid, create_time - 100)  # pid reused by another process
    assert not process_matches(0, create_time)
    sleeper.kill()
    sleeper.wait()
    assert not process_matches(sleeper.pid, create_time)


def test_adoption_after_restart(
    paths: AgentPaths, sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    store = RecordStore(paths)
    create_time = psutil.Process(sleeper.pid).create_time()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.save(record("j-alive", state="RUNNING", pid=sleeper.pid, create_time=create_time))
    store.save(record("j-reused", state="RUNNING", pid=sleeper.pid, create_time=create_time - 50))
    store.save(record("j-done", state="RUNNING", pid=dead.pid, create_time=1.0))
    paths.exit_file(TaskRef("j-done", 0, 1)).write_text(
        json.dumps({"outcome": "completed", "step": 9, "checkpoint_step": 8})
    )
    store.save(record("j-susp", state="SUSPENDING", pid=dead.pid, suspend_requested=True))
    store.save(record("j-lost", state="RUNNING", pid=dead.pid, create_time=1.0))
    store.save(record("j-unacked", state="FAILED", exit_code=2, final_unacked=True))
    store.save(record("j-acked", state="COMPLETED", final_unacked=False))

    events = Events()
    tasks = manager(paths, events)
    assert tasks.adopt_existing() == 1
    assert tasks.running() == [(TaskRef("j-alive", 0, 1), sleeper.pid)]
    by_job = {s.ref.job_id: s for s in tasks.statuses()}
    assert by_job["j-alive"].state is TaskState.RUNNING
    assert by_job["j-done"].state is TaskState.COMPLETED
    assert by_job["j-done"].checkpoint_step == 8
    assert by_job["j-susp"].state is TaskState.SUSPENDED
    assert by_job["j-lost"].state is TaskState.FAILED
    assert "exit status unknown (agent restarted)" in by_job["j-lost"].message
    assert by_job["j-reused"].state is TaskState.FAILED  # pid alive but a different process
    assert by_job["j-unacked"].state is TaskState.FAILED
    assert "j-acked" not in by_job
    assert not paths.record_file(TaskRef("j-acked", 0, 1)).exists()
    # ended ones stay until acknowledged, and survive another restart meanwhile
    tasks.ack(TaskRef("j-done", 0, 1))
    assert not paths.record_file(TaskRef("j-done", 0, 1)).exists()

    # the adopted process ends: it is not our child, so its exit status is unknown
    sleeper.kill()
    sleeper.wait()
    wait_until(lambda: (tasks.poll(), not tasks.running())[1])
    final = events.statuses[-1]
    assert final.ref.job_id == "j-alive" and final.state is TaskState.FAILED
    stored = json.loads(paths.record_file(final.ref).read_text())
    assert stored["state"] == "FAILED" and stored["final_unacked"] is True


def test_adopted_task_can_still_be_killed(
    paths: AgentPaths, sleeper: subprocess.Popen[bytes]
) -> None:
    create_time = psutil.Process(sleeper.pid).create_time()
    RecordStore(paths).save(
        record("j-k", state="RUNNING", pid=sleeper.pid, create_time=create_time)
    )
    events = Events()
    tasks = manager(paths, events)
    assert tasks.adopt_existing() == 1
    ref = TaskRef("j-k", 0, 1)
    tasks.kill(ref, "cancel")
    sleeper.wait(timeout=10)  # SIGTERM to the process group reached it
    wait_until(lambda: (tasks.poll(), not tasks.running())[1])
    assert events.statuses[-1].state is TaskState.KILLED
