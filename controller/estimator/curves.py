"""Training-iteration estimator (UniSched §III-B2): iterations until a metric reaches a target.

UniSched predicts how many iterations a job with a performance-based stopping criterion needs
with the method of Domhan et al. (IJCAI 2015): an ensemble of parametric learning-curve
families fitted to the metric observed so far and extrapolated. The paper names the families
only by example ("Weibull, log-power") and says nothing of fitting or weighting; the choices
below are ours (docs/estimator-curves.md has the reasons and measured accuracy).

* **Scale.** Iterations are normalised to ``x = iteration / max_iterations`` and the metric to
  ``z = (y - min) / (max - min)`` over the observed values, flipped for a MINIMIZE goal
  (``z = (max - y) / (max - min)``), so every curve rises over its history whatever the metric
  (accuracy, mAP, loss). The target is mapped the same way.
* **Families.** Domhan's families written as ``z = c + A * h(x; theta)`` with ``A >= 0`` and
  ``h`` non-decreasing, so every fit rises (Domhan's prior, too, admits only increasing curves). The
  normalisation needs a free offset ``c``; families without one are used in their offset form,
  and then log-power and Hill3 *are* MMF, while exp4, Janoschek and Weibull are one family under
  least squares. Six distinct families remain: pow3, pow4, ilog2, MMF, Weibull, vapor pressure.
* **Plausible range.** A metric observed within [0, 1] under MAXIMIZE is taken to be a fraction
  (accuracy, mAP, F1) and cannot pass 1; one observed >= 0 under MINIMIZE (a loss) cannot drop
  below 0. Otherwise a curve may rise at most ``_GENERIC_GAIN`` observed ranges further. No
  fit may cross that limit by ``max_iterations``.
* **Fitting.** Bounded least squares by variable projection: each family is linear in
  ``(c, A)``, solved in closed form under the bounds for any shape ``theta`` (one or two
  parameters, each within fixed bounds), so only ``theta`` is searched. A coarse grid over the
  whole bounded range (all families in one numpy matrix) gives the start; then
  ``scipy.optimize.leastsq`` (MINPACK's Levenberg-Marquardt, finite-difference Jacobian)
  minimises the projected residuals, the bounds kept by a sine transform (:func:`_refine`).
  It reaches the optima that ``scipy.optimize.least_squares`` reaches with the bounds
  themselves (trust-region reflective, the method of bounded ``curve_fit``) at a fourth of the
  cost or less: ``least_squares`` spends far more Python per iteration (measurements in
  docs/estimator-curves.md).
* **Weights.** Domhan samples the ensemble weights by MCMC, far too slow for a scheduler that
  predicts for thousands of jobs. Each family is instead weighted by the inverse square of its
  extrapolation error: refitted to the first two thirds of the history, scored (RMSE) on the
  last third - extrapolation, not in-sample fit, is what the prediction needs. Below 7 points
  the in-sample RMSE stands in. The prediction uses the fits to the whole history.
* **Prediction.** The first integer iteration in ``(last observed, max_iterations]`` at which
  the weighted ensemble mean reaches the target: a grid of at most 1024 iterations, refined
  inside the bracketing interval until exact (the mean is non-decreasing).

With fewer than 3 usable points (finite metric, iteration >= 1) or no family fitting, the
prediction is ``max_iterations`` (Chronus' conservative assumption).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mlsched.model import MetricGoal

__all__ = ["CurvePrediction", "predict_target_iteration"]

_MIN_POINTS = 3  # fewer usable points: no fit, assume max_iterations
_MAX_FIT_POINTS = 100  # longer histories are thinned (evenly by index) to this many points
_HOLDOUT_MIN_POINTS = 7  # from this many points on, weights come from the last third held out
_ERR_FLOOR = 1e-3  # RMSE floor in normalised units (0.1 % of the observed range)
_GENERIC_GAIN = 4.0  # an unbounded metric may rise at most this many observed ranges further
_FTOL = 1e-5  # leastsq: stop when a step lowers the SSE by less than this share
_XTOL = 1e-7  # ... or moves p (about 2 pi, see _refine) by less than this share
_FACTOR = 0.1  # leastsq: the first step is at most this share of |p|: 0.6-0.9 (radians)
_MAX_NFEV = 300  # residual evaluations per fit, finite-difference Jacobians included
_EDGE = 0.999  # a start on a bound is moved in to sin(p) = +-_EDGE, where du/dp is not 0
_UNFIT = 1e3  # residuals of a non-finite candidate: far worse than any fit (see _refine)
_SEARCH_GRID = 1024  # iterations evaluated per round of the crossing search


@dataclass(frozen=True)
class CurvePrediction:
    """Predicted first iteration at which a job's metric reaches its target."""

    iteration: int  # first iteration reaching the target, capped at max_iterations
    reached: bool  # False: not reached by max_iterations (then iteration == max_iterations)
    models: tuple[str, ...]  # families in the ensemble; empty when the fallback was used


