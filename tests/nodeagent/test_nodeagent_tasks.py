"""The task table without a controller: launch wiring, launch failures, trainer auth."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
from nodeagent_testkit import FakeClock, wait_until

from nodeagent.launcher import ChildProcess, spawn_task
from nodeagent.model import (
    LaunchRequest,
    ProgressInfo,
    StopCommand,
    TaskRef,
    TaskState,
    TaskStatusInfo,
)
from nodeagent.paths import AgentPaths
from nodeagent.selffence import ShimFence
from nodeagent.tasks import NodeShape, TaskManager, TrainerAuthError


class Events:
    def __init__(self) -> None:
        self.statuses: list[TaskStatusInfo] = []

    def task_status(self, status: TaskStatusInfo) -> None:
        self.statuses.append(status)

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        pass


class RecordingSpawn:
    """Records the spawn arguments, then really spawns."""

    def __init__(self) -> None:
        self.calls: list[tuple[Sequence[str], Mapping[str, str], Path, Path, str]] = []

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, header: str
    ) -> ChildProcess:
        self.calls.append((argv, env, cwd, log, header))
        return spawn_task(argv, env, cwd, log, header)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[TaskManager, Events, RecordingSpawn, AgentPaths]:
    paths = AgentPaths(tmp_path / "state", tmp_path / "ckpt")
    paths.state_dir.mkdir(parents=True)
    events, spawn = Events(), RecordingSpawn()
    tasks = TaskManager(
        paths=paths,
        node=NodeShape("node-a", frozenset({0, 1}), 2, 2),
        events=events,
        suspend_grace_s=30,
        kill_grace_s=1,
        spawn=spawn,
        base_env={"PATH": "/usr/bin:/bin", "MLSCHED_JOIN_TOKEN": "secret"},
    )
    tasks.set_trainer_address("127.0.0.1:5555")
    return tasks, events, spawn, paths


def test_launch_wiring(setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths]) -> None:
    tasks, events, spawn, paths = setup
    ref = TaskRef("j-1", 1, 3)
    stale_exit = paths.exit_file(ref)
    stale_exit.parent.mkdir(parents=True)
    stale_exit.write_text('{"outcome": "completed"}')
    tasks.launch(LaunchRequest(ref, (sys.executable, "-c", "print('hi')"), gpu_indices=(1,)))
    argv, env, cwd, log, header = spawn.calls[0]
    assert list(argv) == [sys.executable, "-c", "print('hi')"]
    assert cwd == paths.state_dir  # no working_dir in the spec
    assert log == paths.state_dir / "logs" / "j-1" / "rank-1.log"
    assert header == "=== attempt 3 on node node-a ==="
    assert env["MLSCHED_EXIT_FILE"] == str(stale_exit) and not stale_exit.exists()
    assert env["MLSCHED_CHECKPOINT_DIR"] == str(paths.checkpoint_root / "j-1")
    assert (paths.checkpoint_root / "j-1").is_dir()
    assert env["MLSCHED_AGENT_ADDR"] == "127.0.0.1:5555"
    assert env["MLSCHED_AGENT_ADDR_FILE"] == str(paths.state_dir / "trainer-address")
    assert "MLSCHED_JOIN_TOKEN" not in env
    assert env["OMP_NUM_THREADS"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["MLSCHED_VIRTUAL_GPUS"] == "1"
    assert int(env["MASTER_PORT"]) > 0
    assert [s.state for s in events.statuses] == [TaskState.LAUNCHING, TaskState.RUNNING]
    assert tasks.busy_gpus() == {1}
    wait_until(lambda: (tasks.poll(), events.statuses[-1].state is TaskState.COMPLETED)[1])
    assert tasks.busy_gpus() == set()
    assert log.read_text() == "=== attempt 3 on node node-a ===\nhi\n"


def test_statuses_carry_the_newest_progress_to_the_final_one(
    setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths],
) -> None:
    """Every status carries the attempt's newest progress, the final one too (what a controller
    that was away learns the last progress from); the record's file does not keep it."""
    tasks, events, _, paths = setup
    ref = TaskRef("j-1", 0, 1)
    tasks.launch(LaunchRequest(ref, (sys.executable, "-c", "pass"), gpu_indices=(0,)))
    assert events.statuses[-1].progress is None
    tasks.on_progress(ref, ProgressInfo(iteration=7, loss=0.5))
    tasks.on_progress(ref, ProgressInfo(iteration=9, loss=0.25))  # the child is not polled yet
    wait_until(lambda: (tasks.poll(), events.statuses[-1].state is TaskState.COMPLETED)[1])
    assert events.statuses[-1].progress == ProgressInfo(iteration=9, loss=0.25)
    [final] = [s for s in tasks.statuses() if s.ref == ref]
    assert final.progress == ProgressInfo(iteration=9, loss=0.25)
    assert "last_progress" not in paths.record_file(ref).read_text()


