"""ONES' progress predictor (§3.2.1): a Gaussian-process regressor from a job's training
status to its progress (share of its samples done), read as a Beta distribution.

Features (§3.2.1, footnote 1): epoch size, initial loss, samples processed, loss-improvement
ratio ``(initial - current) / initial`` and validation accuracy (sizes on a log scale). Each
completed job adds one point per epoch it reported, labelled ``samples then / samples at the
end``; the set is capped at ``capacity`` points drawn uniformly (§3.2.1, "a limited size of
training dataset") and the regressor (scikit-learn, hyper-parameters by maximising the log
marginal likelihood, starting from the previous fit's) is refitted when jobs complete.

Eq. 6 (reconstructed): progress ~ Beta(alpha, beta), ``alpha = max(1, e)`` (epochs processed)
and ``beta = max(1, e (1 / mu - 1))`` (epochs still to process if the predicted mean ``mu`` is
right); the thresholds keep both at least 1, so the density is unimodal (§3.2.1) and its mean
is ``mu`` where no threshold applies. Without a fitted model ``mu`` is ``PRIOR``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from threadpoolctl import threadpool_limits

if TYPE_CHECKING:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import Kernel

PRIOR = 0.5  # ours: the progress assumed before any job has completed
LOW, HIGH = 0.02, 0.98  # predicted means are clipped into this range


@dataclass(frozen=True)
class Status:
    """One report of a job's training status (at an epoch's end)."""

    epoch_size: float
    initial_loss: float
    samples: float
    loss: float
    accuracy: float

    @classmethod
    def of(cls, metrics: Mapping[str, float]) -> Status:
        initial = metrics.get("initial_loss", 0.0)
        return cls(
            metrics.get("epoch_size", 0.0),
            initial,
            metrics.get("samples", 0.0),
            metrics.get("loss", initial),
            metrics.get("accuracy", 0.0),
        )

    def features(self) -> list[float]:
        ratio = (self.initial_loss - self.loss) / abs(self.initial_loss) if self.initial_loss else 0
        return [
            math.log1p(self.epoch_size),
            self.initial_loss,
            math.log1p(self.samples),
            ratio,
            self.accuracy,
        ]

    @property
    def epochs(self) -> float:
        return self.samples / self.epoch_size if self.epoch_size > 0 else 0.0


class ProgressModel:
    """The regressor and its training set; ``rng`` draws the kept points."""

    def __init__(self, rng: np.random.Generator, capacity: int = 100) -> None:
        self._rng = rng
        self.capacity = capacity
        self._x: list[list[float]] = []
        self._y: list[float] = []
        self._gp: GaussianProcessRegressor | None = None
        self._kernel: Kernel | None = None

    @property
    def points(self) -> int:
        return len(self._y)

    def add_job(self, history: Sequence[Status], final_samples: float) -> None:
        """A completed job's reports, labelled with their share of ``final_samples``."""
        if final_samples <= 0:
            return
        for status in history:
            self._x.append(status.features())
            self._y.append(min(1.0, status.samples / final_samples))
        if len(self._y) > self.capacity:
            keep = sorted(self._rng.choice(len(self._y), self.capacity, replace=False))
            self._x = [self._x[i] for i in keep]
            self._y = [self._y[i] for i in keep]
        self._gp = None

    def fit(self) -> None:
        """Refit on the current set (at least two points with distinct labels)."""
        if self._gp is not None or len(set(self._y)) < 2:
            return
        # scikit-learn on first use: it costs a controller about a second to import, and only
        # ONES fits this model
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        kernel = self._kernel or ConstantKernel(1.0) * RBF(np.ones(5)) + WhiteKernel(1e-2)
        gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=0)
        x = np.asarray(self._x)
        self._scale = (x.mean(axis=0), x.std(axis=0) + 1e-9)
        with warnings.catch_warnings(), threadpool_limits(1):  # small matrices: one thread
            warnings.simplefilter("ignore", ConvergenceWarning)
            gp.fit((x - self._scale[0]) / self._scale[1], np.asarray(self._y))
        self._gp = gp
        self._kernel = gp.kernel_  # the next fit starts from these hyper-parameters

    def mean(self, statuses: Sequence[Status]) -> np.ndarray:
        """Predicted progress of each status, clipped to [LOW, HIGH]."""
        if not statuses:
            return np.zeros(0)
        self.fit()
        if self._gp is None:
            return np.full(len(statuses), PRIOR)
        x = np.asarray([s.features() for s in statuses])
        with threadpool_limits(1):
            mu = self._gp.predict((x - self._scale[0]) / self._scale[1])
        return np.clip(mu, LOW, HIGH)


def beta_parameters(epochs: float, mu: float) -> tuple[float, float]:
    """Eq. 6 (module docstring)."""
    return max(1.0, epochs), max(1.0, epochs * (1.0 / mu - 1.0))


def remaining_samples(
    samples: np.ndarray, epochs: np.ndarray, mu: np.ndarray, draws: int, rng: np.random.Generator
) -> np.ndarray:
    """``[j, d]``: job ``j``'s remaining samples in draw ``d``, Eq. 7 ``R = S (1 - p) / p`` with
    ``p`` from its Beta distribution; ``S`` is at least one epoch (a job that has not trained
    yet still has its first epoch to do)."""
    out = np.empty((len(samples), draws))
    for j, (s, e, m) in enumerate(zip(samples, epochs, mu, strict=True)):
        a, b = beta_parameters(e, m)
        p = np.clip(rng.beta(a, b, size=draws), LOW, HIGH)
        out[j] = s * (1.0 - p) / p
    return out
