"""Learning curves of simulated jobs: validation accuracy against training progress.

The family is the saturating exponential

    acc(x) = a - b * exp(-c * x),      x in [0, 1] the fraction of the job's full training

with ``a`` the asymptote, ``a - b`` the accuracy before training and ``c`` how fast it
converges. UniSched (§III-B2) predicts iterations to a target with an ensemble of learning-curve
models (Weibull, log-power, ...); for *simulating* curves a single monotone family is enough,
and it has a closed-form inverse (:meth:`CurveParams.fraction_reaching`).

:func:`fit_curve_shapes` fits the family once, offline, to the per-epoch accuracy histories of
the ONES trace (``ones/job_history.csv``: ``id,epoch,...,acc,...``) with
``scipy.optimize.curve_fit``. :data:`DEFAULT_CURVES` holds the result of that fit on the
shared file (kurisusnowdeng/ones_sc21 @ 85353588, rounded to 4 digits); the simulator uses them
when no history file is given. Reproduce with ``fit_curve_shapes(<data>/ones/job_history.csv)``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.trace import TraceError


@dataclass(frozen=True)
class CurveParams:
    """One curve ``acc(x) = a - b * exp(-c * x)``; ``b >= 0`` and ``c > 0`` make it rising."""

    a: float
    b: float
    c: float

    def __call__(self, x: float) -> float:
        return self.a - self.b * math.exp(-self.c * x)

    def fraction_reaching(self, target: float) -> float | None:
        """Smallest ``x >= 0`` with ``acc(x) >= target``; None if the asymptote is not above it."""
        if self(0.0) >= target:
            return 0.0
        if self.b <= 0 or target >= self.a:
            return None
        return -math.log((self.a - target) / self.b) / self.c


def exp_curve(x, a, b, c):
    """The family, vectorised for ``curve_fit`` (x may be a numpy array)."""
    import numpy as np

    return a - b * np.exp(-c * x)


def fit_curve(xs: Sequence[float], ys: Sequence[float], *, max_rate: float = 50.0) -> CurveParams:
    """Least-squares fit of the family to points ``(x, acc)`` (``scipy.optimize.curve_fit``).

    Fitted as ``a - a*r*exp(-c*x)`` (``b = a*r``) with ``0 <= a <= 1``, ``0 <= r <= 1`` and
    ``0.01 <= c <= max_rate``, so accuracies stay within [0, 1] from ``x = 0`` on.
    """
    import numpy as np
    from scipy.optimize import curve_fit

    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 3:
        raise ValueError("need at least 3 (x, y) points of equal count to fit a curve")

    def scaled(x, a, r, c):
        return exp_curve(x, a, a * r, c)

    top = float(np.clip(y.max(), 0.01, 1.0))
    p0 = (top, float(np.clip((top - y.min()) / top, 0.0, 1.0)), 3.0)
    (a, r, c), _ = curve_fit(
        scaled, x, y, p0=p0, bounds=([0.0, 0.0, 0.01], [1.0, 1.0, max_rate]), maxfev=20000
    )
    return CurveParams(float(a), float(a * r), float(c))


def fit_curve_shapes(
    path: str | Path, *, min_points: int = 5, min_gain: float = 0.05
) -> list[CurveParams]:
    """Fit one curve per job of a per-epoch accuracy history (the ONES ``job_history.csv``).

    Reads the columns ``id``, ``epoch`` and ``acc`` (others are ignored). Each job's progress is
    ``x = epoch / last epoch`` of that job, so a curve spans the job's whole run. Jobs with
    fewer than ``min_points`` epochs, or whose fitted curve gains less than ``min_gain``
    accuracy over the run (diverged runs stuck at chance level, fine-tuning runs that start at
    their plateau), are left out: they carry no usable shape. Returned in order of job id.
    """
    path = Path(path)
    histories: dict[str, list[tuple[float, float]]] = {}
    with path.open(newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise TraceError(path, 1, None, "empty file, expected a header")
        header = [h.strip() for h in header]
        missing = [c for c in ("id", "epoch", "acc") if c not in header]
        if missing:
            raise TraceError(path, 1, None, f"missing column(s) {', '.join(map(repr, missing))}")
        i_id, i_ep, i_acc = header.index("id"), header.index("epoch"), header.index("acc")
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise TraceError(
                    path, reader.line_num, None, f"{len(row)} fields, header has {len(header)}"
                )
            values = []
            for col, i in (("epoch", i_ep), ("acc", i_acc)):
                try:
                    values.append(float(row[i]))
                except ValueError:
                    raise TraceError(
                        path, reader.line_num, col, f"expected a number, got {row[i]!r}"
                    ) from None
            histories.setdefault(row[i_id].strip(), []).append((values[0], values[1]))

    def order(key: str) -> tuple[int, int | str]:
        return (0, int(key)) if key.isdigit() else (1, key)

    curves = []
    for job_id in sorted(histories, key=order):
        points = sorted(histories[job_id])
        if len(points) < min_points:
            continue
        last = points[-1][0]
        params = fit_curve([e / last for e, _ in points], [acc for _, acc in points])
        if params(1.0) - params(0.0) < min_gain:
            continue
        curves.append(params)
    return curves


# fit_curve_shapes(<data>/ones/job_history.csv) with the defaults (14 of its 20 jobs kept),
# rounded to 4 digits; see the module docstring. The comment gives acc(0) -> acc(1).
DEFAULT_CURVES: tuple[CurveParams, ...] = (
    CurveParams(1.0000, 0.4166, 0.5353),  # 0.58 -> 0.76
    CurveParams(0.8521, 0.8521, 11.9356),  # 0.00 -> 0.85
    CurveParams(0.7026, 0.3822, 4.7748),  # 0.32 -> 0.70
    CurveParams(1.0000, 1.0000, 1.4215),  # 0.00 -> 0.76
    CurveParams(0.7702, 0.5950, 3.4675),  # 0.18 -> 0.75
    CurveParams(1.0000, 0.9969, 0.3412),  # 0.00 -> 0.29
    CurveParams(0.6853, 0.6799, 1.4581),  # 0.01 -> 0.53
    CurveParams(0.4793, 0.4368, 2.9183),  # 0.04 -> 0.46
    CurveParams(0.4429, 0.3285, 2.6721),  # 0.11 -> 0.42
    CurveParams(0.6401, 0.3334, 5.7632),  # 0.31 -> 0.64
    CurveParams(1.0000, 1.0000, 1.2239),  # 0.00 -> 0.71
    CurveParams(0.6876, 0.5847, 5.4757),  # 0.10 -> 0.69
    CurveParams(0.5696, 0.4340, 2.4242),  # 0.14 -> 0.53
    CurveParams(0.5813, 0.4223, 2.7085),  # 0.16 -> 0.55
)