def test_launch_failures_are_reported_failed(
    setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths], tmp_path: Path
) -> None:
    tasks, events, _, paths = setup
    tasks.launch(LaunchRequest(TaskRef("j-none", 0, 1), ()))
    tasks.launch(LaunchRequest(TaskRef("j-cmd", 0, 1), ("/no/such/binary",)))
    tasks.launch(LaunchRequest(TaskRef("j-dir", 0, 1), ("true",), working_dir="/no/such/dir"))
    tasks.launch(LaunchRequest(TaskRef("..", 0, 1), ("true",)))
    failed = {s.ref.job_id: s for s in events.statuses if s.state is TaskState.FAILED}
    assert "empty command" in failed["j-none"].message
    assert "/no/such/binary" in failed["j-cmd"].message
    assert "working directory" in failed["j-dir"].message
    assert "invalid job id" in failed[".."].message
    assert not list(paths.state_dir.glob("rank-*"))  # nothing written outside tasks/
    # a repeated launch of an ended attempt re-reports the end, it does not run again
    count = len(events.statuses)
    tasks.launch(LaunchRequest(TaskRef("j-cmd", 0, 1), ("true",)))
    assert len(events.statuses) == count + 1 and events.statuses[-1].state is TaskState.FAILED


@pytest.mark.parametrize(
    ("command", "env", "what"),
    [
        (("true", "a\0b"), {}, "embedded null byte"),
        (("true",), {"OPTS": "a\0b"}, "embedded null byte"),
        (("tr\0ue",), {}, "embedded null byte"),
    ],
    ids=["nul-in-argument", "nul-in-env", "nul-in-executable"],
)
def test_a_command_popen_refuses_fails_the_task_and_frees_its_gpu(
    setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths],
    command: tuple[str, ...],
    env: dict[str, str],
    what: str,
) -> None:
    """Issue 11 #5: Popen's ValueError (a NUL byte) left the task LAUNCHING holding its GPU."""
    tasks, events, _, _ = setup
    tasks.launch(LaunchRequest(TaskRef("j-nul", 0, 1), command, env=env, gpu_indices=(0,)))
    assert [s.state for s in events.statuses] == [TaskState.LAUNCHING, TaskState.FAILED]
    assert events.statuses[-1].message.startswith("cannot start")
    assert what in events.statuses[-1].message
    assert tasks.busy_gpus() == set()
    assert tasks.running() == []
    tasks.launch(LaunchRequest(TaskRef("j-next", 0, 1), ("true",), gpu_indices=(0,)))
    assert events.statuses[-1].state is TaskState.RUNNING  # the node is not wedged


def test_commands_for_unknown_tasks(
    setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths],
) -> None:
    tasks, events, _, _ = setup
    tasks.suspend(TaskRef("ghost", 0, 1), 1.0, "x")
    assert events.statuses[-1].state is TaskState.LOST
    assert not tasks.trainer_command(TaskRef("ghost", 0, 1), StopCommand("x"))
    assert tasks.fetch_logs("ghost", 0, 0).error
    assert tasks.fetch_logs("../etc", 0, 0).error.startswith("invalid job id")


def test_trainer_authentication(
    setup: tuple[TaskManager, Events, RecordingSpawn, AgentPaths],
) -> None:
    tasks, _, spawn, _ = setup
    ref = TaskRef("j-auth", 0, 2)
    tasks.launch(LaunchRequest(ref, (sys.executable, "-c", "import time; time.sleep(30)")))
    token = spawn.calls[0][1]["MLSCHED_TASK_TOKEN"]
    assert tasks.authenticate("j-auth/0/2", token)[0] == ref
    for task_id, tok in [
        ("j-auth/0/2", "wrong"),
        ("j-auth/0/2", ""),
        ("j-auth/0/1", token),  # stale attempt
        ("j-other/0/2", token),
        ("garbage", token),
    ]:
        with pytest.raises(TrainerAuthError):
            tasks.authenticate(task_id, tok)
    tasks.kill(ref, "done")
    wait_until(lambda: (tasks.poll(), not tasks.running())[1])
    with pytest.raises(TrainerAuthError):  # ended: no longer accepted
        tasks.authenticate("j-auth/0/2", token)


def test_virtual_flag_follows_the_task_gpus(tmp_path: Path) -> None:
    paths = AgentPaths(tmp_path / "state", tmp_path / "ckpt")
    envs: list[Mapping[str, str]] = []

    def spawn(
        argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, header: str
    ) -> ChildProcess:
        envs.append(env)
        raise OSError("not starting anything")

    tasks = TaskManager(
        paths=paths,
        node=NodeShape("node-a", frozenset({2, 3}), 4, 8),  # 2 real GPUs + 2 virtual slots
        events=Events(),
        suspend_grace_s=30,
        kill_grace_s=1,
        spawn=spawn,
    )
    tasks.launch(LaunchRequest(TaskRef("real", 0, 1), ("x",), gpu_indices=(0, 1)))
    tasks.launch(LaunchRequest(TaskRef("virt", 0, 1), ("x",), gpu_indices=(3,)))
    assert [e["MLSCHED_VIRTUAL_GPUS"] for e in envs] == ["0", "1"]
    assert [e["OMP_NUM_THREADS"] for e in envs] == ["4", "2"]


