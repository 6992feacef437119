"""OptStop (MLFS §3.5, after Domhan et al. [17]): is a job at, or close to, its best accuracy?

MLF-C's option (ii) stops a job "when the achieved accuracy equals or is close to the maximum
accuracy". Following [17], the metric history is extrapolated with a weighted ensemble of
parametric learning curves to predict the value at the job's maximum iteration, with a
confidence taken from how much the curves disagree. Two rules stop a job:

* **Near its best.** ``P(f(T) - y_now > epsilon) < delta``: even the optimistic end of the
  prediction (mean + z * spread, z = 1.645 for delta = 5 %, [17]'s threshold) leaves less than
  ``epsilon`` to gain over the latest observed value ``y_now``; and the metric has stopped
  rising: the least-squares line through the latest third of the history gains less than
  ``epsilon`` over that stretch. Comparing with the latest value, not the best seen, keeps a
  job from stopping in a dip of a noisy evaluation; the trend guard keeps it from stopping
  while it still climbs faster than the curves, fitted to the whole history, say (a curve
  with a slow second rise after a fast first one fools every family).
* **Requirement out of reach** (only when the job states a required accuracy, §3.5: "if the
  predicted accuracy is less than an accuracy threshold, the training stops when the prediction
  confidence is higher than a threshold"): ``P(f(T) >= required) < delta``, i.e. mean + z *
  spread still falls short of the requirement, and the latest value does too.

Neither rule fires with fewer than ``min_points`` usable points, or when the history has reached
the maximum iteration (nothing is left to predict; the budget ends the job anyway).

The ensemble (our choices; the paper and [17] name the families but not a fit a scheduler can run
every cycle): iterations are normalised to ``x = iteration / max_iterations`` and values are
turned so that larger is better (a MINIMIZE metric is negated). Four families, each
``y = c + A * h(x; theta)`` with ``A >= 0`` and ``h`` non-decreasing, so every curve rises and
its best is at ``x = 1``:

=========  ==============================  ===========================================
family     h(x; theta)                     shape
=========  ==============================  ===========================================
exp        -exp(-b x)                      saturates fast (exponential approach)
pow        -(1 + b x)^-alpha               power law, hyperbolic for alpha = 1
mmf        -1 / (1 + (k x)^delta)          sigmoid in log x (Morgan-Mercer-Flodin)
log        log(1 + b x)                    never saturates (the conservative member)
=========  ==============================  ===========================================

For every shape ``theta`` on a fixed grid the best ``(c, A)`` is linear least squares in closed
form (``A`` clipped at 0), so a fit is a few numpy matrix products: deterministic, no iterative
optimiser that can diverge, well under a millisecond per family for the <= 100 points used
(longer histories are thinned evenly). Each family is weighted by the inverse square of its
extrapolation error: fitted to the first two thirds of the history and scored on the last third
(from 8 points on; below, the in-sample error); a family erring more than 3 times as much as the
best one is left out (it plainly has the wrong shape, and its far-off value would swamp the
spread). The prediction ``mean`` is the weighted mean of the families' values at ``x = 1``, the
``spread`` their weighted standard deviation. A metric
observed within [0, 1] under MAXIMIZE is a fraction and no prediction passes 1; a MINIMIZE
metric observed >= 0 (a loss) does not go below 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mlsched.model import MetricGoal

__all__ = ["OptStopConfig", "OptStopPrediction", "OptStopVerdict", "opt_stop", "predict_best"]

_MAX_FIT_POINTS = 100  # longer histories are thinned (evenly by index) to this many
_HOLDOUT_MIN_POINTS = 8  # from this many points on, weights come from the last third held out
_ERR_FLOOR = 1e-3  # error floor, in units of the observed range
_ERR_CUTOFF = 3.0  # families erring more than this many times the best one are left out


@dataclass(frozen=True)
class OptStopConfig:
    """``epsilon``: what counts as "close to the maximum", in the metric's units (0.01 is one
    accuracy point for a fraction). ``z``: one-sided normal quantile of the confidence
    (1.645: 95 %, [17]'s delta = 0.05). ``min_points``: usable points needed before any verdict;
    8, so that the families are always weighted by their extrapolation error (live, the history
    gains a point per progress report that carries a new evaluation, at most 2 a second).
    """

    epsilon: float = 0.01
    z: float = 1.645
    min_points: int = 8

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon >= 0):
            raise ValueError(f"OptStopConfig.epsilon must be finite and >= 0, got {self.epsilon}")
        if not (math.isfinite(self.z) and self.z >= 0):
            raise ValueError(f"OptStopConfig.z must be finite and >= 0, got {self.z}")
        if self.min_points < 3:
            raise ValueError(f"OptStopConfig.min_points must be >= 3, got {self.min_points}")


@dataclass(frozen=True)
class OptStopPrediction:
    """The metric predicted at ``max_iterations`` (in the metric's own units and direction)."""

    best: float  # ensemble mean at max_iterations: the best value the run is predicted to reach
    spread: float  # weighted standard deviation of the families' predictions (>= 0)
    current: float  # the latest observed value
    iteration: int  # the latest observed iteration
    goal: MetricGoal
    models: tuple[str, ...]  # families in the ensemble
    recent_gain: float = 0.0  # least-squares trend over the latest third of the history

    @property
    def gain(self) -> float:
        """Predicted improvement still to come over ``current`` (negative: none)."""
        return _up(self.best, self.goal) - _up(self.current, self.goal)

    def optimistic_gain(self, z: float) -> float:
        """The gain at the optimistic end of the prediction: ``gain + z * spread``."""
        return self.gain + z * self.spread

    def near_best(self, config: OptStopConfig) -> bool:
        """Whether the metric stopped rising (``recent_gain``) and even the optimistic
        prediction leaves less than ``epsilon`` to gain."""
        return (
            self.recent_gain <= config.epsilon and self.optimistic_gain(config.z) <= config.epsilon
        )

    def out_of_reach(self, required: float, config: OptStopConfig) -> bool:
        """Whether ``required`` is confidently not reached by max_iterations (nor now)."""
        target = _up(required, self.goal)
        if _up(self.current, self.goal) >= target:
            return False
        return _up(self.best, self.goal) + config.z * self.spread < target


@dataclass(frozen=True)
class OptStopVerdict:
    stop: bool
    reason: str  # why (also when not stopping: for logs and tests)
    prediction: OptStopPrediction | None


def _up(value: float, goal: MetricGoal) -> float:
    """The value in the larger-is-better direction."""
    return value if goal is MetricGoal.MAXIMIZE else -value


# --- the families ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Family:
    name: str
    theta: tuple[np.ndarray, ...]  # one (G, 1) column per shape parameter
    h: Callable[..., np.ndarray]

    def values(self, x: np.ndarray) -> np.ndarray:
        """``h`` at ``x`` (shape (n,)) for every grid shape: (G, n)."""
        return self.h(x[None, :], *self.theta)


def _grid(*axes: np.ndarray) -> tuple[np.ndarray, ...]:
    mesh = np.meshgrid(*axes, indexing="ij")
    columns = []
    for m in mesh:
        column = m.reshape(-1, 1).copy()
        column.flags.writeable = False
        columns.append(column)
    return tuple(columns)


def _h_exp(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return -np.exp(-b * x)


def _h_pow(x: np.ndarray, b: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return -np.exp(-alpha * np.log1p(b * x))


def _h_mmf(x: np.ndarray, k: np.ndarray, delta: np.ndarray) -> np.ndarray:
    return -1.0 / (1.0 + np.exp(delta * np.log(k * x)))


def _h_log(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.log1p(b * x)


_RATES = np.logspace(-1.0, 5.0, 31)  # b, k: half the rise is done around x = 1 / rate
_FAMILIES: tuple[_Family, ...] = (
    _Family("exp", _grid(np.logspace(-1.0, 5.0, 61)), _h_exp),
    _Family("pow", _grid(_RATES, np.logspace(-1.5, 0.7, 9)), _h_pow),
    _Family("mmf", _grid(_RATES, np.linspace(0.5, 4.0, 6)), _h_mmf),
    _Family("log", _grid(_RATES), _h_log),
)


def _fit(family: _Family, x: np.ndarray, z: np.ndarray) -> tuple[float, float, int]:
    """Least-squares ``(c, A)`` with ``A >= 0`` at the best grid shape: (c, A, grid row)."""
    h = family.values(x)
    h_mean = h.mean(axis=1)
    zc = z - z.mean()
    hc = h - h_mean[:, None]
    var = np.einsum("gn,gn->g", hc, hc)
    cov = hc @ zc
    ok = np.isfinite(var) & np.isfinite(cov) & (var > 1e-12) & (cov > 0.0)
    a = np.where(ok, cov / np.where(ok, var, 1.0), 0.0)  # A < 0 clipped: the flat line
    sse = float(zc @ zc) - a * np.where(ok, cov, 0.0)  # residual sum of squares, closed form
    row = int(np.argmin(sse))
    c = float(z.mean() - a[row] * h_mean[row]) if a[row] > 0.0 else float(z.mean())
    return c, float(a[row]), row


def _value(family: _Family, fit: tuple[float, float, int], x: np.ndarray) -> np.ndarray:
    c, a, row = fit
    if a == 0.0:
        return np.full(x.shape, c)
    return c + a * family.values(x)[row]


def _ensemble(x: np.ndarray, z: np.ndarray) -> list[tuple[str, float, float]]:
    """(family, prediction at x = 1, weight) for every family that fits."""
    n = x.size
    held = n // 3 if n >= _HOLDOUT_MIN_POINTS else 0
    end = np.array([1.0])
    members = []
    for family in _FAMILIES:
        fit = _fit(family, x, z)
        if held:
            trained = _fit(family, x[:-held], z[:-held])
            residual = z[-held:] - _value(family, trained, x[-held:])
        else:
            residual = z - _value(family, fit, x)
        error = math.sqrt(float(np.mean(residual * residual)))
        prediction = float(_value(family, fit, end)[0])
        if math.isfinite(error) and math.isfinite(prediction):
            members.append((family.name, prediction, max(error, _ERR_FLOOR)))
    if not members:
        return []
    best = min(error for _, _, error in members)
    return [(name, p, 1.0 / e**2) for name, p, e in members if e <= _ERR_CUTOFF * best]


# --- the API -----------------------------------------------------------------------------------


def _usable(history: Sequence[tuple[int, float]]) -> list[tuple[int, float]]:
    """Points with iteration >= 1 and a finite value, iterations strictly increasing."""
    points: list[tuple[int, float]] = []
    for it, value in history:
        it, value = int(it), float(value)
        if it < 1 or not math.isfinite(value):
            continue
        if points and it <= points[-1][0]:
            raise ValueError(f"history iterations must be strictly increasing at {it}")
        points.append((it, value))
    return points


def predict_best(
    history: Sequence[tuple[int, float]],
    goal: MetricGoal,
    max_iterations: int,
    min_points: int = OptStopConfig.min_points,
) -> OptStopPrediction | None:
    """Predict the metric at ``max_iterations`` from ``(iteration, value)`` history.

    None when there is nothing to predict: fewer than ``min_points`` usable points (iteration
    >= 1, finite value), the latest point at or past ``max_iterations``, or no family fitting.
    Raises ValueError for a non-increasing history or ``max_iterations < 1``.
    """
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    points = _usable(history)
    if len(points) < max(min_points, 3) or points[-1][0] >= max_iterations:
        return None
    current_it, current = points[-1]
    recent_gain = _recent_gain(points, goal)
    if len(points) > _MAX_FIT_POINTS:
        keep = np.unique(np.linspace(0, len(points) - 1, _MAX_FIT_POINTS).round().astype(int))
        points = [points[i] for i in keep]
    x = np.array([p[0] for p in points], dtype=float) / max_iterations
    y = np.array([_up(p[1], goal) for p in points], dtype=float)
    low, high = float(y.min()), float(y.max())
    span = high - low
    if span <= 1e-12 * max(1.0, abs(high)):  # flat: nothing more to come
        return OptStopPrediction(current, 0.0, current, current_it, goal, (), recent_gain)
    if goal is MetricGoal.MAXIMIZE:
        cap = 1.0 if low >= 0.0 and high <= 1.0 else math.inf  # a fraction cannot pass 1
    else:
        cap = 0.0 if high <= 0.0 else math.inf  # a loss (y = -loss <= 0) cannot pass 0
    with np.errstate(all="ignore"):  # overflow at far grid points is expected and discarded
        members = _ensemble(x, (y - low) / span)
    if not members:
        return None
    weights = np.array([w for _, _, w in members])
    values = np.minimum(np.array([low + p * span for _, p, _ in members]), cap)
    mean = float(np.average(values, weights=weights))
    spread = math.sqrt(float(np.average((values - mean) ** 2, weights=weights)))
    best = mean if goal is MetricGoal.MAXIMIZE else -mean
    names = tuple(name for name, _, _ in members)
    return OptStopPrediction(best, spread, current, current_it, goal, names, recent_gain)


def _recent_gain(points: Sequence[tuple[int, float]], goal: MetricGoal) -> float:
    """How much the least-squares line through the latest third of the points (at least 3)
    rises over that stretch, in the larger-is-better direction."""
    window = points[-max(3, len(points) // 3) :]
    its = np.array([p[0] for p in window], dtype=float)
    ys = np.array([_up(p[1], goal) for p in window], dtype=float)
    dx = its - its.mean()
    slope = float(dx @ (ys - ys.mean()) / (dx @ dx))
    return slope * float(its[-1] - its[0])


def opt_stop(
    history: Sequence[tuple[int, float]],
    goal: MetricGoal,
    max_iterations: int,
    required: float | None = None,
    config: OptStopConfig | None = None,
) -> OptStopVerdict:
    """OptStop's verdict on a job with this metric history (the module docstring's rules)."""
    config = config or OptStopConfig()
    prediction = predict_best(history, goal, max_iterations, config.min_points)
    if prediction is None:
        return OptStopVerdict(False, "not enough history to predict", None)
    p = prediction
    if p.near_best(config):
        return OptStopVerdict(
            True,
            f"predicted best {p.best:.4g} (+/- {p.spread:.2g}), now {p.current:.4g}",
            p,
        )
    if required is not None and p.out_of_reach(required, config):
        return OptStopVerdict(
            True,
            f"required {required:.4g} out of reach: predicted best {p.best:.4g} "
            f"(+/- {p.spread:.2g}), now {p.current:.4g}",
            p,
        )
    return OptStopVerdict(
        False, f"predicted best {p.best:.4g} (+/- {p.spread:.2g}), now {p.current:.4g}", p
    )
