"""A training process for test_shim_regroup.py: one rank of a tiny job that grows from one
process to two and shrinks back, in place, driven by rank 0 itself standing in for the agent.

Rank 0 (WORLD_SIZE=1) offers the grow plan to its own inbox at --grow-at, and the shrink plan
once it has trained --shrink-after steps in the grown group; it stops --tail steps after the
shrink. The joining rank is started with MLSCHED_REGROUP_GENERATION=1. Every membership change
and every step in the grown group prints one JSON line (event, step, world size, state
digest); the last line is `end`.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainer_shim
from trainer_shim.regroup import ElasticGroup, RegroupInbox, RegroupPlan, state_digest


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--grow-at", type=int, default=3)
    p.add_argument("--shrink-after", type=int, default=4)
    p.add_argument("--tail", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    inbox = RegroupInbox()
    with (
        trainer_shim.init() as job,
        ElasticGroup(job, inbox=inbox, timeout=timedelta(seconds=120)) as group,
    ):
        group.init_process_group()
        torch.manual_seed(job.rank + 7)  # different initial weights: only the broadcast aligns
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        wrapped: nn.Module = model
        step, grown_at, shrunk_at = 0, None, None
        while True:
            change = group.step_boundary(model, optimizer, step, 8)
            if change is not None:
                emit(
                    event=change.event,
                    step=change.step,
                    rank=change.rank,
                    world_size=change.world_size,
                    generation=change.generation,
                    digest=change.digest,
                )
                if change.event == "left":
                    break
                step = change.step
                wrapped = DistributedDataParallel(model) if change.world_size > 1 else model
                if change.event == "regrouped" and change.generation == 1:
                    grown_at = step
                if change.event == "regrouped" and change.generation == 2:
                    shrunk_at = step
            if job.rank == 0:
                if step == args.grow_at:
                    inbox.offer(RegroupPlan(1, 2, "127.0.0.1", args.port))
                if grown_at is not None and step == grown_at + args.shrink_after:
                    inbox.offer(RegroupPlan(2, 1, "127.0.0.1", args.port))
                if shrunk_at is not None and step >= shrunk_at + args.tail:
                    break
            g = torch.Generator().manual_seed(step * 10 + group.rank)
            x = torch.randn(4, 4, generator=g)
            y = torch.randint(2, (4,), generator=g)
            loss = nn.functional.cross_entropy(wrapped(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if group.world_size > 1:
                emit(
                    event="step",
                    step=step,
                    rank=group.rank,
                    world_size=group.world_size,
                    digest=state_digest(model, optimizer),
                )
        emit(event="end", step=step, rank=group.rank, world_size=group.world_size)


if __name__ == "__main__":
    main()
