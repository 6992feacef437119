"""ddp_classifier's training, elastic in place: the node agent may add or remove ranks while it
runs, and the ranks that stay keep their processes (trainer_shim.regroup; docs/ones.md,
"In-place scaling, measured"). The model, the data and the arguments are ddp_classifier's.

The data order depends only on (seed, step, rank), as in ddp_classifier, so a rank that joins
draws the same batches a restarted job would. One JSON line goes to stdout at every membership
change (`event`: started, joined, regrouped, left; with the generation, step, rank, world size,
the state digest, the unix time and `idle_from`, when the rank's last step before it ended; a
(re)start is `started`), at every batch-size change
(`batch_size`) and after the first step that follows either (`first_step`); tests and
benchmarks/bench_resize.py read them.
"""

from __future__ import annotations

import json
import logging
import os
import time

import torch
from ddp_classifier import accuracy, batch_generator, build_model, parse_args
from progress import Progress  # examples/progress.py: ONES' epoch report
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainer_shim
from trainer_shim.regroup import ElasticGroup, Membership


def emit(event: str, **fields: object) -> None:
    """One JSON line for tests and benchmarks; `time` is the unix time of the event, `pid`
    this process's id (a rank that stays through a regroup keeps it)."""
    line = {"event": event, **fields, "pid": os.getpid(), "time": time.time()}
    print(json.dumps(line), flush=True)


def emit_membership(change: Membership, idle_from: float | None) -> None:
    """`idle_from`: when this process finished its last step before the change."""
    emit(
        change.event,
        generation=change.generation,
        step=change.step,
        rank=change.rank,
        world_size=change.world_size,
        batch_size=change.batch_size,
        digest=change.digest,
        idle_from=idle_from,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    target = None if args.target_accuracy is None else ("accuracy", args.target_accuracy, "max")

    with (
        trainer_shim.init(
            checkpoint_dir=args.checkpoint_dir,
            max_iterations=args.max_iterations,
            target=target,
            batch_size=args.batch_size,
            resume=args.resume,
        ) as job,
        ElasticGroup(job) as group,
    ):
        group.init_process_group()
        device = job.device
        full_train = spirals(args.train_size, args.classes, seed=args.seed)
        full_test = spirals(args.test_size, args.classes, seed=args.seed + 1)
        torch.manual_seed(args.seed)  # the same initial weights on every rank
        model = build_model(args.hidden, args.classes).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        step = saved_step = job.restore(model, optimizer=optimizer)
        global_batch = (job.restored and job.restored.batch_size) or job.batch_size or 128
        progress = Progress(**job.load_extra().get("progress", {}), epoch_size=args.train_size)
        rank, world_size, ddp_model = 0, 1, model
        train_x = train_y = test_x = test_y = torch.empty(0)
        loss_value = float("nan")
        announce = False  # print `first_step` after the next step
        last_step_at: float | None = None

        while True:
            change = group.step_boundary(model, optimizer, step, global_batch)
            if change is not None:
                emit_membership(change, last_step_at)
                if change.event == "left":
                    break
                step, rank, world_size = change.step, change.rank, change.world_size
                global_batch = change.batch_size or global_batch
                shard = slice(rank, None, world_size)  # every world_size-th sample, from `rank`
                train_x, train_y = (t[shard].to(device) for t in full_train)
                test_x, test_y = (t[shard].to(device) for t in full_test)
                ddp_model = DistributedDataParallel(model) if world_size > 1 else model
                announce = True
            if job.should_stop():
                break
            requested = job.requested_batch_size()
            if requested:
                global_batch = requested
                emit("batch_size", step=step, rank=rank, batch_size=requested)
                announce = True
            local_batch = max(1, global_batch // world_size)
            started = time.perf_counter()
            generator = batch_generator(args.seed, step, rank)
            index = torch.randint(len(train_x), (local_batch,), generator=generator).to(device)
            loss = nn.functional.cross_entropy(ddp_model(train_x[index]), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP averages the gradients over ranks here
            optimizer.step()
            step += 1
            loss_value = loss.item()
            last_step_at = time.time()
            elapsed = time.perf_counter() - started
            progress.step(global_batch, loss_value, elapsed)
            if announce:
                emit(
                    "first_step",
                    step=step,
                    rank=rank,
                    world_size=world_size,
                    batch_size=global_batch,
                )
                announce = False
            metrics = None
            if step % args.eval_every == 0:
                metrics = {
                    "accuracy": accuracy(model, test_x, test_y, world_size > 1),
                    **progress.report(),
                }
            job.report(
                step,
                loss=loss_value,
                metrics=metrics,
                iteration_time=elapsed,
                batch_size=global_batch,
            )
            extra = {"progress": progress.saved()}
            if job.should_suspend():  # the same answer on every rank, at the same step
                job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)
                break
            if step % args.checkpoint_every == 0:
                job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)
                saved_step = step

        left = change is not None and change.event == "left"
        if not left and job.suspend_reason is None and step != saved_step:
            extra = {"progress": progress.saved()}
            job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)  # final weights
        summary = {
            "rank": rank,
            "step": step,
            "loss": loss_value,
            "left": left,
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
