"""The environment of a task process (docs/task-environment.md), checked by hand."""

from __future__ import annotations

from nodeagent.model import LaunchRequest, TargetMetric, TaskRef
from nodeagent.taskenv import TaskContext, build_task_env, omp_threads

CONTEXT = TaskContext(
    token="tok-123",
    agent_addr="127.0.0.1:41234",
    agent_addr_file="/state/trainer-address",
    checkpoint_dir="/shared/ckpt/j-3f2a9c1d",
    exit_file="/state/tasks/j-3f2a9c1d/rank-1-attempt-2.exit.json",
    virtual_gpus=True,
    cpu_count=16,
    node_gpu_slots=8,
    master_port=29500,
)


def test_full_environment_of_a_distributed_task() -> None:
    request = LaunchRequest(
        ref=TaskRef("j-3f2a9c1d", 1, 2),
        command=("python", "train.py"),
        env={"FOO": "bar", "CUDA_VISIBLE_DEVICES": "7", "MLSCHED_TASK_ID": "forged"},
        gpu_indices=(2, 3),
        world_size=4,
        local_rank=1,
        local_world_size=2,
        master_addr="10.0.0.5",
        master_port=29500,
        resume=True,
        batch_size=256,
        max_iterations=1000,
    )
    base = {
        "PATH": "/usr/bin",
        "HOME": "/home/agent",
        "MLSCHED_JOIN_TOKEN": "cluster-secret",
        "MLSCHED_TARGET_METRIC": "stale",
    }
    assert build_task_env(request, CONTEXT, base) == {
        "PATH": "/usr/bin",
        "HOME": "/home/agent",
        "FOO": "bar",
        "MLSCHED_TASK_ID": "j-3f2a9c1d/1/2",
        "MLSCHED_TASK_TOKEN": "tok-123",
        "MLSCHED_AGENT_ADDR": "127.0.0.1:41234",
        "MLSCHED_AGENT_ADDR_FILE": "/state/trainer-address",
        "MLSCHED_CHECKPOINT_DIR": "/shared/ckpt/j-3f2a9c1d",
        "MLSCHED_RESUME": "1",
        "MLSCHED_EXIT_FILE": "/state/tasks/j-3f2a9c1d/rank-1-attempt-2.exit.json",
        "MLSCHED_MAX_ITERATIONS": "1000",
        "MLSCHED_BATCH_SIZE": "256",
        "MLSCHED_VIRTUAL_GPUS": "1",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "10.0.0.5",
        "MASTER_PORT": "29500",
        "OMP_NUM_THREADS": "4",  # 16 cores / 8 slots * 2 slots
    }


def test_single_process_defaults_and_target_metric() -> None:
    request = LaunchRequest(
        ref=TaskRef("j-1", 0, 1),
        command=("python", "train.py"),
        env={"OMP_NUM_THREADS": "3", "MLSCHED_BATCH_SIZE": "99"},
        gpu_indices=(0,),
        world_size=0,
        local_world_size=0,
        target=TargetMetric("accuracy", 0.9, "max"),
        max_iterations=5000,
    )
    context = TaskContext(**{**CONTEXT.__dict__, "virtual_gpus": False, "master_port": 40001})
    env = build_task_env(request, context, {})
    assert env["MLSCHED_TARGET_METRIC"] == "accuracy"
    assert env["MLSCHED_TARGET_VALUE"] == "0.9"
    assert env["MLSCHED_TARGET_GOAL"] == "max"
    assert env["MLSCHED_MAX_ITERATIONS"] == "5000"
    assert env["MLSCHED_RESUME"] == "0"
    assert env["MLSCHED_VIRTUAL_GPUS"] == "0"
    assert "MLSCHED_BATCH_SIZE" not in env  # only the job spec's batch size counts
    assert env["OMP_NUM_THREADS"] == "3"  # the job spec wins
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (
        "0",
        "1",
        "0",
        "1",
    )
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "40001")
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_no_criterion_means_no_criterion_variables() -> None:
    request = LaunchRequest(ref=TaskRef("j-1", 0, 1), command=("x",))
    env = build_task_env(request, CONTEXT, {})
    for key in ("MLSCHED_MAX_ITERATIONS", "MLSCHED_TARGET_METRIC", "MLSCHED_BATCH_SIZE"):
        assert key not in env
    assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_omp_threads() -> None:
    assert omp_threads(16, 1, 8) == 2
    assert omp_threads(16, 2, 8) == 4
    assert omp_threads(2, 1, 2) == 1
    assert omp_threads(2, 1, 8) == 1  # never 0
    assert omp_threads(8, 0, 4) == 2  # a task without GPUs gets one slot's share
    assert omp_threads(8, 0, 0) == 8  # a node without slots shares every core
