"""What an elastic job's process trains at (issue 14): world size, batch, learning-rate scale.

The controller launches every attempt of an elastic job with ``MLSCHED_ELASTIC_BATCH_SIZE``
(the global batch for the GPUs the attempt holds), ``MLSCHED_BASE_BATCH_SIZE`` (the spec's
``batch_size``) and ``MLSCHED_LR_SCALING`` (``linear`` or ``none``); a batch changed in place
later arrives as a ``ChangeBatchSize`` command. A job that is not elastic has none of these:
its batch is the one the environment or the script gives, and its learning-rate scale is 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

ELASTIC_BATCH = "MLSCHED_ELASTIC_BATCH_SIZE"
BASE_BATCH = "MLSCHED_BASE_BATCH_SIZE"
LR_SCALING = "MLSCHED_LR_SCALING"


@dataclass(frozen=True)
class Scale:
    """The shape this process trains in. ``batch_size`` is the global batch (None: unknown,
    the script decides); ``base_batch_size`` the one its learning rate was tuned for."""

    world_size: int = 1
    rank: int = 0
    batch_size: int | None = None
    base_batch_size: int | None = None
    linear_lr: bool = False

    @property
    def per_gpu_batch_size(self) -> int | None:
        """This process's share of the global batch (one GPU per process): an equal split,
        the first ``batch_size % world_size`` ranks one sample more."""
        if self.batch_size is None:
            return None
        share, extra = divmod(self.batch_size, max(1, self.world_size))
        return share + (1 if self.rank < extra else 0)

    @property
    def lr_scale(self) -> float:
        """Linear scaling (Goyal et al.): global batch over the base one; 1 without it."""
        if not self.linear_lr or not self.batch_size or not self.base_batch_size:
            return 1.0
        return self.batch_size / self.base_batch_size

    def with_batch(self, batch_size: int) -> Scale:
        return replace(self, batch_size=batch_size)


def from_env(
    env: Mapping[str, str], world_size: int, rank: int, batch_size: int | None
) -> tuple[Scale, bool]:
    """The starting scale and whether the controller set the batch (an elastic job)."""
    elastic = _positive(env, ELASTIC_BATCH)
    base = _positive(env, BASE_BATCH) or batch_size
    scaling = env.get(LR_SCALING, "none")
    if scaling not in ("linear", "none"):
        raise ValueError(f"{LR_SCALING}={scaling!r}: linear or none")
    scale = Scale(world_size, rank, elastic or batch_size, base, scaling == "linear")
    return scale, elastic is not None


def _positive(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"{key}={raw!r} must be at least 1")
    return value