# --- the families: z = c + A * h(x; theta), A >= 0, h non-decreasing in x within the bounds ----


def _h_pow3(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    # pow3: y = c - a * x^-alpha
    return -np.exp(-alpha * np.log(x))


def _h_pow4(x: np.ndarray, r: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    # pow4: y = c - (a*x + b)^-alpha, here c - A * (1 + r*x)^-alpha (A = b^-alpha, r = a/b)
    return -np.exp(-alpha * np.log1p(r * x))


def _h_ilog2(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    # ilog2: y = c - a / log(x), x counted from 1 in units of 1/k: c - A / log(1 + k*x)
    return -1.0 / np.log1p(k * x)


def _h_mmf(x: np.ndarray, k: np.ndarray, delta: np.ndarray) -> np.ndarray:
    # MMF: y = alpha - (alpha - beta) / (1 + (kappa*x)^delta); log-power, Hill3 + offset alike
    return -1.0 / (1.0 + np.exp(delta * (np.log(k) + np.log(x))))


def _h_weibull(x: np.ndarray, k: np.ndarray, delta: np.ndarray) -> np.ndarray:
    # Weibull: y = alpha - (alpha - beta) * exp(-(kappa*x)^delta); = Janoschek = exp4
    return -np.exp(-np.exp(delta * (np.log(k) + np.log(x))))


def _h_vapor(x: np.ndarray, beta: np.ndarray, s: np.ndarray) -> np.ndarray:
    # vapor pressure: y = exp(a + b/x + c*log x), + offset: d + A * x^s * exp(-beta/x)
    return np.exp(s * np.log(x) - beta * (1.0 / x))


@dataclass(frozen=True)
class _Axis:
    """Search range of one shape parameter, in ``u = log10(value)`` (``log``) or the value."""

    low: float
    high: float
    count: int  # points of the coarse grid
    log: bool = True


@dataclass(frozen=True, eq=False)
class _Family:
    name: str
    h: Callable[..., np.ndarray]
    axes: tuple[_Axis, ...]  # one or two shape parameters (theta)
    coarse: np.ndarray  # (G, k) the coarse grid, in u
    coarse_theta: tuple[np.ndarray, ...]  # its shape parameters, a (G, 1) column each
    low: np.ndarray  # (k,) bounds of u
    high: np.ndarray

    @property
    def n_params(self) -> int:
        return 2 + len(self.axes)

    def theta(self, u: Sequence[float]) -> list[float]:
        """Shape parameters at one point ``u``."""
        return [10.0**v if axis.log else v for v, axis in zip(u, self.axes, strict=True)]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _mesh(lines: Sequence[np.ndarray]) -> np.ndarray:
    """All combinations of the values of ``lines``, one per row."""
    mesh = np.meshgrid(*lines, indexing="ij")
    return _read_only(np.stack([m.ravel() for m in mesh], axis=1))


def _family(name: str, h: Callable[..., np.ndarray], *axes: _Axis) -> _Family:
    coarse = _mesh([np.linspace(axis.low, axis.high, axis.count) for axis in axes])
    theta = [10.0 ** coarse[:, [j]] if axis.log else coarse[:, [j]] for j, axis in enumerate(axes)]
    return _Family(
        name,
        h,
        axes,
        coarse,
        tuple(map(_read_only, theta)),
        _read_only(np.array([axis.low for axis in axes])),
        _read_only(np.array([axis.high for axis in axes])),
    )


_RATE = _Axis(-1.5, 3.5, 13)  # kappa: half of the rise is done at about x = 1/kappa
_SHAPE = _Axis(math.log10(0.2), math.log10(6.0), 9)  # delta, alpha: how sharp the rise is

_FAMILIES: tuple[_Family, ...] = (
    _family("pow3", _h_pow3, _Axis(math.log10(0.02), math.log10(6.0), 24)),
    _family("pow4", _h_pow4, _Axis(-1.0, 4.0, 13), _SHAPE),
    _family("ilog2", _h_ilog2, _Axis(-1.0, 6.0, 24)),
    _family("mmf", _h_mmf, _RATE, _SHAPE),
    _family("weibull", _h_weibull, _RATE, _SHAPE),
    _family("vapor_pressure", _h_vapor, _Axis(-4.0, math.log10(3.0), 13), _Axis(0, 3, 9, False)),
)


@dataclass(frozen=True)
class _Fit:
    family: _Family
    params: tuple[float, ...]  # (c, A, *theta)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        c, a, *theta = self.params
        return c + a * self.family.h(x, *theta)


# --- input checking ------------------------------------------------------------------------------


def _as_iteration(value: object, what: str) -> int:
    try:
        return operator.index(value)  # int, numpy integers
    except TypeError:
        pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(f"{what} must be an integer, got {value!r}")


def _check_history(history: Sequence[tuple[int, float]]) -> tuple[list[int], list[float]]:
    iterations: list[int] = []
    values: list[float] = []
    for i, point in enumerate(history):
        try:
            it, value = point
        except (TypeError, ValueError):
            raise ValueError(f"history[{i}] must be an (iteration, value) pair") from None
        it = _as_iteration(it, f"history[{i}] iteration")
        if it < 0:
            raise ValueError(f"history[{i}] iteration must be >= 0, got {it}")
        if iterations and it <= iterations[-1]:
            raise ValueError(
                f"history iterations must be strictly increasing: {iterations[-1]} then {it}"
            )
        try:
            values.append(float(value))
        except (TypeError, ValueError):
            raise ValueError(f"history[{i}] value must be a number, got {value!r}") from None
        iterations.append(it)
    return iterations, values


# --- fitting -------------------------------------------------------------------------------------


def _solve(
    h: np.ndarray, m: np.ndarray, z: np.ndarray, cap: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Least-squares ``(c, A)`` of ``z ~ c + A * h`` for each row of ``h``, and the SSEs.

    Row ``r`` of ``h`` holds a candidate's ``h`` at the points and, in its last column, at the
    end of the run (x = 1); it is fitted to the first ``m[r]`` points only. The bounds are
    ``A >= 0`` and that the curve stays below ``cap`` up to the end of the run: ``c <= cap``
    for the families with ``h <= 0``, ``c + A * h_end <= cap`` for vapor pressure. With
    ``e = max(h_end, 0)`` both read ``d <= cap`` for ``z ~ d + A * (h - e)``, ``d = c + A * e``:
    a convex problem whose optimum is the unconstrained one when feasible, else the better of
    the two edges (``A = 0`` or ``d = cap``). Rows with non-finite values get an infinite SSE.
    """
    n = z.size
    end = h[:, n]
    shift = np.maximum(end, 0.0)
    used = np.where(np.arange(n) < m[:, None], h[:, :n] - shift[:, None], 0.0)
    ones = np.ones(n)
    s_h, s_zh, s_hh = used @ ones, used @ z, (used * used) @ ones
    s_z, s_zz = np.cumsum(z)[m - 1], np.cumsum(z * z)[m - 1]
    finite = np.isfinite(s_hh) & np.isfinite(s_zh) & np.isfinite(end)
    if not finite.all():
        s_h, s_hh, s_zh = (np.where(finite, v, 0.0) for v in (s_h, s_hh, s_zh))
    # unconstrained
    var = s_hh - s_h * s_h / m
    cov = s_zh - s_h * s_z / m
    ok = var > 1e-12 * s_hh  # else h is flat: only the edges apply
    a = np.where(ok, cov / np.where(ok, var, 1.0), 0.0)
    d = (s_z - a * s_h) / m
    sse = s_zz - s_z * s_z / m - a * cov
    ok &= (a >= 0.0) & (d <= cap)
    if not ok.all():  # edges: A = 0 (flat at the mean, or at cap) or d = cap (A >= 0 fitted)
        d0 = np.minimum(s_z / m, cap)
        sse0 = s_zz - 2 * d0 * s_z + m * d0 * d0
        gain = np.maximum(s_zh - cap * s_h, 0.0)
        a1 = gain / np.where(s_hh > 0, s_hh, 1.0)
        sse1 = s_zz - 2 * cap * s_z + m * cap * cap - a1 * gain
        at_cap = sse1 < sse0
        d = np.where(ok, d, np.where(at_cap, cap, d0))
        a = np.where(ok, a, np.where(at_cap, a1, 0.0))
        sse = np.where(ok, sse, np.where(at_cap, sse1, sse0))
    admissible = finite & np.isfinite(sse)
    return d - a * shift, a, np.where(admissible, np.maximum(sse, 0.0), np.inf)


def _project(
    h: np.ndarray, z: np.ndarray, s_z: float, s_zz: float, cap: float
) -> tuple[float, float, np.ndarray] | None:
    """:func:`_solve` for a single candidate, in plain floats (it runs once per residual).

    ``h`` holds the candidate's ``h`` at the points of ``z`` and then at x = 1; ``s_z`` and
    ``s_zz`` are the sum and the sum of squares of ``z``. Returns ``(d, A, g)``, the fit being
    ``d + A * g`` with ``g = h[:-1] - e`` (so ``c = d - A * e``), or None if not finite.
    """
    m = z.size
    end = float(h[-1])
    shift = max(end, 0.0)
    g = h[:-1] - shift
    s_h, s_hh, s_zh = float(np.add.reduce(g)), float(g @ g), float(g @ z)
    if not math.isfinite(s_hh + s_zh + end):
        return None
    var = s_hh - s_h * s_h / m
    a = (s_zh - s_h * s_z / m) / var if var > 1e-12 * s_hh else 0.0
    d = (s_z - a * s_h) / m
    if not (a >= 0.0 and d <= cap):  # the better edge, as in _solve
        d0 = min(s_z / m, cap)
        gain = max(s_zh - cap * s_h, 0.0)
        a1 = gain / s_hh if s_hh > 0 else 0.0
        if m * cap * cap - 2 * cap * s_z - a1 * gain < m * d0 * d0 - 2 * d0 * s_z:
            d, a = cap, a1
        else:
            d, a = d0, 0.0
    return d, a, g


def _refine(
    family: _Family, start: np.ndarray, xs: np.ndarray, z: np.ndarray, cap: float
) -> _Fit | None:
    """Least-squares fit of ``family`` to ``z`` at ``xs[:-1]`` (``xs[-1]``: the end of the run).

    ``scipy.optimize.leastsq`` (MINPACK's Levenberg-Marquardt, finite-difference Jacobian)
    searches the shape parameters from ``start`` (in ``u``), the residuals being those of the
    best ``(c, A)`` for each shape (variable projection, :func:`_project`). MINPACK takes no
    bounds, so it searches ``p`` with ``u = low + (high - low) * (1 + sin p) / 2``, inside
    them whatever ``p`` (MINUIT's and lmfit's transform). Three details make that converge,
    also to an optimum on a bound (where ``du/dp = 0``): a start on a bound is moved in a
    little (``_EDGE``); ``diag = 1`` keeps MINPACK from scaling ``p`` by the Jacobian's
    columns, which are near 0 there; and ``p`` is taken around 2 pi rather than 0, because
    MINPACK's difference steps are a share of ``|p|``. LM only accepts steps that lower the
    SSE, and the start (the best of its grid) fits about as well as the flat line at the mean
    or better, an SSE below ``m`` as ``z`` lies in [0, 1]; ``_UNFIT`` residuals (an SSE of
    ``1e6 * m``) mark a candidate with non-finite values as worse than any it accepts.
    """
    s_z, s_zz = float(np.add.reduce(z)), float(z @ z)
    low, span = family.low.tolist(), (family.high - family.low).tolist()
    unfit = np.full(z.size, _UNFIT)

    def shape(p: list[float]) -> list[float]:
        return family.theta(
            [v + w * (1.0 + math.sin(q)) / 2 for q, v, w in zip(p, low, span, strict=True)]
        )

    def residuals(p: np.ndarray) -> np.ndarray:
        fit = _project(family.h(xs, *shape(p.tolist())), z, s_z, s_zz, cap)
        if fit is None:
            return unfit
        d, a, g = fit
        return d + a * g - z

    sine = 2 * (start - family.low) / (family.high - family.low) - 1
    p0 = np.arcsin(np.clip(sine, -_EDGE, _EDGE)) + 2 * math.pi
    from scipy.optimize import leastsq  # on first use: half a second off every process start

    p = leastsq(
        residuals,
        p0,
        full_output=True,  # else leastsq warns when it stops at maxfev
        ftol=_FTOL,
        xtol=_XTOL,
        maxfev=_MAX_NFEV,
        factor=_FACTOR,
        diag=np.ones(p0.size),
    )[0]
    theta = shape(p.tolist())
    h = family.h(xs, *theta)
    fit = _project(h, z, s_z, s_zz, cap)
    if fit is None:
        return None
    d, a, _ = fit
    return _Fit(family, (d - a * max(float(h[-1]), 0.0), a, *theta))


def _fit_families(
    x: np.ndarray, z: np.ndarray, cap: float, sizes: Sequence[int]
) -> list[dict[str, _Fit]]:
    """Least-squares fits of the families to the first ``m`` points, for each ``m`` in sizes.

    For each shape ``theta`` the best ``(c, A)`` is closed-form (:func:`_solve`), so only
    ``theta`` is searched: first on the family's coarse grid over its whole bounded range
    (every family and size in one matrix), then by :func:`_refine` from the grid's best point.
    A family with more parameters than points, or with no admissible fit on the grid, is left
    out.
    """
    xs = np.append(x, 1.0)  # the last column is the end of the run
    tasks = [(f, k) for k, m in enumerate(sizes) for f in _FAMILIES if f.n_params <= m]
    grid = {f.name: f.h(xs[None, :], *f.coarse_theta) for f, _ in tasks}  # shared by sizes
    counts = [f.coarse.shape[0] for f, _ in tasks]
    rows = np.repeat([sizes[k] for _, k in tasks], counts)
    _, _, sse = _solve(np.concatenate([grid[f.name] for f, _ in tasks]), rows, z, cap)
    results: list[dict[str, _Fit]] = [{} for _ in sizes]
    for (family, k), block in zip(tasks, np.split(sse, np.cumsum(counts)[:-1]), strict=True):
        i = int(np.argmin(block))
        if math.isfinite(block[i]):
            m = sizes[k]
            fit = _refine(family, family.coarse[i], np.append(x[:m], 1.0), z[:m], cap)
            if fit is not None:
                results[k][family.name] = fit
    return results


def _rmse(fit: _Fit, x: np.ndarray, z: np.ndarray) -> float:
    residual = z - fit(x)
    return math.sqrt(float(np.dot(residual, residual)) / z.size)


def _ensemble(x: np.ndarray, z: np.ndarray, cap: float) -> list[tuple[_Fit, float]]:
    """The fitted families with their weights, the inverse square of the extrapolation error."""
    n = x.size
    held = n // 3 if n >= _HOLDOUT_MIN_POINTS else 0
    if held:
        full, trained = _fit_families(x, z, cap, (n, n - held))
    else:
        (full,) = _fit_families(x, z, cap, (n,))
    members: list[tuple[_Fit, float]] = []
    for name, fit in full.items():
        if held:
            if name not in trained:
                continue
            err = _rmse(trained[name], x[-held:], z[-held:])
        else:
            err = _rmse(fit, x, z)
        if math.isfinite(err) and math.isfinite(float(fit(np.array([1.0]))[0])):
            members.append((fit, 1.0 / max(err, _ERR_FLOOR) ** 2))
    return members


# --- prediction ----------------------------------------------------------------------------------


def _first_crossing(
    members: list[tuple[_Fit, float]], after: int, max_iterations: int, z_target: float
) -> int | None:
    """First iteration in ``(after, max_iterations]`` where the ensemble mean reaches the target."""
    total = sum(w for _, w in members)

    def mean(iterations: np.ndarray) -> np.ndarray:
        x = iterations / max_iterations
        return sum(w * fit(x) for fit, w in members) / total

    lo, hi = after, max_iterations
    if mean(np.array([hi]))[0] < z_target:
        return None
    while True:  # the answer lies in (lo, hi] and the mean at hi reaches the target
        width = hi - lo
        if width <= _SEARCH_GRID:
            candidates = np.arange(lo + 1, hi + 1)
        else:
            candidates = np.unique(np.linspace(lo, hi, _SEARCH_GRID + 1).round().astype(np.int64))
            candidates = candidates[candidates > lo]
        hit = int(np.argmax(mean(candidates) >= z_target))
        if width <= _SEARCH_GRID:
            return int(candidates[hit])
        lo, hi = (int(candidates[hit - 1]) if hit else lo), int(candidates[hit])


def predict_target_iteration(
    history: Sequence[tuple[int, float]],
    target: float,
    goal: MetricGoal,
    max_iterations: int,
) -> CurvePrediction:
    """Predict the first iteration at which the metric reaches ``target``.

    ``history`` holds ``(iteration, metric value)`` pairs with strictly increasing iterations;
    non-finite values are skipped. The first observed point that meets the target gives the
    answer directly. Otherwise an ensemble of learning-curve families (Domhan et al. 2015) is
    fitted and extrapolated up to ``max_iterations``; ``reached`` is False when it does not get
    there, or when there is too little to fit (fewer than 3 usable points: the fallback,
    ``models == ()``). Raises ValueError on invalid arguments, never for a bad fit.
    """
    if not isinstance(goal, MetricGoal):
        raise ValueError(f"goal must be a MetricGoal, got {goal!r}")
    max_iterations = _as_iteration(max_iterations, "max_iterations")
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be >= 1, got {max_iterations}")
    try:
        target = float(target)
    except (TypeError, ValueError):
        raise ValueError(f"target must be a number, got {target!r}") from None
    if not math.isfinite(target):
        raise ValueError(f"target must be finite, got {target}")
    iterations, values = _check_history(history)

    maximize = goal is MetricGoal.MAXIMIZE
    for it, value in zip(iterations, values, strict=True):
        if math.isfinite(value) and (value >= target if maximize else value <= target):
            if it > max_iterations:
                break  # reached, but only after max_iterations
            return CurvePrediction(it, True, ())
    fallback = CurvePrediction(max_iterations, False, ())

    points = [
        (it, v) for it, v in zip(iterations, values, strict=True) if it >= 1 and math.isfinite(v)
    ]
    if len(points) < _MIN_POINTS or iterations[-1] >= max_iterations:
        return fallback
    if len(points) > _MAX_FIT_POINTS:
        keep = np.unique(np.linspace(0, len(points) - 1, _MAX_FIT_POINTS).round().astype(int))
        points = [points[i] for i in keep]
    its = np.array([p[0] for p in points], dtype=float)
    ys = np.array([p[1] for p in points], dtype=float)

    low, high = float(ys.min()), float(ys.max())
    span = high - low
    if span <= 1e-12 * max(1.0, abs(high)):
        return fallback  # a flat history: nothing to extrapolate
    if maximize:
        z = (ys - low) / span
        z_target = (target - low) / span
        cap = (1.0 - low) / span if low >= 0.0 and high <= 1.0 else 1.0 + _GENERIC_GAIN
    else:
        z = (high - ys) / span
        z_target = (high - target) / span
        cap = high / span if low >= 0.0 else 1.0 + _GENERIC_GAIN
    x = its / max_iterations  # all < 1: the run ends at x = 1

    with np.errstate(all="ignore"):  # overflow in a far-off grid point is expected
        members = _ensemble(x, z, cap)
        if not members:
            return fallback
        crossing = _first_crossing(members, iterations[-1], max_iterations, z_target)
    names = tuple(fit.family.name for fit, _ in members)
    if crossing is None:
        return CurvePrediction(max_iterations, False, names)
    return CurvePrediction(crossing, True, names)
