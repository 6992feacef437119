"""In-place regroups on the agent's side (ONES's in-place scaling; trainer_shim/regroup.py has
the trainer's side): which regroup requests can be carried out here, and the launches of the
ranks they add. Pure functions; `TaskManager.regroup` applies them."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from nodeagent.model import LaunchRequest, RegroupRequest

REGROUP_GENERATION_ENV = "MLSCHED_REGROUP_GENERATION"  # trainer_shim.regroup reads it


def regroup_refusal(
    request: RegroupRequest, running_ranks: Collection[int], leaving_ranks: Collection[int]
) -> str | None:
    """Why `request` cannot be done in place here; None when it can.

    `running_ranks`: the attempt's ranks running on this node; `leaving_ranks`: those among
    them being suspended, stopped or killed. In place needs every rank of the attempt here
    (0..n-1), none of them leaving, and exactly ranks n..m-1 added when growing to m.
    """
    name = f"job {request.job_id} attempt {request.attempt}"
    if request.generation < 1 or request.world_size < 1:
        return f"{name}: generation {request.generation} and world size must be >= 1"
    old = sorted(running_ranks)
    if not old or old != list(range(len(old))):
        return f"{name}: ranks {old} run here, not every rank from 0 (in place needs them all)"
    if leaving_ranks:
        return f"{name}: ranks {sorted(leaving_ranks)} are already ending"
    added = sorted(launch.ref.rank for launch in request.launches)
    expected = list(range(len(old), request.world_size))
    if added != expected:
        grow = f"from {len(old)} to {request.world_size} ranks"
        return f"{name}: {grow} starts ranks {expected}, not {added}"
    if request.world_size == len(old) and request.batch_size <= 0:
        return f"{name}: the regroup changes neither the world size nor the batch size"
    return None


def joining_launch(
    launch: LaunchRequest, request: RegroupRequest, master_port: int
) -> LaunchRequest:
    """The launch of a new rank: the new world size and rendezvous, no checkpoint (rank 0
    sends the state), and the regroup generation it joins."""
    env = {**launch.env, REGROUP_GENERATION_ENV: str(request.generation)}
    return dataclasses.replace(
        launch,
        env=env,
        world_size=request.world_size,
        local_world_size=request.world_size,
        master_port=master_port,
        resume=False,
        batch_size=request.batch_size or launch.batch_size,
    )
