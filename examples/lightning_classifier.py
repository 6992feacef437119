"""Train an MLP on synthetic spirals with PyTorch Lightning under mlsched (docs/frameworks.md).

The Lightning adapter (trainer_shim.integrations.lightning) gives the Trainer the ranks the
node agent (or torchrun) set and a callback that reports each step, stops on the job's criterion
and checkpoints on suspension; a resumed attempt restores the model, optimizer and step.

    python examples/lightning_classifier.py --max-iterations 300 --checkpoint-dir /tmp/lt
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import warnings

import lightning.pytorch as pl
import torch
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainer_shim
from trainer_shim.integrations.lightning import (
    MlschedCallback,
    MlschedEnvironment,
    trainer_placement,
)


class SpiralClassifier(pl.LightningModule):
    def __init__(self, hidden: int, classes: int, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes),
        )  # fmt: skip

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):  # type: ignore[override]
        inputs, labels = batch
        logits = self.net(inputs)
        loss = nn.functional.cross_entropy(logits, labels)
        accuracy = (logits.argmax(dim=1) == labels).float().mean()
        self.log("accuracy", accuracy, sync_dist=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=64, help="per process")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--train-size", type=int, default=4000)
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-iterations", type=int, default=300, help="unless the spec sets one")
    p.add_argument("--checkpoint-dir", default=None, help="local mode only")
    p.add_argument("--resume", action="store_true", help="local mode: resume from the newest")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    with trainer_shim.init(
        checkpoint_dir=args.checkpoint_dir,
        max_iterations=args.max_iterations,
        resume=args.resume,
    ) as job:
        pl.seed_everything(args.seed, verbose=False)
        inputs, labels = spirals(args.train_size, args.classes, seed=args.seed)
        loader = DataLoader(TensorDataset(inputs, labels), batch_size=args.batch_size)
        model = SpiralClassifier(args.hidden, args.classes, args.lr)
        callback = MlschedCallback(job, checkpoint_every=args.checkpoint_every)
        trainer = pl.Trainer(
            max_steps=-1,
            max_epochs=-1,  # the job's criterion ends the run (MlschedCallback)
            plugins=[MlschedEnvironment(job.env)],
            callbacks=[callback],
            logger=False,
            enable_checkpointing=False,  # the shim's checkpoints
            enable_progress_bar=False,
            enable_model_summary=False,
            **trainer_placement(job.env),
        )
        trainer.fit(model, loader)
        summary = {
            "rank": job.rank,
            "restored": callback.restored_step,
            "step": callback.step,
            "accuracy": float(trainer.callback_metrics.get("accuracy", float("nan"))),
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
