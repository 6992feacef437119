"""Interference between jobs on one server (issue 10, item 6): opt-in (``--interference``).

A job's time per iteration grows with the load *other* jobs put on its server, per resource
type ``r`` by ``slowdown_r(u) = 1 + a_r u^b_r`` with ``u`` the others' load as a share of the
server (clipped to [0, 1]); the types multiply. A synchronous job runs at the pace of its
slowest server, so its speed is divided by the largest product over its servers (and, as
before, by any overload above 1: ``engine._slowdown``).

The curves were fitted to measurements of a training job beside CPU, memory-bandwidth and
network hogs (``benchmarks/calibrate_interference.py``; the points and the fit are in
``interference.json`` beside this module and in ``docs/mlfs.md``). A resource type without a
curve there (``gpu``: no GPU was available to measure shared-GPU load) does not slow jobs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from simulator.types import RESOURCES

DEFAULT_PATH = Path(__file__).with_name("interference.json")


class InterferenceError(ValueError):
    """An interference file that is missing, unreadable or holds bad parameters."""


@dataclass(frozen=True)
class Curve:
    """``slowdown(u) = 1 + a u^b`` for ``u`` in [0, 1]."""

    a: float
    b: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.a) and self.a >= 0.0):
            raise InterferenceError(f"curve parameter a must be finite and >= 0, got {self.a}")
        if not (math.isfinite(self.b) and self.b > 0.0):
            raise InterferenceError(f"curve parameter b must be finite and > 0, got {self.b}")

    def slowdown(self, u: float) -> float:
        u = min(1.0, max(0.0, u)) if u == u else 0.0
        return 1.0 + self.a * u**self.b


@dataclass(frozen=True)
class Interference:
    """A curve per resource type (``simulator.types.RESOURCES`` names); others: none."""

    curves: Mapping[str, Curve]

    def __post_init__(self) -> None:
        unknown = sorted(set(self.curves) - set(RESOURCES))
        if unknown:
            raise InterferenceError(f"unknown resource types {unknown}; known: {RESOURCES}")
        object.__setattr__(self, "curves", MappingProxyType(dict(self.curves)))
        self._by_index: tuple[Curve | None, ...]
        object.__setattr__(self, "_by_index", tuple(self.curves.get(r) for r in RESOURCES))

    def slowdown(self, others: Sequence[float]) -> float:
        """The time multiplier for the others' load ``others`` (one share per ``RESOURCES``)."""
        product = 1.0
        for curve, u in zip(self._by_index, others, strict=True):
            if curve is not None:
                product *= curve.slowdown(u)
        return product


def load_interference(path: str | Path | None = None) -> Interference:
    """The curves stored at ``path`` (default: the fitted ``interference.json``): a JSON
    object whose ``fits`` maps resource types to ``{"a": .., "b": ..}``."""
    path = Path(DEFAULT_PATH if path is None else path)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise InterferenceError(f"cannot read interference file {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InterferenceError(f"{path} is not JSON: {exc}") from None
    fits = doc.get("fits") if isinstance(doc, dict) else None
    if not isinstance(fits, dict):
        raise InterferenceError(f"{path}: no 'fits' object")
    curves: dict[str, Curve] = {}
    for resource, params in fits.items():
        if params is None:
            continue  # not measured
        try:
            curves[resource] = Curve(float(params["a"]), float(params["b"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InterferenceError(f"{path}: bad curve for {resource!r}: {exc}") from None
    return Interference(curves)
