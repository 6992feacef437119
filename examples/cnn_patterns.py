"""Train a small CNN to classify generated 8x8 pattern images with trainer_shim.

    python examples/cnn_patterns.py --max-iterations 500 --checkpoint-dir /tmp/cnn

The images (stripes in four orientations, checkerboards and rings, with random period,
phase, contrast and heavy pixel noise; see synthetic.patterns) are generated from --seed.
Same loop as mlp_classifier.py, plus a cosine learning-rate schedule whose state travels in
the checkpoint's `extra` dict, to show how to save state the shim does not know about.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time

import torch
from synthetic import PATTERN_CLASSES, patterns  # examples/synthetic.py, next to this script
from torch import nn

import trainer_shim


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--batch-size", type=int, default=64, help="unless the job spec sets one")
    p.add_argument("--channels", type=int, default=16, help="channels of the first conv layer")
    p.add_argument("--hidden", type=int, default=64, help="width of the dense layer")
    p.add_argument("--train-size", type=int, default=20000)
    p.add_argument("--test-size", type=int, default=2000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-iterations", type=int, default=1500, help="unless the job spec sets a criterion"
    )
    p.add_argument("--target-accuracy", type=float, default=None, help="stop once reached")
    p.add_argument("--checkpoint-dir", default=None, help="local mode only")
    p.add_argument("--resume", action="store_true", help="local mode: resume from the newest")
    return p.parse_args(argv)


def build_model(channels: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, 2 * channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # 8x8 -> 4x4
        nn.Flatten(),
        nn.Linear(2 * channels * 16, hidden),
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
    train_x, train_y = patterns(args.train_size, seed=args.seed)
    test_x, test_y = patterns(args.test_size, seed=args.seed + 1)
    target = None if args.target_accuracy is None else ("accuracy", args.target_accuracy, "max")

    with trainer_shim.init(
        checkpoint_dir=args.checkpoint_dir,
        max_iterations=args.max_iterations,
        target=target,
        batch_size=args.batch_size,
        resume=args.resume,
    ) as job:
        device = job.device
        model = build_model(args.channels, args.hidden, len(PATTERN_CLASSES)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        horizon = job.criteria.max_iterations or args.max_iterations
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=horizon)
        step = saved_step = job.restore(model, optimizer=optimizer)
        if "schedule" in job.load_extra():
            schedule.load_state_dict(job.load_extra()["schedule"])
        batch_size = (job.restored and job.restored.batch_size) or job.batch_size
        train_x, train_y = train_x.to(device), train_y.to(device)
        test_x, test_y = test_x.to(device), test_y.to(device)
        loss_value = float("nan")

        def save() -> None:
            extra = {"schedule": schedule.state_dict()}
            job.save_checkpoint(step, model, optimizer=optimizer, extra=extra)

        while not job.should_stop():
            batch_size = job.requested_batch_size() or batch_size
            started = time.perf_counter()
            index = torch.randint(len(train_x), (batch_size,)).to(device)
            loss = nn.functional.cross_entropy(model(train_x[index]), train_y[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            step += 1
            loss_value = loss.item()
            metrics = {"lr": schedule.get_last_lr()[0]}
            if step % args.eval_every == 0:
                metrics["accuracy"] = accuracy(model, test_x, test_y)
            elapsed = time.perf_counter() - started
            job.report(
                step,
                loss=loss_value,
                metrics=metrics,
                iteration_time=elapsed,
                batch_size=batch_size,
                compute_time=elapsed,  # one process, no gradient synchronization
            )
            if job.should_suspend():
                save()
                break
            if step % args.checkpoint_every == 0:
                save()
                saved_step = step

        if job.suspend_reason is None and step != saved_step:
            save()  # the final weights
        summary = {
            "step": step,
            "loss": loss_value,
            "accuracy": accuracy(model, test_x, test_y),
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
