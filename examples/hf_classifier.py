"""Train an MLP on synthetic spirals with the Hugging Face Trainer under mlsched
(docs/frameworks.md). No download: the model is a plain torch module returning its loss.

The callback (trainer_shim.integrations.hf) reports each step, stops on the job's criterion
and checkpoints on suspension; a resumed attempt restores the model, optimizer, schedule and step.

    python examples/hf_classifier.py --max-iterations 300 --checkpoint-dir /tmp/hf
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile

import torch
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

import trainer_shim
from trainer_shim.integrations.hf import MlschedTrainerCallback


class SpiralSet(Dataset):
    """Spiral points as the Trainer's collator wants them: one dict per example."""

    def __init__(self, size: int, classes: int, seed: int) -> None:
        self.inputs, self.labels = spirals(size, classes, seed=seed)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"inputs": self.inputs[index], "labels": self.labels[index]}


class SpiralClassifier(nn.Module):
    def __init__(self, hidden: int, classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes),
        )  # fmt: skip

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.net(inputs)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


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


def training_arguments(output_dir: str, args: argparse.Namespace) -> TrainingArguments:
    return TrainingArguments(
        output_dir=output_dir,  # the Trainer's own files; the job's checkpoints are the shim's
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        max_steps=10**9,  # the job's criterion ends training (MlschedTrainerCallback)
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available() or os.environ.get("MLSCHED_VIRTUAL_GPUS") == "1",
        seed=args.seed,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    with (
        trainer_shim.init(
            checkpoint_dir=args.checkpoint_dir,
            max_iterations=args.max_iterations,
            resume=args.resume,
        ) as job,
        tempfile.TemporaryDirectory() as scratch,
    ):
        torch.manual_seed(args.seed)
        model = SpiralClassifier(args.hidden, args.classes)
        callback = MlschedTrainerCallback(job, checkpoint_every=args.checkpoint_every)
        trainer = Trainer(
            model=model,
            args=training_arguments(scratch, args),
            train_dataset=SpiralSet(args.train_size, args.classes, args.seed),
            callbacks=[callback],
        )
        trainer.train()
        summary = {
            "rank": job.rank,
            "restored": callback.restored_step,
            "step": callback.step,
            "suspended": job.suspend_reason is not None,
        }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
