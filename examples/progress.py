"""What the examples report besides accuracy: the smoothed training loss (SLAQ's input) and
ONES' epoch report (samples, epoch, epoch size, initial loss, throughput, batch size).

The counters that must survive a suspension (`saved()`) go into the checkpoint's `extra`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Progress:
    epoch_size: int  # training samples in one epoch
    samples: int = 0  # samples trained on so far, over every attempt
    initial_loss: float = 0.0  # the first window's mean loss (0: none yet)
    _losses: list[float] = field(default_factory=list)
    _window_samples: int = 0
    _window_s: float = 0.0
    _batch: int = 0

    def step(self, global_batch: int, loss: float, seconds: float) -> None:
        """One step of ``global_batch`` samples (over every rank) that took ``seconds``."""
        self.samples += global_batch
        self._losses.append(loss)
        self._window_samples += global_batch
        self._window_s += seconds
        self._batch = global_batch

    def report(self) -> dict[str, float]:
        """The metrics of the window since the last report; starts a new window."""
        mean = sum(self._losses) / len(self._losses) if self._losses else 0.0
        if not self.initial_loss:
            self.initial_loss = mean
        metrics = {
            "loss": mean,
            "samples": float(self.samples),
            "epoch": float(self.samples // self.epoch_size),
            "epoch_size": float(self.epoch_size),
            "initial_loss": self.initial_loss,
            "batch_size": float(self._batch),
        }
        if self._window_s > 0:
            metrics["throughput"] = self._window_samples / self._window_s
        self._losses, self._window_samples, self._window_s = [], 0, 0.0
        return metrics

    def saved(self) -> dict[str, float]:
        return {"samples": self.samples, "initial_loss": self.initial_loss}
