"""PyTorch Lightning on mlsched (docs/frameworks.md): a cluster environment and a callback.

    with trainer_shim.init() as job:
        trainer = L.Trainer(
            max_steps=-1, plugins=[MlschedEnvironment(job.env)], callbacks=[MlschedCallback(job)],
            **trainer_placement(job.env),
        )
        trainer.fit(model, loader)

``MlschedEnvironment`` gives Lightning the ranks and the rendezvous the node agent (or torchrun
under ``launcher: torchrun``) set, so Lightning never starts processes itself.
``MlschedCallback`` restores the model and optimizer from the job's latest checkpoint when the
job resumes, reports every step (the loss and Lightning's logged metrics), stops the run when
the job's criterion is met or StopNow arrives, and on a suspension saves a checkpoint and stops
the run; the script then leaves the ``with`` block and the attempt ends as suspended.

The step the shim counts is the restored step plus the optimizer steps of this attempt;
Lightning's own loop position (epoch, batch within it) is not restored, only the model, the
optimizer, every RNG state and the step. Stop the run through the job's criterion, not
``max_steps``, which Lightning counts from 0 in every attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.environments import ClusterEnvironment

from trainer_shim.context import JobContext
from trainer_shim.env import TaskEnv, parse_env

__all__ = ["MlschedCallback", "MlschedEnvironment", "trainer_placement"]


class MlschedEnvironment(ClusterEnvironment):
    """The processes and rendezvous of an mlsched task, as Lightning asks for them."""

    def __init__(self, task_env: TaskEnv | None = None) -> None:
        super().__init__()
        self._env = task_env if task_env is not None else parse_env()

    @property
    def creates_processes_externally(self) -> bool:
        return True  # the node agent or torchrun started every process

    @property
    def main_address(self) -> str:
        return self._env.master_addr or "127.0.0.1"

    @property
    def main_port(self) -> int:
        return self._env.master_port or 0

    @staticmethod
    def detect() -> bool:
        return parse_env().in_cluster

    def world_size(self) -> int:
        return self._env.world_size

    def set_world_size(self, size: int) -> None:
        pass  # fixed by the launch

    def global_rank(self) -> int:
        return self._env.rank

    def set_global_rank(self, rank: int) -> None:
        pass  # fixed by the launch

    def local_rank(self) -> int:
        return self._env.local_rank

    def node_rank(self) -> int:
        return self._env.rank // max(1, self._env.local_world_size)


def trainer_placement(task_env: TaskEnv) -> dict[str, Any]:
    """``devices``, ``num_nodes`` and ``strategy`` for ``L.Trainer`` matching the launch."""
    per_node = max(1, task_env.local_world_size)
    nodes = max(1, task_env.world_size // per_node)
    accelerator = "cpu" if task_env.virtual_gpus or not torch.cuda.is_available() else "gpu"
    strategy = "ddp" if task_env.world_size > 1 else "auto"
    return {
        "accelerator": accelerator,
        "devices": per_node,
        "num_nodes": nodes,
        "strategy": strategy,
    }


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    values = {}
    for name, value in metrics.items():
        single = isinstance(value, torch.Tensor) and value.numel() == 1
        if single or isinstance(value, (int, float)):
            values[name] = float(value)
    return values


class MlschedCallback(Callback):
    """Reports, stops, checkpoints and restores a Lightning run through the job's shim."""

    def __init__(self, job: JobContext, checkpoint_every: int = 0) -> None:
        self.job = job
        self.checkpoint_every = checkpoint_every  # 0: only on suspension and at the end
        self.restored_step = 0
        self.step = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Restore (the optimizers exist from here on)."""
        self.restored_step = self.job.restore(pl_module, self._optimizer(trainer))
        self.step = self.restored_step

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self.step = self.restored_step + trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        self.job.report(self.step, loss=loss, metrics=_scalars(trainer.callback_metrics))
        if self.job.should_suspend():  # collectives: every rank answers at the same step
            self._save(trainer, pl_module)
            trainer.should_stop = True
        elif self.job.should_stop():
            trainer.should_stop = True
        elif self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self._save(trainer, pl_module)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The final weights, unless a suspension or a periodic save just wrote them."""
        if self.job.suspend_reason is None and self.job.checkpoint_step != self.step:
            self._save(trainer, pl_module)

    def _save(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.job.save_checkpoint(self.step, pl_module, optimizer=self._optimizer(trainer))

    @staticmethod
    def _optimizer(trainer: pl.Trainer) -> torch.optim.Optimizer | None:
        return trainer.optimizers[0] if trainer.optimizers else None
