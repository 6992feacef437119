"""How well SLAQ's loss predictor does on real curves (issue 14; as docs/estimator-curves.md
reports UniSched's): fit on a curve's first part, predict the held-back rest.

``python -m simulator.loss_error ../shared/data`` prints, per source and cut, the mean and
median relative error of the predicted loss over the next ``AHEAD`` points after the cut and
at the curve's last point. Losses are the ONES per-epoch training losses and Pollux's
validation metrics (as :mod:`simulator.elastic` turns them into losses; negated ones are
compared by magnitude).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from controller.policy.slaq_predict import fit_loss, strawman
from simulator.elastic import app_tables, ones_curves

AHEAD = 10
CUTS = (0.25, 0.5, 0.75)


def curves(data: Path) -> dict[str, list[list[tuple[int, float]]]]:
    out: dict[str, list[list[tuple[int, float]]]] = {"ones": [], "pollux": []}
    for c in ones_curves(data):
        if len(c.losses) >= 8:
            out["ones"].append(list(enumerate(c.losses, start=1)))
    for app in ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"):
        for points in app_tables(data, app).curves.values():
            if len(points) >= 8:
                out["pollux"].append([(k, v) for k, v in points])
    return out


def errors(curve: list[tuple[int, float]], cut: float, strawman_only: bool = False):
    n = max(4, int(len(curve) * cut))
    seen, rest = curve[:n], curve[n:]
    if not rest:
        return None
    model = strawman(seen) if strawman_only else (fit_loss(seen) or strawman(seen))
    if model is None:
        return None
    rel = [abs(model(k) - v) / max(abs(v), 1e-12) for k, v in rest[:AHEAD]]
    k, v = rest[-1]
    return float(np.mean(rel)), abs(model(k) - v) / max(abs(v), 1e-12)


def main(data: Path) -> None:
    print("source  cut  method     curves  next-10 mean  next-10 median  last-point median")
    for source, group in curves(data).items():
        for cut in CUTS:
            for method in ("fit", "strawman"):
                found = [e for c in group if (e := errors(c, cut, method == "strawman"))]
                near = [a for a, _ in found]
                far = [b for _, b in found]
                print(
                    f"{source:7} {cut:4.2f} {method:9} {len(found):7d}"
                    f"  {np.mean(near):12.1%}  {np.median(near):14.1%}  {np.median(far):17.1%}"
                )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data"))