class SignalLog:
    """A real task process that records the signals the table sends it."""

    def __init__(self, child: ChildProcess) -> None:
        self.child = child
        self.sent: list[str] = []
        self.pid, self.create_time = child.pid, child.create_time

    def poll(self):
        return self.child.poll()

    def terminate(self) -> None:
        self.sent.append("TERM")
        self.child.terminate()

    def kill(self) -> None:
        self.sent.append("KILL")
        self.child.kill()


def _sleeping_task(
    tmp_path: Path, extension_s: float
) -> tuple[TaskManager, FakeClock, TaskRef, list[SignalLog]]:
    paths = AgentPaths(tmp_path / "state", tmp_path / "ckpt")
    paths.state_dir.mkdir(parents=True)
    clock = FakeClock()
    spawned: list[SignalLog] = []

    def spawn(*args: Any) -> SignalLog:
        spawned.append(SignalLog(spawn_task(*args)))
        return spawned[-1]

    tasks = TaskManager(
        paths=paths,
        node=NodeShape("node-a", frozenset({0}), 1, 2),
        events=Events(),
        suspend_grace_s=10,
        kill_grace_s=1,
        clock=clock,
        spawn=spawn,  # type: ignore[arg-type]
        save_extension_s=extension_s,
        shim_fence=lambda: ShimFence(4.0, 26.0),
    )
    ref = TaskRef("j-s", 0, 1)
    # The task ignores SIGTERM, as a training script still saving does, so only SIGKILL ends
    # it: a task that died at SIGTERM before the next poll would never be sent SIGKILL, and
    # whether it had died by then would depend on the machine's speed. It is ready (its
    # handler set) before any signal is sent.
    ready = tmp_path / "task-ready"
    script = "import pathlib, signal, sys, time\n"
    script += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    script += "pathlib.Path(sys.argv[1]).touch()\ntime.sleep(600)\n"
    command = (sys.executable, "-c", script, str(ready))
    tasks.launch(LaunchRequest(ref, command, gpu_indices=(0,)))
    wait_until(ready.exists)
    return tasks, clock, ref, spawned


def test_a_save_in_progress_holds_back_the_escalation_up_to_the_extension(tmp_path: Path) -> None:
    tasks, clock, ref, [proc] = _sleeping_task(tmp_path, extension_s=15)
    tasks.suspend(ref, 0, "lease over")  # the default grace: 10 s, SIGKILL at 20 s
    clock.advance(5)
    tasks.on_save(ref, True, 700)
    clock.advance(24)  # 29 s: past 2 x grace, within 2 x grace + extension (35 s)
    tasks.poll()
    assert proc.sent == []
    clock.advance(6)  # 35 s: the cap; SIGTERM and SIGKILL go out
    tasks.poll()
    assert proc.sent == ["TERM", "KILL"]
    wait_until(lambda: tasks.poll() or not tasks.running())
    [final] = [s for s in tasks.statuses() if s.ref == ref]
    assert final.state is TaskState.SUSPENDED


def test_a_save_that_ends_late_leaves_the_kill_grace_to_exit(tmp_path: Path) -> None:
    tasks, clock, ref, [proc] = _sleeping_task(tmp_path, extension_s=15)
    tasks.suspend(ref, 0, "lease over")
    tasks.on_save(ref, True, 700)
    clock.advance(22)
    tasks.poll()
    assert proc.sent == []
    tasks.on_save(ref, False, 700)  # SIGTERM was due at 10 s: now; SIGKILL at 22 + 1 s
    tasks.poll()
    assert proc.sent == ["TERM"]
    clock.advance(1)
    tasks.poll()
    assert proc.sent == ["TERM", "KILL"]


def test_without_a_save_the_suspension_escalates_at_twice_the_grace(tmp_path: Path) -> None:
    tasks, clock, ref, [proc] = _sleeping_task(tmp_path, extension_s=15)
    tasks.suspend(ref, 0, "lease over")
    clock.advance(10)
    tasks.poll()
    assert proc.sent == ["TERM"]
    clock.advance(10)
    tasks.poll()
    assert proc.sent == ["TERM", "KILL"]


def test_a_kill_does_not_wait_for_a_save(tmp_path: Path) -> None:
    tasks, clock, ref, [proc] = _sleeping_task(tmp_path, extension_s=15)
    tasks.on_save(ref, True, 700)
    tasks.kill(ref, "cancelled")
    clock.advance(1)
    tasks.poll()
    assert proc.sent == ["TERM", "KILL"]


def test_the_shims_fencing_deadlines_are_in_the_task_environment(tmp_path: Path) -> None:
    tasks, clock, ref, [proc] = _sleeping_task(tmp_path, extension_s=15)
    env = psutil.Process(proc.pid).environ()
    assert env["MLSCHED_FENCE_SUSPEND_AFTER_S"] == "4.0"
    assert env["MLSCHED_FENCE_EXIT_AFTER_S"] == "26.0"
    tasks.kill(ref, "done")
    clock.advance(1)
    tasks.poll()
