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
  ``(c, A)``, solved in closed form under the bounds for every candidate ``theta``; ``theta``
  (one or two shape parameters) is searched on a coarse grid over its whole bounded range,
  refined twice around the best point and polished by Newton steps, all families in one numpy
  matrix per round. A fit cannot diverge and rarely ends in a poor local optimum, and no scipy
  is needed: ``scipy.optimize.curve_fit`` (trust-region, bounded) took 8-10 ms per family fit
  here, about 100 ms per prediction with the held-out fits, and scipy is only in the ``[sim]``
  extra, not in the controller's install.
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
_ZOOMS = 2  # times a family's shape grid is refined around its best point
_ZOOM_POINTS = 7  # values per shape parameter in a refined grid, over +-1 previous spacing
_NEWTONS = 3  # Newton steps on the shape parameters after the grids
_NEWTON_H = 1e-4  # finite-difference spacing for those steps, in u (see _Axis)
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
    low: np.ndarray  # (k,) bounds of u
    high: np.ndarray
    step: np.ndarray  # (k,) spacing of the coarse grid

    @property
    def n_params(self) -> int:
        return 2 + len(self.axes)

    def values(self, u: Sequence[float]) -> list[float]:
        """Shape parameters at one point ``u``."""
        return [10.0**v if axis.log else v for v, axis in zip(u, self.axes, strict=True)]

    def thetas(self, u: np.ndarray) -> list[np.ndarray]:
        """Shape parameters at grid points ``u`` (``(G, k)``): one ``(G, 1)`` column each."""
        return [
            10.0 ** u[:, j : j + 1] if axis.log else u[:, j : j + 1]
            for j, axis in enumerate(self.axes)
        ]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _mesh(lines: Sequence[np.ndarray]) -> np.ndarray:
    """All combinations of the values of ``lines``, one per row."""
    mesh = np.meshgrid(*lines, indexing="ij")
    return _read_only(np.stack([m.ravel() for m in mesh], axis=1))


def _family(name: str, h: Callable[..., np.ndarray], *axes: _Axis) -> _Family:
    return _Family(
        name,
        h,
        axes,
        _mesh([np.linspace(axis.low, axis.high, axis.count) for axis in axes]),
        _read_only(np.array([axis.low for axis in axes])),
        _read_only(np.array([axis.high for axis in axes])),
        _read_only(np.array([(axis.high - axis.low) / (axis.count - 1) for axis in axes])),
    )


