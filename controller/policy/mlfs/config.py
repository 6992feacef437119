"""MLFS parameters with the paper's defaults (§4.1) and their validation."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class MlfsConfig:
    """Tunable parameters of MLF-H and MLF-C; :class:`ValueError` on out-of-range values.

    Times in the features are seconds; Eq. 4 reads them in ``time_unit_s`` (see
    ``docs/mlfs.md``: the paper gives no unit, so hours keep its three terms comparable).
    """

    alpha: float = 0.3  # Eq. 6 weight of P^ML against P^C; §4.1
    gamma: float = 0.8  # Eqs. 3 and 5 discount of a child's priority; §4.1
    gamma_d: float = 0.3  # Eq. 4 weight of the deadline term; §4.1
    gamma_r: float = 0.3  # Eq. 4 weight of the remaining-time term; §4.1
    gamma_w: float = 0.35  # Eq. 4 weight of the waiting-time term; §4.1
    h_r: float = 0.9  # per-resource (and per-GPU) overload threshold; §3.3.2 "e.g. 90%", §4.1
    h_s: float = 0.9  # cluster overload threshold on O_c (§3.5) for MLF-C; §4.1 "h_r = h_s = 90%"
    p_s: float = 0.1  # lowest-priority share eligible for migration off hot GPUs; §3.3.3, §4.1
    # Our choices (the paper leaves them open; docs/mlfs.md):
    time_unit_s: float = 3600.0  # Eq. 4 time unit: hours, as the deadlines of §4.1
    min_horizon_s: float = 60.0  # floor of d - t and r in Eq. 4: one scheduling period (§4.1)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"MlfsConfig.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"MlfsConfig.{f.name} must be finite, got {value!r}")
        _check(0.0 <= self.alpha <= 1.0, "alpha", self.alpha, "in [0, 1] (Eq. 6)")
        _check(0.0 < self.gamma < 1.0, "gamma", self.gamma, "in (0, 1) (Eq. 3)")
        for name in ("gamma_d", "gamma_r", "gamma_w"):
            _check(getattr(self, name) >= 0.0, name, getattr(self, name), ">= 0 (Eq. 4)")
        _check(0.0 < self.h_r <= 1.0, "h_r", self.h_r, "in (0, 1] (a utilisation)")
        _check(self.h_s > 0.0, "h_s", self.h_s, "> 0 (a threshold on a mean norm, §3.5)")
        _check(0.0 < self.p_s <= 1.0, "p_s", self.p_s, "in (0, 1] (a share of tasks)")
        _check(self.time_unit_s > 0.0, "time_unit_s", self.time_unit_s, "> 0")
        _check(self.min_horizon_s > 0.0, "min_horizon_s", self.min_horizon_s, "> 0")


def add_mlfs_param_option(parser: argparse.ArgumentParser) -> None:
    """``--mlfs-param NAME=VALUE`` (repeatable; :func:`parse_mlfs_params` reads the list), as
    ``mlsched controller`` and ``mlsched simulate`` take it."""
    parser.add_argument(
        "--mlfs-param",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an MLFS parameter for mlf-h, mlf-rl and mlfs instead of the paper's default "
        "(MlfsConfig, e.g. gamma_w=0; repeatable; docs/mlfs.md)",
    )


def parse_mlfs_params(pairs: Iterable[str]) -> MlfsConfig:
    """An :class:`MlfsConfig` from ``NAME=VALUE`` pairs over the paper's defaults. §4.1: the
    parameters are "determined by the administrator of the cluster according to the goals they
    concern and the particular cluster environment"; ValueError on an unknown name, a value
    that is not a number or one out of range."""
    names = [f.name for f in fields(MlfsConfig)]
    values: dict[str, float] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in names:
            raise ValueError(
                f"MLFS parameter {pair!r}: expected NAME=VALUE, NAME one of {', '.join(names)}"
            )
        try:
            values[name] = float(text)
        except ValueError:
            raise ValueError(f"MLFS parameter {pair!r}: {text!r} is not a number") from None
    return MlfsConfig(**values)


def changed_params(config: MlfsConfig) -> dict[str, float]:
    """The parameters of ``config`` that differ from the paper's defaults, by name (what
    ``--mlfs-param`` would have to say to build it)."""
    default = MlfsConfig()
    return {
        f.name: getattr(config, f.name)
        for f in fields(MlfsConfig)
        if getattr(config, f.name) != getattr(default, f.name)
    }


def _check(ok: bool, name: str, value: float, expected: str) -> None:
    if not ok:
        raise ValueError(f"MlfsConfig.{name} must be {expected}, got {value!r}")
