"""Whether an MLF-RL model was trained for the setting a simulation runs (docs/mlfs.md,
*A model per setting*).

A model's file records how ``mlsched mlfs-train`` made it (its ``meta``): the cluster, whether
jobs had MLFS features, the MLFS parameters. A network scored on inputs from another cluster
size, feature set or Eq. 6 weighting may order jobs worse than the MLF-H it imitates; the
simulator says so beside its report instead of leaving it to be found in the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.policy.mlfs.config import MlfsConfig, changed_params
from simulator.engine import ClusterShape


def setting_differences(
    meta: Mapping[str, Any],
    shape: ClusterShape,
    trained_shape: ClusterShape | None,
    mlfs_features: bool,
    mlfs: MlfsConfig | None,
) -> list[str]:
    """What differs between the setting in a model's ``meta`` (``trained_shape``: its
    ``cluster``, parsed) and this run's, one phrase each; empty when nothing recorded
    differs. A model's ``mlfs_params`` left unrecorded (files made before the option) count
    as the paper's defaults."""
    out: list[str] = []
    if trained_shape is not None and trained_shape != shape:
        out.append(
            f"trained on {trained_shape.nodes}x{trained_shape.gpus_per_node} GPUs, "
            f"this run has {shape.nodes}x{shape.gpus_per_node}"
        )
    features = meta.get("mlfs_features")
    if isinstance(features, bool) and features != mlfs_features:
        out.append(
            "trained with MLFS job features, this run has none"
            if features
            else "trained without MLFS job features, this run has them"
        )
    trained = meta.get("mlfs_params") or {}
    run = changed_params(mlfs or MlfsConfig())
    if isinstance(trained, Mapping) and dict(trained) != run:
        out.append(f"trained with MLFS parameters {_params(trained)}, this run has {_params(run)}")
    return out


def _params(values: Mapping[str, Any]) -> str:
    if not values:
        return "the paper's defaults"
    return ", ".join(f"{name}={value:g}" for name, value in sorted(values.items()))
