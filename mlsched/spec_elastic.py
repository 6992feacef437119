"""The ``elastic`` section of a job spec (issue 14): how far a job stretches and how its batch
size follows. Every problem names its field.

Example::

    gpus: 4                       # where the job starts
    batch_size: 256               # the global batch on ``gpus`` GPUs
    elastic:
      min_gpus: 1
      max_gpus: 8
      batch: fixed-per-gpu        # fixed-global (default) | fixed-per-gpu | scheduler
      max_batch_size: 1024        # scheduler only: the largest global batch it may pick
      lr_scaling: linear          # none (default) | linear: lr x global batch / batch_size

Rules: ``min_gpus <= gpus <= max_gpus``, both multiples of ``gpus_per_process``. A fixed global
batch needs ``batch_size`` of at least ``max_gpus`` (one sample per GPU) and no learning-rate
scaling (its batch never changes); a fixed per-GPU batch needs ``batch_size`` divisible by
``gpus``; a scheduler-chosen batch needs ``max_batch_size >= batch_size``, and only it may set
``max_batch_size``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlsched.model import BatchRule, ElasticSpec
from mlsched.spec_section import FieldDoc, open_section

ELASTIC_FIELDS = ("min_gpus", "max_gpus", "batch", "max_batch_size", "lr_scaling")
_LR_SCALING = {"none": False, "linear": True}
MAX_BATCH = 10**7
ELASTIC_FIELD_DOCS = {  # docs/spec-reference.md (python -m mlsched.spec_reference)
    "min_gpus": FieldDoc(
        "integer, 1 to 1024, a multiple of `gpus_per_process`",
        "required",
        "the fewest GPUs the job may shrink to",
    ),
    "max_gpus": FieldDoc(
        "integer, 1 to 1024, a multiple of `gpus_per_process`",
        "required",
        "the most GPUs the job may grow to",
    ),
    "batch": FieldDoc(
        "one of " + ", ".join(r.value for r in BatchRule),
        BatchRule.FIXED_GLOBAL.value,
        "how the batch follows the GPU count: the global batch stays, each GPU keeps its "
        "share, or the scheduler picks the global batch",
    ),
    "max_batch_size": FieldDoc(
        f"integer, 1 to {MAX_BATCH}, at least `batch_size`",
        "required with `batch: scheduler`, else not allowed",
        "the largest global batch the scheduler may pick",
    ),
    "lr_scaling": FieldDoc(
        "one of " + ", ".join(_LR_SCALING),
        "none",
        "linear: the learning rate scales with global batch / `batch_size` (not with fixed-global)",
    ),
}


def parse_elastic(
    value: Any, gpus: int, per_process: int, batch_size: int, problems: list[str]
) -> ElasticSpec:
    """The validated section; ``gpus`` / ``per_process`` are 0 when already found wrong."""
    before = len(problems)
    value = open_section("elastic", value, ELASTIC_FIELDS, problems)
    if value is None:
        return ElasticSpec()
    low = _count(value, "min_gpus", per_process, problems)
    high = _count(value, "max_gpus", per_process, problems)
    if low and high and low > high:
        problems.append(f"elastic.min_gpus ({low}) must not exceed elastic.max_gpus ({high})")
    elif low and high and gpus and not low <= gpus <= high:
        problems.append(f"gpus ({gpus}) must lie within elastic.min_gpus..max_gpus ({low}..{high})")
    rule = _batch_rule(value.get("batch", BatchRule.FIXED_GLOBAL.value), problems)
    linear = _lr_scaling(value.get("lr_scaling", "none"), problems)
    limit = value.get("max_batch_size")
    if rule is not None:
        limit = _batch_fields(rule, limit, linear, gpus, high, batch_size, problems)
    if len(problems) > before or rule is None:
        return ElasticSpec()
    return ElasticSpec(low, high, rule, limit or 0, bool(linear))


def elastic_to_dict(elastic: ElasticSpec) -> dict[str, Any]:
    """The YAML form, every field spelled out (``max_batch_size`` only where it applies)."""
    document: dict[str, Any] = {
        "min_gpus": elastic.min_gpus,
        "max_gpus": elastic.max_gpus,
        "batch": elastic.batch.value,
        "lr_scaling": "linear" if elastic.linear_lr else "none",
    }
    if elastic.batch is BatchRule.SCHEDULER:
        document["max_batch_size"] = elastic.max_batch_size
    return document


def _count(value: Mapping[str, Any], key: str, per_process: int, problems: list[str]) -> int:
    raw = value.get(key)
    if raw is None:
        problems.append(f"elastic.{key}: required")
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 1024:
        problems.append(f"elastic.{key}: an integer between 1 and 1024, got {raw!r}")
        return 0
    if per_process and raw % per_process:
        problems.append(f"elastic.{key} ({raw}) must be a multiple of gpus_per_process")
        return 0
    return raw


def _batch_rule(raw: Any, problems: list[str]) -> BatchRule | None:
    try:
        return BatchRule(raw)
    except ValueError:
        valid = ", ".join(r.value for r in BatchRule)
        problems.append(f"elastic.batch: one of {valid}, got {raw!r}")
        return None


def _lr_scaling(raw: Any, problems: list[str]) -> bool | None:
    if raw not in _LR_SCALING:
        problems.append(f"elastic.lr_scaling: none or linear, got {raw!r}")
        return None
    return _LR_SCALING[raw]


def _batch_fields(
    rule: BatchRule,
    limit: Any,
    linear: bool | None,
    gpus: int,
    high: int,
    batch_size: int,
    problems: list[str],
) -> int | None:
    """Check the batch fields against the rule; the valid ``max_batch_size`` (or None)."""
    if rule is not BatchRule.SCHEDULER and limit is not None:
        problems.append(f"elastic.max_batch_size: only with batch: scheduler (got {rule.value})")
    if batch_size <= 0:
        problems.append(f"batch_size: required (> 0) with elastic.batch: {rule.value}")
        return None
    if rule is BatchRule.FIXED_GLOBAL:
        if linear:
            problems.append(
                "elastic.lr_scaling: linear needs a batch that changes (fixed-per-gpu or "
                "scheduler); a fixed global batch keeps its learning rate"
            )
        if high and batch_size < high:
            problems.append(
                f"batch_size ({batch_size}) must be at least elastic.max_gpus ({high}) with a "
                "fixed global batch (one sample per GPU)"
            )
    elif rule is BatchRule.FIXED_PER_GPU:
        if gpus and batch_size % gpus:
            problems.append(
                f"batch_size ({batch_size}) must be divisible by gpus ({gpus}) with "
                "elastic.batch: fixed-per-gpu"
            )
    else:
        if limit is None:
            problems.append("elastic.max_batch_size: required with batch: scheduler")
            return None
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BATCH:
            problems.append(f"elastic.max_batch_size: 1 to {MAX_BATCH}, got {limit!r}")
            return None
        if limit < batch_size:
            problems.append(
                f"elastic.max_batch_size ({limit}) must be at least batch_size ({batch_size})"
            )
            return None
        return limit
    return None
