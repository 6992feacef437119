"""A torchrun task's environment (issue 18; docs/frameworks.md), checked by hand."""

from __future__ import annotations

from nodeagent.model import Launcher, LaunchRequest, TaskRef
from nodeagent.taskenv import TaskContext, build_task_env

CONTEXT = TaskContext(
    token="tok",
    agent_addr="127.0.0.1:4000",
    agent_addr_file="/state/trainer-address",
    checkpoint_dir="/ck/j-1",
    exit_file="/state/exit.json",
    virtual_gpus=False,
    cpu_count=16,
    node_gpu_slots=8,
    master_port=29611,
)


def request(launcher: Launcher, **overrides) -> LaunchRequest:
    fields = {
        "ref": TaskRef("j-1", 1, 3),  # node rank 1, third attempt
        "command": ("torchrun", "train.py"),
        "gpu_indices": (4, 5, 6, 7),
        "world_size": 2,  # two launchers
        "master_addr": "10.0.0.5",
        "master_port": 29611,
        "launcher": launcher,
        **overrides,
    }
    return LaunchRequest(**fields)


def test_a_torchrun_task_gets_the_rendezvous_node_rank_and_processes_per_node():
    env = build_task_env(request(Launcher.TORCHRUN), CONTEXT, {"PET_NNODES": "9"})
    torchrun = {k: v for k, v in env.items() if k.startswith(("PET_", "TORCHELASTIC_"))}
    assert torchrun == {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "4",
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": "10.0.0.5",
        "PET_MASTER_PORT": "29611",
        "PET_RDZV_ID": "j-1",
        "PET_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "j-1",
        "TORCHELASTIC_RESTART_COUNT": "2",
    }
    assert (env["NODE_RANK"], env["GROUP_RANK"], env["MLSCHED_LAUNCHER"]) == ("1", "1", "torchrun")
    assert (env["RANK"], env["WORLD_SIZE"], env["MLSCHED_TASK_ID"]) == ("1", "2", "j-1/1/3")
    # 16 cores / 8 slots * 4 GPUs = 8 threads for the task, shared by its 4 processes
    assert env["OMP_NUM_THREADS"] == "2"


def test_the_agents_launcher_sets_none_of_torchruns_variables():
    env = build_task_env(request(Launcher.AGENT), CONTEXT, {})
    assert not [k for k in env if k.startswith(("PET_", "TORCHELASTIC_", "NODE_RANK", "GROUP_"))]
    assert "MLSCHED_LAUNCHER" not in env
    assert env["OMP_NUM_THREADS"] == "8"  # 16 / 8 * 4 GPUs, one process


def test_a_spec_env_cannot_override_the_rendezvous():
    spec_env = {"PET_MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "x", "OMP_NUM_THREADS": "3"}
    env = build_task_env(request(Launcher.TORCHRUN, env=spec_env), CONTEXT, {})
    assert (env["PET_MASTER_PORT"], env["TORCHELASTIC_RUN_ID"]) == ("29611", "j-1")
    assert env["OMP_NUM_THREADS"] == "3"  # the spec's choice, as for any task