_OFFSETS = tuple(_mesh([np.linspace(-1.0, 1.0, _ZOOM_POINTS)] * k) for k in (1, 2))
_STENCILS = tuple(_mesh([np.array([-_NEWTON_H, 0.0, _NEWTON_H])] * k) for k in (1, 2))
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
    end of the run (x = 1); it is fitted to the first ``m[r]`` points only. Under ``A >= 0``
    and ``c <= cap`` the optimum of this convex problem is the unconstrained one when feasible,
    else the better of the two edges (``A = 0`` or ``c = cap``). The curve must not pass
    ``cap`` at the end of the run either (binding for vapor pressure only: the other families'
    ``h <= 0`` keeps them below ``c``). Rows breaking that, or with non-finite values, get an
    infinite SSE.
    """
    n = z.size
    used = np.where(np.arange(n) < m[:, None], h[:, :n], 0.0)
    ones = np.ones(n)
    s_h, s_zh, s_hh = used @ ones, used @ z, (used * used) @ ones
    s_z, s_zz = np.cumsum(z)[m - 1], np.cumsum(z * z)[m - 1]
    finite = np.isfinite(s_hh) & np.isfinite(s_zh)
    if not finite.all():
        s_h, s_hh, s_zh = (np.where(finite, v, 0.0) for v in (s_h, s_hh, s_zh))
    # unconstrained
    var = s_hh - s_h * s_h / m
    cov = s_zh - s_h * s_z / m
    ok = var > 1e-12 * s_hh  # else h is flat: only the edges apply
    a = np.where(ok, cov / np.where(ok, var, 1.0), 0.0)
    c = (s_z - a * s_h) / m
    sse = s_zz - s_z * s_z / m - a * cov
    ok &= (a >= 0.0) & (c <= cap)
    if not ok.all():  # edges: A = 0 (flat at the mean, or at cap) or c = cap (A >= 0 fitted)
        c0 = np.minimum(s_z / m, cap)
        sse0 = s_zz - 2 * c0 * s_z + m * c0 * c0
        gain = np.maximum(s_zh - cap * s_h, 0.0)
        a1 = gain / np.where(s_hh > 0, s_hh, 1.0)
        sse1 = s_zz - 2 * cap * s_z + m * cap * cap - a1 * gain
        at_cap = sse1 < sse0
        c = np.where(ok, c, np.where(at_cap, cap, c0))
        a = np.where(ok, a, np.where(at_cap, a1, 0.0))
        sse = np.where(ok, sse, np.where(at_cap, sse1, sse0))
    admissible = finite & (c + a * h[:, n] <= cap) & np.isfinite(sse)
    return c, a, np.where(admissible, np.maximum(sse, 0.0), np.inf)


def _newton_step(family: _Family, center: np.ndarray, sse: list[float]) -> np.ndarray | None:
    """Newton step on the SSE from its values on the stencil around ``center``, or None.

    The derivatives are central differences (``_NEWTON_H`` apart in ``u``); None where the
    SSE is not finite or not locally convex there. The step is at most one coarse spacing.
    """
    e, s = _NEWTON_H, sse
    if not all(map(math.isfinite, s)):
        return None
    if len(s) == 3:  # one shape parameter; stencil -1, 0, +1
        g, h = (s[2] - s[0]) / (2 * e), (s[2] - 2 * s[1] + s[0]) / (e * e)
        if not h > 0:
            return None
        step = [-g / h]
    else:  # two: a 3 x 3 stencil, the second axis fastest (index 3 * i + j)
        g0, g1 = (s[7] - s[1]) / (2 * e), (s[5] - s[3]) / (2 * e)
        h00 = (s[7] - 2 * s[4] + s[1]) / (e * e)
        h11 = (s[5] - 2 * s[4] + s[3]) / (e * e)
        h01 = (s[8] - s[6] - s[2] + s[0]) / (4 * e * e)
        det = h00 * h11 - h01 * h01
        if not (h00 > 0 and det > 0):
            return None
        step = [(h01 * g1 - h11 * g0) / det, (h01 * g0 - h00 * g1) / det]
    moved = [
        min(max(u + min(max(d, -w), w), low), high)
        for u, d, w, low, high in zip(
            center.tolist(), step, family.step, family.low, family.high, strict=True
        )
    ]
    return np.array(moved)


def _fit_families(
    x: np.ndarray, z: np.ndarray, cap: float, sizes: Sequence[int]
) -> list[dict[str, _Fit]]:
    """Least-squares fits of the families to the first ``m`` points, for each ``m`` in sizes.

    For each shape ``theta`` the best ``(c, A)`` is closed-form (:func:`_solve`), so only
    ``theta`` is searched: on the coarse grid, then ``_ZOOMS`` times on a finer grid spanning
    one previous spacing either side of the best point so far, then by up to ``_NEWTONS``
    Newton steps (derivatives from a 3-point-per-axis stencil) while they improve the fit.
    Every family and size is solved in one matrix per round. A family with more parameters
    than points, or with no admissible fit, is left out.
    """
    xs = np.append(x, 1.0)[None, :]  # the last column is the end of the run
    tasks = [(f, k) for k, m in enumerate(sizes) for f in _FAMILIES if f.n_params <= m]
    coarse = {f.name: f.h(xs, *f.thetas(f.coarse)) for f, _ in tasks}  # shared by the sizes
    grids = {(f.name, k): f.coarse for f, k in tasks}
    best: dict[tuple[str, int], tuple[float, _Fit]] = {}
    last = _ZOOMS + 1 + _NEWTONS  # rounds: coarse, zooms, the stencil at the best, the steps
    for round_ in range(last + 1):
        if not tasks:
            break
        hs = [
            coarse[f.name] if round_ == 0 else f.h(xs, *f.thetas(grids[f.name, k]))
            for f, k in tasks
        ]
        counts = [h.shape[0] for h in hs]
        rows = np.repeat([sizes[k] for _, k in tasks], counts)
        c, a, sse = _solve(np.concatenate(hs), rows, z, cap)
        start, following = 0, []
        for (family, k), h in zip(tasks, hs, strict=True):
            key, grid = (family.name, k), grids[family.name, k]
            stop = start + h.shape[0]
            block = sse[start:stop]
            i = int(np.argmin(block)) if round_ <= _ZOOMS else h.shape[0] // 2  # the centre
            at, start = start + i, stop
            value = float(sse[at])
            if not math.isfinite(value):
                continue  # nothing admissible (the family is left out), or Newton failed
            improved = key not in best or value <= best[key][0]
            if improved:
                theta = family.values(grid[i].tolist())
                best[key] = (value, _Fit(family, (float(c[at]), float(a[at]), *theta)))
            if round_ < _ZOOMS:  # a finer grid around the best point
                spread = family.step * (2 / (_ZOOM_POINTS - 1)) ** round_
                zoomed = grid[i] + _OFFSETS[len(family.axes) - 1] * spread
                grids[key] = np.clip(zoomed, family.low, family.high)
            elif round_ == last or not improved:
                continue
            else:  # the stencil around the best point, or a Newton step from it
                centre = (
                    grid[i] if round_ == _ZOOMS else _newton_step(family, grid[i], block.tolist())
                )
                if centre is None:
                    continue
                stencil = _STENCILS[len(family.axes) - 1] if round_ + 1 < last else 0.0
                grids[key] = np.atleast_2d(centre + stencil)
            following.append((family, k))
        tasks = following
    results: list[dict[str, _Fit]] = [{} for _ in sizes]
    for (name, k), (_, fit) in best.items():
        results[k][name] = fit
    return [{f.name: r[f.name] for f in _FAMILIES if f.name in r} for r in results]


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
