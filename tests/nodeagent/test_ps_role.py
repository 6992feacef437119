"""A parameter-server task's role in its environment (issue 16)."""

from __future__ import annotations

import pytest

from nodeagent.model import LaunchRequest, TaskRef
from nodeagent.ps_role import role_env
from nodeagent.taskenv import TaskContext, build_task_env


def test_workers_come_first_then_the_servers():
    assert role_env(1, 5, 2) == {
        "MLSCHED_ROLE": "worker",
        "MLSCHED_ROLE_RANK": "1",
        "MLSCHED_NUM_WORKERS": "2",
        "MLSCHED_NUM_PS": "3",
    }
    assert role_env(4, 5, 2)["MLSCHED_ROLE"] == "ps"
    assert role_env(4, 5, 2)["MLSCHED_ROLE_RANK"] == "2"
    assert role_env(0, 1, 0) == {}
    with pytest.raises(ValueError, match="rank 5 of 5 with 2 workers"):
        role_env(5, 5, 2)


def _env(ps_workers: int, spec_env: dict[str, str]) -> dict[str, str]:
    request = LaunchRequest(
        TaskRef("j", 2, 1), ("x",), env=spec_env, world_size=3, ps_workers=ps_workers
    )
    context = TaskContext("t", "addr", "file", "/ckpt", "/exit", True, 4, 2, 29500)
    return build_task_env(request, context, {})


def test_a_server_task_gets_no_gpus_and_its_role_whatever_the_spec_says():
    env = _env(2, {"MLSCHED_ROLE": "worker", "MLSCHED_NUM_PS": "9"})
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert (env["MLSCHED_ROLE"], env["MLSCHED_ROLE_RANK"], env["MLSCHED_NUM_PS"]) == (
        "ps",
        "0",
        "1",
    )
    assert env["OMP_NUM_THREADS"] == "2"  # one slot's share of 4 cores over 2 slots
    plain = _env(0, {"MLSCHED_ROLE": "worker"})
    assert "MLSCHED_ROLE" not in plain and "MLSCHED_NUM_WORKERS" not in plain
