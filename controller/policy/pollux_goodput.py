"""Pollux's goodput model (Qiao et al., OSDI 2021, §3): statistical efficiency times
throughput, the throughput model fitted to a job's measured step times, and the batch that
maximises goodput on a given allocation.

- EFFICIENCY_t(M) = (phi_t + M0) / (phi_t + M) (§3.1): ``phi`` the gradient noise scale,
  ``M0`` the job's initial batch, ``M`` the total batch.
- T_iter = (T_grad^gamma + T_sync^gamma)^(1/gamma) (§3.2), T_grad(m) = a_grad + b_grad m,
  T_sync = 0 on one GPU, a_local + b_local (K - 2) on one node, a_node + b_node (K - 2) over
  several; THROUGHPUT = M / T_iter.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GAMMA_MAX = 10.0  # §3.2: gamma in [1, 10] (1: no overlap of compute and sync)
GRID = 48  # batches tried per allocation by the bounded search (geometric grid)


@dataclass(frozen=True)
class Point:
    """One measured configuration: GPUs ``k``, spread over several nodes or not, per-GPU
    batch ``m`` and the measured step time ``t`` (seconds)."""

    k: int
    multi: bool
    m: float
    t: float


@dataclass(frozen=True)
class Params:
    """The seven parameters of the throughput model (§3.2)."""

    a_grad: float
    b_grad: float
    a_local: float = 0.0
    b_local: float = 0.0
    a_node: float = 0.0
    b_node: float = 0.0
    gamma: float = 1.0

    def step_time(self, k: np.ndarray, multi: np.ndarray, m: np.ndarray) -> np.ndarray:
        """T_iter for arrays of GPU counts, multi-node flags and per-GPU batches."""
        k = np.asarray(k, dtype=float)
        grad = self.a_grad + self.b_grad * np.asarray(m, dtype=float)
        extra = np.maximum(k - 2.0, 0.0)
        sync = np.where(
            np.asarray(multi, dtype=bool),
            self.a_node + self.b_node * extra,
            self.a_local + self.b_local * extra,
        )
        sync = np.where(k <= 1.0, 0.0, sync)
        g = self.gamma
        return (np.maximum(grad, 0.0) ** g + np.maximum(sync, 0.0) ** g) ** (1.0 / g)


def efficiency(batch: np.ndarray | float, initial: float, noise: float) -> np.ndarray:
    """EFFICIENCY(M) = (phi + M0) / (phi + M) (§3.1); 1 where ``noise`` is infinite."""
    batch = np.asarray(batch, dtype=float)
    if math.isinf(noise):
        return np.ones_like(batch)
    return (noise + initial) / (noise + batch)


_NAMES = ("a_grad", "b_grad", "a_local", "b_local", "a_node", "b_node", "gamma")


def prior(points: Sequence[Point]) -> Params:
    """The starting point before (or without) a fit (§4.1, prior-driven exploration): step
    time proportional to the per-GPU batch through the mean measured per-sample time, and
    perfect scaling (no sync time); one unit per sample when nothing was measured."""
    per_sample = [p.t / p.m for p in points if p.m > 0 and p.t > 0]
    return Params(0.0, float(np.mean(per_sample)) if per_sample else 1.0)


def fit(points: Sequence[Point]) -> Params:
    """Least squares (bounded, relative residuals) over the parameters the points can
    inform: compute always; local sync once a single-node multi-GPU point exists, node sync
    once a multi-node point exists (else it equals local sync, else zero: perfect scaling,
    §4.1); gamma once there are four or more points (else 1)."""
    base = prior(points)
    if len(points) < 2:
        return base
    local = any(p.k > 1 and not p.multi for p in points)
    node = any(p.multi for p in points)
    free = ["a_grad", "b_grad"]
    if local:
        free += ["a_local", "b_local"]
    if node:
        free += ["a_node", "b_node"]
    if len(points) >= 4 and (local or node):
        free.append("gamma")
    k = np.array([p.k for p in points], dtype=float)
    multi = np.array([p.multi for p in points])
    m = np.array([p.m for p in points], dtype=float)
    t = np.array([p.t for p in points], dtype=float)
    start = {n: getattr(base, n) for n in _NAMES}
    start["a_grad"] = 0.5 * float(np.min(t))
    start["b_grad"] = 0.5 * base.b_grad
    start["gamma"] = 1.5 if "gamma" in free else 1.0

    def build(x: np.ndarray) -> Params:
        values = dict(start)
        values.update(zip(free, (float(v) for v in x), strict=True))
        if not node:
            values["a_node"], values["b_node"] = values["a_local"], values["b_local"]
        return Params(**values)

    def residual(x: np.ndarray) -> np.ndarray:
        return (build(x).step_time(k, multi, m) - t) / t

    lower = [1.0 if n == "gamma" else 0.0 for n in free]
    upper = [GAMMA_MAX if n == "gamma" else np.inf for n in free]
    x0 = np.clip([start[n] for n in free], np.add(lower, 1e-9), np.subtract(upper, 1e-9))
    from scipy.optimize import least_squares  # on first use (process start)

    result = least_squares(residual, x0, bounds=(lower, upper), method="trf")
    return build(result.x)


@dataclass(frozen=True)
class Limits:
    """A job's batch bounds: the total batch in [``low``, ``high``] (at least one sample per
    GPU), ``initial`` = M0 and ``noise`` = phi."""

    low: int
    high: int
    initial: int
    noise: float


def best_batch(params: Params, k: int, multi: bool, limits: Limits) -> tuple[int, float]:
    """(M, goodput): the total batch within the limits maximising
    goodput = M / T_iter(k, M / k) x EFFICIENCY(M) (§3.3), by a geometric grid of ``GRID``
    batches over the bounds; (0, 0) on no GPUs."""
    table = goodput_table(params, np.array([k]), np.array([multi]), limits)
    return int(table[1][0]), float(table[0][0])


def goodput_table(
    params: Params, k: np.ndarray, multi: np.ndarray, limits: Limits
) -> tuple[np.ndarray, np.ndarray]:
    """Best goodput and its batch for each (k, multi) pair (vectorised :func:`best_batch`)."""
    k = np.asarray(k, dtype=float)
    low = np.maximum(float(limits.low), k)
    high = np.maximum(float(limits.high), low)
    steps = np.linspace(0.0, 1.0, GRID)
    grid = np.rint(np.exp(np.log(low)[:, None] * (1 - steps) + np.log(high)[:, None] * steps))
    t = params.step_time(k[:, None], np.asarray(multi)[:, None], grid / np.maximum(k, 1)[:, None])
    good = grid / np.maximum(t, 1e-12) * efficiency(grid, limits.initial, limits.noise)
    good = np.where(k[:, None] >= 1, good, 0.0)
    best = np.argmax(good, axis=1)
    rows = np.arange(len(k))
    return good[rows, best], np.where(k >= 1, grid[rows, best], 0.0)
