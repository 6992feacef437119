"""The environment contract between the node agent and a training process.

`docs/task-environment.md` is the authority; this module only turns those variables into a
typed, immutable `TaskEnv`. Parsing never touches the network or the file system, except
`resolve_agent_addr`, which reads the agent address file on each (re)connect.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from trainer_shim.stopping import Target

__all__ = ["TaskEnv", "parse_env", "resolve_agent_addr"]


@dataclass(frozen=True)
class TaskEnv:
    """One task's view of the agent/shim environment contract.

    `task_id` is None outside the cluster (local mode); every other field then has its neutral
    value. `rank`/`world_size`/`local_rank`/`local_world_size` follow torch.distributed's
    `env://` variables and default to a single process.
    """

    task_id: str | None = None
    job_id: str | None = None
    task_rank: int | None = None
    attempt: int | None = None
    token: str = ""
    agent_addr: str | None = None
    agent_addr_file: str | None = None
    checkpoint_dir: str | None = None
    resume: bool = False
    exit_file: str | None = None
    max_iterations: int | None = None
    target: Target | None = None
    batch_size: int | None = None
    virtual_gpus: bool = False
    cuda_visible_devices: tuple[str, ...] | None = None
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    omp_num_threads: int | None = None
    fence_suspend_after_s: float | None = None  # agent silent this long: suspend (self-fencing)
    fence_exit_after_s: float | None = None  # agent silent this long: exit at once
    launcher: str | None = None  # MLSCHED_LAUNCHER: "torchrun" under a per-task torchrun

    @property
    def in_cluster(self) -> bool:
        """True when a node agent launched this process (MLSCHED_TASK_ID is set)."""
        return self.task_id is not None


def _get(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _get_int(environ: Mapping[str, str], name: str, *, minimum: int = 0) -> int | None:
    raw = _get(environ, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ValueError(f"{name}={value} must be >= {minimum}")
    return value


def _get_seconds(environ: Mapping[str, str], name: str) -> float | None:
    raw = _get(environ, name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={raw!r} must be a positive number of seconds")
    return value


def _get_bool(environ: Mapping[str, str], name: str) -> bool:
    raw = _get(environ, name)
    if raw is None:
        return False
    lowered = raw.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise ValueError(f"{name}={raw!r} must be 1 or 0")


def _parse_task_id(task_id: str) -> tuple[str, int, int]:
    parts = task_id.rsplit("/", 2)
    if len(parts) != 3 or not parts[0]:
        raise ValueError(f"MLSCHED_TASK_ID={task_id!r} is not <job_id>/<rank>/<attempt>")
    job_id, rank, attempt = parts
    try:
        return job_id, int(rank), int(attempt)
    except ValueError:
        raise ValueError(
            f"MLSCHED_TASK_ID={task_id!r}: rank and attempt must be integers"
        ) from None


def _parse_target(environ: Mapping[str, str]) -> Target | None:
    metric = _get(environ, "MLSCHED_TARGET_METRIC")
    raw_value = _get(environ, "MLSCHED_TARGET_VALUE")
    goal = _get(environ, "MLSCHED_TARGET_GOAL")
    if metric is None and raw_value is None:
        return None
    if metric is None or raw_value is None or goal is None:
        raise ValueError(
            "MLSCHED_TARGET_METRIC, MLSCHED_TARGET_VALUE and MLSCHED_TARGET_GOAL "
            "must be set together"
        )
    try:
        value = float(raw_value)
    except ValueError:
        raise ValueError(f"MLSCHED_TARGET_VALUE={raw_value!r} is not a number") from None
    return Target(metric=metric, value=value, goal=goal.lower())  # Target validates the goal


def parse_env(environ: Mapping[str, str] | None = None) -> TaskEnv:
    """Parse the task environment (default: `os.environ`); raises ValueError when malformed."""
    env = os.environ if environ is None else environ
    task_id = _get(env, "MLSCHED_TASK_ID")
    job_id: str | None = None
    task_rank: int | None = None
    attempt: int | None = None
    if task_id is not None:
        job_id, task_rank, attempt = _parse_task_id(task_id)
    rank = _get_int(env, "RANK")
    world_size = _get_int(env, "WORLD_SIZE", minimum=1) or 1
    rank = rank if rank is not None else (task_rank or 0)
    if rank >= world_size:
        raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    visible = env.get("CUDA_VISIBLE_DEVICES")
    return TaskEnv(
        task_id=task_id,
        job_id=job_id,
        task_rank=task_rank,
        attempt=attempt,
        token=_get(env, "MLSCHED_TASK_TOKEN") or "",
        agent_addr=_get(env, "MLSCHED_AGENT_ADDR"),
        agent_addr_file=_get(env, "MLSCHED_AGENT_ADDR_FILE"),
        checkpoint_dir=_get(env, "MLSCHED_CHECKPOINT_DIR"),
        resume=_get_bool(env, "MLSCHED_RESUME"),
        exit_file=_get(env, "MLSCHED_EXIT_FILE"),
        max_iterations=_get_int(env, "MLSCHED_MAX_ITERATIONS"),
        target=_parse_target(env),
        batch_size=_get_int(env, "MLSCHED_BATCH_SIZE", minimum=1),
        virtual_gpus=_get_bool(env, "MLSCHED_VIRTUAL_GPUS"),
        cuda_visible_devices=(
            None if visible is None else tuple(d.strip() for d in visible.split(",") if d.strip())
        ),
        rank=rank,
        world_size=world_size,
        local_rank=_get_int(env, "LOCAL_RANK") or 0,
        local_world_size=_get_int(env, "LOCAL_WORLD_SIZE", minimum=1) or 1,
        master_addr=_get(env, "MASTER_ADDR"),
        master_port=_get_int(env, "MASTER_PORT"),
        omp_num_threads=_get_int(env, "OMP_NUM_THREADS", minimum=1),
        launcher=_get(env, "MLSCHED_LAUNCHER"),
        **_fence_deadlines(env),
    )


def _fence_deadlines(env: Mapping[str, str]) -> dict[str, float | None]:
    suspend_after = _get_seconds(env, "MLSCHED_FENCE_SUSPEND_AFTER_S")
    exit_after = _get_seconds(env, "MLSCHED_FENCE_EXIT_AFTER_S")
    if (suspend_after is None) != (exit_after is None):
        raise ValueError(
            "MLSCHED_FENCE_SUSPEND_AFTER_S and MLSCHED_FENCE_EXIT_AFTER_S must be set together"
        )
    if suspend_after is not None and exit_after is not None and exit_after < suspend_after:
        raise ValueError("MLSCHED_FENCE_EXIT_AFTER_S must be >= MLSCHED_FENCE_SUSPEND_AFTER_S")
    return {"fence_suspend_after_s": suspend_after, "fence_exit_after_s": exit_after}


def resolve_agent_addr(task_env: TaskEnv) -> str | None:
    """The agent's current gRPC target: the address file when readable, else MLSCHED_AGENT_ADDR.

    Called on every (re)connect, because an agent restart may move its port.
    """
    if task_env.agent_addr_file:
        try:
            with open(task_env.agent_addr_file, encoding="utf-8") as f:
                addr = f.read().strip()
        except OSError:
            addr = ""
        if addr:
            return addr
    return task_env.agent_addr
