"""Train an MLP on synthetic spirals with DistributedDataParallel and trainer_shim.

Every process is one rank of the `env://` contract (RANK, WORLD_SIZE, MASTER_ADDR, ...), as
the node agent or torchrun sets it; gloo on CPU, NCCL on real GPUs. With WORLD_SIZE=1 (or
unset) it trains in a single process without DDP.

    torchrun --nproc-per-node 2 examples/ddp_classifier.py --max-iterations 500 \
        --checkpoint-dir /tmp/ddp

Each rank draws its share of every global batch from its own shard of the training set,
with a generator seeded from (seed, step, rank): the data order depends on nothing but the
step, so a resumed run repeats an uninterrupted one exactly. Accuracy is evaluated on every
rank's shard of the held-out set and summed over ranks, so every rank reports the same value.
Rank 0 writes the checkpoints; every rank reads them on resume.

Each step reports its wall time and its computation time (UniSched's T_comp: the step without
gradient synchronization). In one process the two are the same. With several ranks DDP
overlaps the all-reduce with the backward pass, so every --compute-probe-every steps the
script also times a forward and backward pass of the unwrapped model on the same batch (no
synchronization, gradients discarded) and reports the step's time with its synchronized
forward and backward replaced by that probe. The probe changes neither weights nor RNG state.

Every --eval-every steps it also reports the mean training loss (metric "loss") and ONES' epoch
report (examples/progress.py). An elastic job follows `job.scale`: the global batch is split
over the ranks (`per_gpu_batch_size`), the learning rate scaled as the spec says, and a batch
changed in place takes effect at a step boundary on every rank (`job.on_scale_change`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import torch
import torch.distributed as dist
from pace import Pace  # examples/pace.py, next to this script
from progress import Progress  # examples/progress.py, next to this script
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainer_shim


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=128, help="global; unless the spec sets one")
    p.add_argument("--hidden", type=int, default=256, help="width of the three hidden layers")
    p.add_argument("--classes", type=int, default=5, help="spiral arms")
    p.add_argument("--train-size", type=int, default=20000)
    p.add_argument("--test-size", type=int, default=4000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-iterations", type=int, default=2000, help="unless the job spec sets a criterion"
    )
    p.add_argument("--target-accuracy", type=float, default=None, help="stop once reached")
    p.add_argument(
        "--max-steps-per-second",
        type=float,
        default=0.0,
        help="pace the loop to at most this many steps a second (0: flat out; examples/pace.py)",
    )
    p.add_argument("--checkpoint-dir", default=None, help="local mode only")
    p.add_argument("--resume", action="store_true", help="local mode: resume from the newest")
    p.add_argument(
        "--compute-probe-every",
        type=int,
        default=50,
        help="with several ranks, time a forward+backward without sync every N steps (0: never)",
    )
    return p.parse_args(argv)


def build_model(hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(2, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def batch_generator(seed: int, step: int, rank: int) -> torch.Generator:
    """The generator drawing `rank`'s share of batch `step`: a function of those alone."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 4_099 + rank)


def local_forward_backward_s(
    model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, device: torch.device
) -> float:
    """Seconds of a forward and backward pass of the unwrapped model, without gradient
    synchronization; leaves no gradients behind."""
    started = time.perf_counter()
    nn.functional.cross_entropy(model(inputs), labels).backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return elapsed


