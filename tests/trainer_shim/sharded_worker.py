"""One rank of the sharded-checkpoint test (tests/trainer_shim/test_sharded.py), run under
torchrun in local mode: an FSDP2 model on CPU (gloo), trained and saved in shards by every rank,
or restored from them. Each rank writes its summary to `<out>-rank<r>.json`."""

from __future__ import annotations

import argparse
import hashlib
import json

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import trainer_shim
from trainer_shim.sharded import ShardedCheckpoints


def digest(model: torch.nn.Module) -> str:
    """Hash of the full (unsharded) parameters, the same on every rank."""
    h = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(value.full_tensor().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with (
        trainer_shim.init(
            checkpoint_dir=args.checkpoint_dir, resume=args.resume, keep_checkpoints=1
        ) as job,
        ShardedCheckpoints(job, asynchronous=True) as shards,
    ):
        job.init_process_group()
        torch.manual_seed(args.seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        fully_shard(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

        def state() -> dict:
            model_state, optim_state = get_state_dict(model, optimizer)
            return {"model": model_state, "optim": optim_state}

        loaded = state()
        step = shards.restore(loaded)
        if step:
            set_state_dict(
                model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"]
            )
        restored_digest = digest(model)
        if not args.resume:
            generator = torch.Generator().manual_seed(dist.get_rank())
            for step in range(1, 6):
                inputs = torch.randn(8, 4, generator=generator)
                optimizer.zero_grad()
                model(inputs).square().mean().backward()
                optimizer.step()
                if step == 3:
                    shards.save(step, state())  # in the background, published later
                if step == 5:
                    shards.save(step, state(), asynchronous=False)
        summary = {
            "rank": dist.get_rank(),
            "step": step,
            "restored_digest": restored_digest,
            "digest": digest(model),
            "checkpoint_step": job.checkpoint_step,
        }
    with open(f"{args.out}-rank{summary['rank']}.json", "w", encoding="utf-8") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main()
