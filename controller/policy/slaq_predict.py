"""SLAQ's predictors (Zhang et al., SoCC 2017, §4.1-4.2): loss normalisation, weighted curve
fitting of the loss history, and iteration time from measured samples.

Both curve families of §4.2.2 are fitted to the job's whole loss history, each point weighted
by ``DECAY`` per newer point ("exponentially weighted loss values"), and the one with the
smaller weighted squared error predicts. Iterations are fitted as ``x = k / k_last`` (so the
parameters stay of order one whatever the iteration count).
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlsched.model import SpeedSample

DECAY = 0.9  # ours: weight of a loss point per newer point (§4.2.2 gives no value)
MIN_FIT_POINTS = 4  # the sublinear family has 4 parameters


def sublinear(x, a, b, c, d):
    """§4.2.2: f(k) = 1 / (a k^2 + b k + c) + d (first-order methods, O(1/k) or O(1/k^2))."""
    return 1.0 / (a * x * x + b * x + c) + d


def linear(x, mu, b, c):
    """§4.2.2: f(k) = mu^(k - b) + c (linear / superlinear convergence, |mu| < 1)."""
    return mu ** (x - b) + c


@dataclass(frozen=True)
class LossCurve:
    """A fitted curve over iterations; ``family`` is "sublinear", "linear" or "last-rate"."""

    family: str
    params: tuple[float, ...]
    scale: float  # iterations per unit of x
    fn: Callable

    def __call__(self, k: float) -> float:
        return float(self.fn(k / self.scale, *self.params))


def fit_loss(history: Sequence[tuple[int, float]], decay: float = DECAY) -> LossCurve | None:
    """Weighted fit of both families to ``(iteration, loss)``; the better one (None when no
    fit converges or the history is too short: see :func:`strawman`)."""
    import numpy as np
    from scipy.optimize import curve_fit

    if len(history) < MIN_FIT_POINTS:
        return None
    k = np.array([p[0] for p in history], dtype=float)
    y = np.array([p[1] for p in history], dtype=float)
    scale = max(k[-1], 1.0)
    x = k / scale
    sigma = decay ** (-(len(k) - 1 - np.arange(len(k))) / 2.0)  # weight = 1 / sigma^2
    span = max(float(y.max() - y.min()), 1e-9)
    top = float(y[0] - y.min()) or span
    tries = (
        (
            "sublinear",
            sublinear,
            (1.0, 1.0, 1.0 / top, float(y.min()) - 0.05 * span),
            ([0.0, 0.0, 1e-9, -np.inf], [np.inf, np.inf, np.inf, np.inf]),
        ),
        (
            "linear",
            linear,
            (0.05, 0.0, float(y.min()) - 0.05 * span),
            ([1e-9, -np.inf, -np.inf], [1.0 - 1e-9, np.inf, np.inf]),
        ),
    )
    best: tuple[float, LossCurve] | None = None
    for family, fn, p0, bounds in tries:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                params, _ = curve_fit(fn, x, y, p0=p0, sigma=sigma, bounds=bounds, maxfev=1000)
        except (RuntimeError, ValueError):
            continue
        residual = (fn(x, *params) - y) / sigma
        error = float(np.sum(residual * residual))
        if math.isfinite(error) and (best is None or error < best[0]):
            best = (error, LossCurve(family, tuple(map(float, params)), scale, fn))
    return None if best is None else best[1]


def strawman(history: Sequence[tuple[int, float]]) -> LossCurve | None:
    """§4.2.2's strawman: the last drop per iteration goes on (for histories too short to fit)."""
    if len(history) < 2 or history[-1][0] <= history[-2][0]:
        return None
    (k0, y0), (k1, y1) = history[-2], history[-1]
    rate = max(y0 - y1, 0.0) / (k1 - k0)
    return LossCurve("last-rate", (y1, rate, k1), 1.0, lambda x, y, r, k: y - r * (x - k))


def largest_change(history: Sequence[tuple[int, float]]) -> float:
    """§4.1: the largest loss drop per iteration seen so far (normalisation's denominator)."""
    best = 0.0
    for (k0, y0), (k1, y1) in itertools.pairwise(history):
        if k1 > k0:
            best = max(best, (y0 - y1) / (k1 - k0))
    return best


def iteration_time(samples: Sequence[SpeedSample], gpus: int) -> float | None:
    """§4.2.1: an iteration's time is c * S / N, so N GPUs take ``t_n * n / N`` from the
    measured sample ``(n, t_n)`` closest in GPU count (most reports on ties)."""
    usable = [s for s in samples if s.iteration_time_s > 0 and s.gpus > 0]
    if not usable:
        return None
    near = min(usable, key=lambda s: (abs(s.gpus - gpus), -s.count))
    return near.iteration_time_s * near.gpus / gpus
