"""In-place regroups on the agent (nodeagent/regroup.py, TaskManager.regroup): which requests
are refused and why, and what a regroup starts and tells the running ranks."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from nodeagent_testkit import wait_until

from mlsched.v1 import agent_pb2, common_pb2
from nodeagent import convert
from nodeagent.launcher import ChildProcess, spawn_task
from nodeagent.model import (
    LaunchRequest,
    ProgressInfo,
    RegroupCommand,
    RegroupRequest,
    TaskRef,
    TaskState,
    TaskStatusInfo,
)
from nodeagent.paths import AgentPaths
from nodeagent.regroup import joining_launch, regroup_refusal
from nodeagent.tasks import NodeShape, TaskManager

WAIT = (sys.executable, "-c", "import sys; sys.stdin.read()")  # runs until killed


def _launch(rank: int, world: int = 1) -> LaunchRequest:
    return LaunchRequest(TaskRef("j-1", rank, 2), WAIT, world_size=world, env={"A": "1"})


def _request(world: int, new: Sequence[int], **kw: int) -> RegroupRequest:
    return RegroupRequest("j-1", 2, 1, world, tuple(_launch(r, world) for r in new), **kw)


def test_a_grow_with_every_rank_here_is_accepted() -> None:
    assert regroup_refusal(_request(3, [1, 2]), {0}, []) is None
    assert regroup_refusal(_request(1, []), {0, 1}, []) is None  # shrink: rank 1 leaves
    assert regroup_refusal(_request(2, [], batch_size=256), {0, 1}, []) is None


@pytest.mark.parametrize(
    ("request_", "running", "leaving", "why"),
    [
        (_request(2, [1]), {1}, [], r"ranks \[1\] run here, not every rank from 0"),
        (_request(3, [2]), {0}, [], r"from 1 to 3 ranks starts ranks \[1, 2\], not \[2\]"),
        (_request(1, [1]), {0, 1}, [], r"starts ranks \[\], not \[1\]"),
        (_request(2, [1]), {0}, [0], r"ranks \[0\] are already ending"),
        (_request(2, []), {0, 1}, [], "neither the world size nor the batch size"),
        (RegroupRequest("j-1", 2, 0, 2), {0}, [], "generation 0"),
    ],
)
def test_refusals_name_the_reason(
    request_: RegroupRequest, running: set[int], leaving: list[int], why: str
) -> None:
    refusal = regroup_refusal(request_, running, leaving)
    assert refusal is not None and refusal.startswith("job j-1 attempt 2: ")
    assert re.search(why, refusal), refusal


def test_a_joining_launch_gets_the_new_group_and_no_checkpoint() -> None:
    launch = joining_launch(_launch(1), _request(2, [1], batch_size=64), 40_123)
    assert launch.env == {"A": "1", "MLSCHED_REGROUP_GENERATION": "1"}
    assert (launch.world_size, launch.local_world_size, launch.master_port) == (2, 2, 40_123)
    assert launch.resume is False and launch.batch_size == 64


def test_regroup_task_converts_to_one_launch_per_new_rank() -> None:
    msg = agent_pb2.RegroupTask(
        job_id="j-1",
        attempt=2,
        generation=3,
        world_size=3,
        new_ranks=[
            agent_pb2.RegroupRank(rank=1, gpu_indices=[1]),
            agent_pb2.RegroupRank(rank=2, gpu_indices=[2]),
        ],
        spec=common_pb2.JobSpec(command=["python", "t.py"], env={"X": "y"}),
        user="alice",
        batch_size=512,
    )
    request = convert.regroup_from_pb(msg)
    assert (request.generation, request.world_size, request.batch_size) == (3, 3, 512)
    assert [(lr.ref, lr.gpu_indices, lr.world_size) for lr in request.launches] == [
        (TaskRef("j-1", 1, 2), (1,), 3),
        (TaskRef("j-1", 2, 2), (2,), 3),
    ]
    assert request.launches[0].command == ("python", "t.py") and request.launches[0].user == "alice"
    response = convert.trainer_response_to_pb(RegroupCommand(3, 3, "127.0.0.1", 40_000, 512))
    assert response.regroup.master_port == 40_000 and response.regroup.batch_size == 512


class _Events:
    def __init__(self) -> None:
        self.statuses: list[TaskStatusInfo] = []

    def task_status(self, status: TaskStatusInfo) -> None:
        self.statuses.append(status)

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        pass


def test_the_task_table_starts_new_ranks_and_tells_the_running_ones(tmp_path: Path) -> None:
    spawned: list[Mapping[str, str]] = []

    def spawn(
        argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, header: str
    ) -> ChildProcess:
        spawned.append(env)
        return spawn_task(argv, env, cwd, log, header)

    paths = AgentPaths(tmp_path / "state", tmp_path / "ckpt")
    paths.state_dir.mkdir(parents=True)
    events = _Events()
    tasks = TaskManager(
        paths=paths,
        node=NodeShape("node-a", frozenset({0, 1}), 2, 2),
        events=events,
        suspend_grace_s=30,
        kill_grace_s=1,
        spawn=spawn,
        base_env={"PATH": "/usr/bin:/bin"},
    )
    try:
        tasks.launch(_launch(0))
        assert not tasks.regroup(_request(2, [2]))  # refused: nothing started or sent
        assert len(spawned) == 1
        assert tasks.regroup(_request(2, [1], master_port=41_000))
        env = spawned[1]
        assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2"
        assert env["MASTER_PORT"] == "41000" and env["MLSCHED_RESUME"] == "0"
        assert env["MLSCHED_REGROUP_GENERATION"] == "1"
        record_token = spawned[0]["MLSCHED_TASK_TOKEN"]
        _, channel = tasks.authenticate("j-1/0/2", record_token)
        generation = channel.attach()
        assert channel.next_command(generation, 5.0) == RegroupCommand(1, 2, "127.0.0.1", 41_000, 0)
        # Sticky: a reconnecting shim hears it again (and ignores it, same generation).
        again = channel.attach()
        assert isinstance(channel.next_command(again, 5.0), RegroupCommand)
        running = {s.ref for s in events.statuses if s.state is TaskState.RUNNING}
        assert running == {TaskRef("j-1", 0, 2), TaskRef("j-1", 1, 2)}
    finally:
        for ref, _ in tasks.running():
            tasks.kill(ref, "test over")
        wait_until(lambda: (tasks.poll(), not tasks.running())[1])