@torch.no_grad()
def accuracy(
    model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, distributed: bool
) -> float:
    """Accuracy over the union of every rank's (`inputs`, `labels`) shard."""
    correct = (model(inputs).argmax(dim=1) == labels).sum()
    counts = torch.stack([correct, torch.tensor(len(labels), device=labels.device)]).double()
    if distributed:
        dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    target = None if args.target_accuracy is None else ("accuracy", args.target_accuracy, "max")

    with trainer_shim.init(
        checkpoint_dir=args.checkpoint_dir,
        max_iterations=args.max_iterations,
        target=target,
        batch_size=args.batch_size,
        resume=args.resume,
    ) as job:
        distributed = job.init_process_group()
        rank, world_size, device = job.rank, job.world_size, job.device
        train_x, train_y = spirals(args.train_size, args.classes, seed=args.seed)
        test_x, test_y = spirals(args.test_size, args.classes, seed=args.seed + 1)
        shard = slice(rank, None, world_size)  # every world_size-th sample, from `rank`
        train_x, train_y = train_x[shard].to(device), train_y[shard].to(device)
        test_x, test_y = test_x[shard].to(device), test_y[shard].to(device)

        torch.manual_seed(args.seed)  # the same initial weights on every rank
        model = build_model(args.hidden, args.classes).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        global_batch, local_batch = args.batch_size, max(1, args.batch_size // world_size)

        def rescale(scale: trainer_shim.Scale) -> None:
            """This rank's share of the global batch, and the learning rate for it."""
            nonlocal global_batch, local_batch
            global_batch = scale.batch_size or global_batch
            local_batch = max(1, scale.per_gpu_batch_size or global_batch // world_size)
            for group in optimizer.param_groups:
                group["lr"] = args.lr * scale.lr_scale

        job.on_scale_change(rescale)  # every rank registers: should_stop() applies changes
        step = saved_step = job.restore(model, optimizer=optimizer)
        rescale(job.scale)  # the restored optimizer holds the learning rate it was saved with
        progress = Progress(**job.load_extra().get("progress", {}), epoch_size=args.train_size)
        ddp_model = DistributedDataParallel(model) if distributed else model
        loss_value = float("nan")
        probe_every = args.compute_probe_every if distributed else 0
        local_pass_s: float | None = None  # the latest probe's forward + backward
        attempt_steps = 0

        pace = Pace(args.max_steps_per_second)
        while not job.should_stop():  # a batch change is applied in here (rescale)
            started = time.perf_counter()
            generator = batch_generator(args.seed, step, rank)
            index = torch.randint(len(train_x), (local_batch,), generator=generator).to(device)
            draw_s = time.perf_counter() - started
            # Probe on the second step of the attempt (the first one is cold), then every N.
            if probe_every and (attempt_steps == 1 or step % probe_every == 0):
                local_pass_s = local_forward_backward_s(
                    model, train_x[index], train_y[index], device
                )
            pass_started = time.perf_counter()
            loss = nn.functional.cross_entropy(ddp_model(train_x[index]), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP averages the gradients over ranks here
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            synced_pass_s = time.perf_counter() - pass_started
            optimizer.step()
            step += 1
            attempt_steps += 1
            loss_value = loss.item()
            elapsed = draw_s + time.perf_counter() - pass_started  # the probe excluded
            compute: float | None = elapsed  # one process: nothing to synchronize
            if distributed:
                compute = None
                if local_pass_s is not None:
                    compute = min(elapsed, elapsed - synced_pass_s + local_pass_s)
            progress.step(global_batch, loss_value, elapsed)
            metrics = None
            if step % args.eval_every == 0:
                metrics = {
                    "accuracy": accuracy(model, test_x, test_y, distributed),
                    **progress.report(),
                }
            job.report(
                step,
                loss=loss_value,
                metrics=metrics,
                iteration_time=elapsed,
                batch_size=global_batch,
                compute_time=compute,
            )
            extra = {"progress": progress.saved()}
            if job.should_suspend():  # the same answer on every rank, at the same step
                job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)
                break
            if step % args.checkpoint_every == 0:
                job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)
                saved_step = step
            pace.rest()

        if job.suspend_reason is None and step != saved_step:
            extra = {"progress": progress.saved()}
            job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)  # final weights
        summary = {
            "rank": rank,
            "step": step,
            "loss": loss_value,
            "accuracy": accuracy(model, test_x, test_y, distributed),
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
