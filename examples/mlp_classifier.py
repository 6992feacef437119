"""Train an MLP on synthetic spirals with trainer_shim (single process, CPU or one GPU).

Locally:   python examples/mlp_classifier.py --max-iterations 300 --checkpoint-dir /tmp/mlp
Resume:    python examples/mlp_classifier.py --max-iterations 600 --checkpoint-dir /tmp/mlp --resume
Under mlsched the node agent's environment decides the checkpoint directory, resumption,
the stopping criterion and the initial batch size (docs/task-environment.md).

Reports the loss every step and, every --eval-every steps, the held-out accuracy, the mean
training loss since the last evaluation (metric "loss", SLAQ's input) and ONES' epoch report
(samples, epoch, epoch_size, initial_loss, throughput, batch_size); checkpoints every
--checkpoint-every steps, when asked to suspend (SuspendNow or SIGTERM) and at the end.
An elastic job (docs/elastic.md) follows `job.scale`: its batch and learning rate change in
place when the scheduler changes the batch, at a step boundary (`job.on_scale_change`).
Prints one JSON line with the final step, loss and accuracy. Batches are drawn from the global
torch RNG, which checkpoints carry, so a suspended-and-resumed run matches an uninterrupted one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import torch
from pace import Pace  # examples/pace.py, next to this script
from progress import Progress  # examples/progress.py, next to this script
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn

import trainer_shim


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=128, help="unless the job spec sets one")
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


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    return (model(inputs).argmax(dim=1) == labels).float().mean().item()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    torch.manual_seed(args.seed)
    train_x, train_y = spirals(args.train_size, args.classes, seed=args.seed)
    test_x, test_y = spirals(args.test_size, args.classes, seed=args.seed + 1)
    target = None if args.target_accuracy is None else ("accuracy", args.target_accuracy, "max")

    with trainer_shim.init(
        checkpoint_dir=args.checkpoint_dir,
        max_iterations=args.max_iterations,
        target=target,
        batch_size=args.batch_size,
        resume=args.resume,
    ) as job:
        device = job.device
        model = build_model(args.hidden, args.classes).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        batch_size = args.batch_size

        def rescale(scale: trainer_shim.Scale) -> None:
            """The batch and learning rate of ``scale`` (linear scaling when the spec asks)."""
            nonlocal batch_size
            batch_size = scale.per_gpu_batch_size or batch_size
            for group in optimizer.param_groups:
                group["lr"] = args.lr * scale.lr_scale

        job.on_scale_change(rescale)
        step = saved_step = job.restore(model, optimizer=optimizer)
        rescale(job.scale)  # the restored optimizer holds the learning rate it was saved with
        progress = Progress(**job.load_extra().get("progress", {}), epoch_size=args.train_size)
        train_x, train_y = train_x.to(device), train_y.to(device)
        test_x, test_y = test_x.to(device), test_y.to(device)
        loss_value = float("nan")

        pace = Pace(args.max_steps_per_second)
        while not job.should_stop():  # a batch change is applied in here (rescale)
            started = time.perf_counter()
            index = torch.randint(len(train_x), (batch_size,)).to(device)
            loss = nn.functional.cross_entropy(model(train_x[index]), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            loss_value = loss.item()
            elapsed = time.perf_counter() - started
            progress.step(batch_size, loss_value, elapsed)
            metrics = None
            if step % args.eval_every == 0:
                metrics = {"accuracy": accuracy(model, test_x, test_y), **progress.report()}
            job.report(
                step,
                loss=loss_value,
                metrics=metrics,
                iteration_time=elapsed,
                batch_size=batch_size,
                compute_time=elapsed,  # one process, no gradient synchronization
            )
            extra = {"progress": progress.saved()}
            if job.should_suspend():
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
            "step": step,
            "loss": loss_value,
            "accuracy": accuracy(model, test_x, test_y),
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
