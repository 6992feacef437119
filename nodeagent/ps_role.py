"""The role of a parameter-server job's task (issue 16, docs/task-environment.md).

A PS job's attempt runs ``ps_workers`` workers (ranks ``0..w-1``, on GPUs; rank 0 is the chief)
and then its servers (ranks ``w..``, CPU processes without GPUs), all in one
``torch.distributed.rpc`` group of ``WORLD_SIZE`` at ``MASTER_ADDR:MASTER_PORT``. The task learns
its role from these variables; tasks of other jobs get none of them.
"""

from __future__ import annotations

ROLE_VARIABLES = ("MLSCHED_ROLE", "MLSCHED_ROLE_RANK", "MLSCHED_NUM_WORKERS", "MLSCHED_NUM_PS")


def role_env(rank: int, world_size: int, ps_workers: int) -> dict[str, str]:
    """``MLSCHED_ROLE`` (``worker`` or ``ps``), the rank within the role and both counts; {}
    when ``ps_workers`` is 0 (not a PS job)."""
    if ps_workers <= 0:
        return {}
    if not 0 <= rank < world_size or ps_workers > world_size:
        raise ValueError(f"rank {rank} of {world_size} with {ps_workers} workers")
    worker = rank < ps_workers
    return {
        "MLSCHED_ROLE": "worker" if worker else "ps",
        "MLSCHED_ROLE_RANK": str(rank if worker else rank - ps_workers),
        "MLSCHED_NUM_WORKERS": str(ps_workers),
        "MLSCHED_NUM_PS": str(world_size - ps_workers),
    }
