"""Parsing the agent/shim environment contract."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer_shim.env import TaskEnv, parse_env, resolve_agent_addr
from trainer_shim.stopping import Target

FULL = {
    "MLSCHED_TASK_ID": "j-3f2a9c1d/1/2",
    "MLSCHED_TASK_TOKEN": "secret",
    "MLSCHED_AGENT_ADDR": "127.0.0.1:41234",
    "MLSCHED_AGENT_ADDR_FILE": "/run/agent.addr",
    "MLSCHED_CHECKPOINT_DIR": "/ckpt/j-3f2a9c1d",
    "MLSCHED_RESUME": "1",
    "MLSCHED_EXIT_FILE": "/run/exit.json",
    "MLSCHED_MAX_ITERATIONS": "1200",
    "MLSCHED_TARGET_METRIC": "accuracy",
    "MLSCHED_TARGET_VALUE": "0.95",
    "MLSCHED_TARGET_GOAL": "max",
    "MLSCHED_BATCH_SIZE": "256",
    "MLSCHED_VIRTUAL_GPUS": "1",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "RANK": "1",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29400",
    "OMP_NUM_THREADS": "3",
}


def test_parses_every_contract_variable() -> None:
    env = parse_env(FULL)
    assert env == TaskEnv(
        task_id="j-3f2a9c1d/1/2",
        job_id="j-3f2a9c1d",
        task_rank=1,
        attempt=2,
        token="secret",
        agent_addr="127.0.0.1:41234",
        agent_addr_file="/run/agent.addr",
        checkpoint_dir="/ckpt/j-3f2a9c1d",
        resume=True,
        exit_file="/run/exit.json",
        max_iterations=1200,
        target=Target("accuracy", 0.95, "max"),
        batch_size=256,
        virtual_gpus=True,
        cuda_visible_devices=("2", "3"),
        rank=1,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        master_addr="10.0.0.1",
        master_port=29400,
        omp_num_threads=3,
    )
    assert env.in_cluster


def test_empty_environment_is_local_single_process() -> None:
    env = parse_env({})
    assert env == TaskEnv()
    assert not env.in_cluster
    assert (env.rank, env.world_size, env.resume, env.target) == (0, 1, False, None)


def test_blank_values_count_as_unset_and_empty_cuda_list_means_no_gpu() -> None:
    env = parse_env({"MLSCHED_MAX_ITERATIONS": " ", "CUDA_VISIBLE_DEVICES": ""})
    assert env.max_iterations is None
    assert env.cuda_visible_devices == ()


def test_rank_falls_back_to_the_task_id() -> None:
    env = parse_env({"MLSCHED_TASK_ID": "j-1/2/1", "WORLD_SIZE": "3"})
    assert (env.rank, env.task_rank, env.attempt) == (2, 2, 1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"MLSCHED_TASK_ID": "j-1/0"}, "MLSCHED_TASK_ID"),
        ({"MLSCHED_TASK_ID": "j-1/x/1"}, "MLSCHED_TASK_ID"),
        ({"MLSCHED_MAX_ITERATIONS": "ten"}, "MLSCHED_MAX_ITERATIONS"),
        ({"MLSCHED_BATCH_SIZE": "0"}, "MLSCHED_BATCH_SIZE"),
        ({"MLSCHED_RESUME": "maybe"}, "MLSCHED_RESUME"),
        ({"MLSCHED_TARGET_GOAL": "sideways"}, "goal"),
        ({"MLSCHED_TARGET_VALUE": "high"}, "MLSCHED_TARGET_VALUE"),
        ({"RANK": "4"}, "RANK"),
    ],
)
def test_malformed_values_are_rejected(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_env({**FULL, **overrides})


def test_target_variables_must_come_together() -> None:
    with pytest.raises(ValueError, match="together"):
        parse_env({"MLSCHED_TARGET_METRIC": "loss", "MLSCHED_TARGET_VALUE": "0.1"})
    env = parse_env(
        {
            "MLSCHED_TARGET_METRIC": "loss",
            "MLSCHED_TARGET_VALUE": "0.1",
            "MLSCHED_TARGET_GOAL": "MIN",
        }
    )
    assert env.target == Target("loss", 0.1, "min")


def test_agent_address_prefers_the_file_and_falls_back_to_the_variable(tmp_path: Path) -> None:
    addr_file = tmp_path / "agent.addr"
    env = parse_env(
        {"MLSCHED_AGENT_ADDR": "127.0.0.1:1", "MLSCHED_AGENT_ADDR_FILE": str(addr_file)}
    )
    assert resolve_agent_addr(env) == "127.0.0.1:1"  # no file yet
    addr_file.write_text("127.0.0.1:2\n")
    assert resolve_agent_addr(env) == "127.0.0.1:2"
    addr_file.write_text("")
    assert resolve_agent_addr(env) == "127.0.0.1:1"
