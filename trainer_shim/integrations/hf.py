"""The Hugging Face Trainer on mlsched (docs/frameworks.md): a `TrainerCallback`.

    with trainer_shim.init() as job:
        callback = MlschedTrainerCallback(job, checkpoint_every=100)
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
        trainer.train()

The callback restores the model, the optimizer, the learning-rate schedule and the step from the
job's latest checkpoint when the job resumes (at ``on_train_begin``, once the Trainer has built
its optimizer), reports every step (the latest logged loss and metrics), ends training when the
job's criterion is met or StopNow arrives, and on a suspension saves a checkpoint and ends
training; the script then leaves the ``with`` block and the attempt ends as suspended.

Accelerate (which the Trainer uses) reads the same ``env://`` variables the node agent and
torchrun set, so a job of several processes needs nothing more. The Trainer's own position in
its data (epoch, batch) is not restored and its ``global_step`` restarts at 0 in every attempt:
stop through the job's criterion, with ``max_steps`` in ``TrainingArguments`` left beyond it.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from trainer_shim.context import JobContext

__all__ = ["MlschedTrainerCallback"]


class MlschedTrainerCallback(TrainerCallback):
    """Reports, stops, checkpoints and restores a Hugging Face Trainer run through the shim."""

    def __init__(self, job: JobContext, checkpoint_every: int = 0) -> None:
        self.job = job
        self.checkpoint_every = checkpoint_every  # 0: only on suspension and at the end
        self.restored_step = 0
        self.step = 0
        self._loss: float | None = None
        self._metrics: dict[str, float] = {}

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        optimizer, schedule = kwargs.get("optimizer"), kwargs.get("lr_scheduler")
        self.restored_step = self.job.restore(kwargs.get("model"), optimizer)
        saved_schedule = self.job.load_extra().get("lr_scheduler")
        if schedule is not None and saved_schedule:
            schedule.load_state_dict(saved_schedule)
        self.step = self.restored_step

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        for name, value in (logs or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if name == "loss":
                    self._loss = float(value)
                else:
                    self._metrics[name] = float(value)

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self.step = self.restored_step + state.global_step
        self.job.report(self.step, loss=self._loss, metrics=self._metrics)
        if self.job.should_suspend():  # collectives: every rank answers at the same step
            self._save(kwargs)
            control.should_training_stop = True
        elif self.job.should_stop():
            control.should_training_stop = True
        elif self.checkpoint_every and self.step % self.checkpoint_every == 0:
            self._save(kwargs)

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """The final weights, unless a suspension or a periodic save just wrote them."""
        if self.job.suspend_reason is None and self.job.checkpoint_step != self.step:
            self._save(kwargs)

    def _save(self, kwargs: dict[str, Any]) -> None:
        model: nn.Module = kwargs["model"]
        schedule = kwargs.get("lr_scheduler")
        extra = {} if schedule is None else {"lr_scheduler": schedule.state_dict()}
        self.job.save_checkpoint(self.step, model, optimizer=kwargs.get("optimizer"), extra=extra)
