"""Integration: a real NodeAgent grows a running gloo job from one process to two and back in
place (RegroupTask), with examples/elastic_classifier.py as the job."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from nodeagent_testkit import ControllerServer, wait_until

from mlsched.v1 import agent_pb2, common_pb2
from nodeagent.agent import NodeAgent

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic_classifier.py"
BIG = "100000000"
START_S = 300.0  # a torch process starting on a loaded 2-core machine


def _events(tmp_path: Path, rank: int) -> list[dict[str, Any]]:
    log = tmp_path / "state" / "logs" / "j-el" / f"rank-{rank}.log"
    if not log.exists():
        return []
    lines = log.read_text(errors="replace").splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"event"')]


def _event(tmp_path: Path, rank: int, kind: str, **match: Any) -> dict[str, Any]:
    """Wait for `rank`'s first printed event of `kind` with the `match` fields."""

    def find() -> dict[str, Any] | None:
        for e in _events(tmp_path, rank):
            if e["event"] == kind and all(e.get(k) == v for k, v in match.items()):
                return e
        return None

    return wait_until(find, START_S)


def test_an_agent_grows_and_shrinks_a_job_in_place(
    tmp_path: Path, controller: ControllerServer, make_agent: Callable[..., NodeAgent]
) -> None:
    make_agent()
    peer = controller.servicer
    peer.wait_for("register")
    spec = common_pb2.JobSpec(
        name="j-el",
        command=[
            sys.executable,
            str(EXAMPLE),
            "--max-iterations",
            BIG,
            "--checkpoint-every",
            BIG,
            "--eval-every",
            BIG,
        ],
        working_dir=str(EXAMPLE.parent),
        gpus=1,
    )
    task0 = agent_pb2.TaskRef(job_id="j-el", rank=0, attempt=1)
    peer.send(launch=agent_pb2.LaunchTask(task=task0, spec=spec, gpu_indices=[0], world_size=1))
    _event(tmp_path, 0, "first_step", world_size=1)

    grow = agent_pb2.RegroupTask(
        job_id="j-el",
        attempt=1,
        generation=1,
        world_size=2,
        new_ranks=[agent_pb2.RegroupRank(rank=1, gpu_indices=[1])],
        spec=spec,
    )
    peer.send(regroup=grow)
    joined = _event(tmp_path, 1, "joined")
    regrouped = _event(tmp_path, 0, "regrouped", generation=1)
    assert regrouped["world_size"] == joined["world_size"] == 2
    assert joined["step"] == regrouped["step"] > 0  # the step count goes on
    assert joined["digest"] == regrouped["digest"]  # rank 0's model and optimizer state
    # Both train at world size 2 from the step after the switch; rank 0 was never restarted.
    after0 = _event(tmp_path, 0, "first_step", world_size=2)
    after1 = _event(tmp_path, 1, "first_step", world_size=2)
    assert after0["step"] == after1["step"] == regrouped["step"] + 1
    assert [e["event"] for e in _events(tmp_path, 0)].count("started") == 1

    peer.send(regroup=agent_pb2.RegroupTask(job_id="j-el", attempt=1, generation=2, world_size=1))
    left = peer.wait_status("j-el", common_pb2.TASK_STATE_COMPLETED, START_S)
    assert left.task.rank == 1 and "left the group at regroup 2" in left.message
    shrunk = _event(tmp_path, 0, "regrouped", generation=2)
    assert shrunk["world_size"] == 1 and shrunk["step"] == _event(tmp_path, 1, "left")["step"]
    _event(tmp_path, 0, "first_step", world_size=1, step=shrunk["step"] + 1)

    peer.send(
        trainer_command=agent_pb2.TrainerCommand(
            task=task0, stop=agent_pb2.StopTraining(reason="test over")
        )
    )
    done = peer.wait_for(
        "task_status",
        lambda s: s.task.rank == 0 and s.state == common_pb2.TASK_STATE_COMPLETED,
        START_S,
    )
    assert done.checkpoint_step > shrunk["step"]  # rank 0 saved its final weights
