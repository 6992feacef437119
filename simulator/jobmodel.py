"""How simulated jobs run: placement speed, suspend/resume costs, stopping point, accuracy.

:class:`TraceJobModel` implements :class:`simulator.types.JobModel` from a Chronus
``model_info.json`` scaling table, UniSched's Eq. 2 speed model, its Fig. 3 overheads and
learning curves (:mod:`simulator.curves`).

**Speed** (UniSched §III-B1, Eq. 2). Per iteration, a data-parallel job of ``g`` GPUs takes

    T_iter = T_comp                        if g = 1
           = T_comp + (g - 1) * T1         if it spans one node
           = T_comp + (g - 1) * T2         otherwise

with ``T_comp`` the computation time and ``T1`` / ``T2`` the intra- / inter-node gradient
communication time per extra GPU. Speeds are relative to the requested count ``g_r`` on one
node, so the unit is ``T_comp = 1`` at ``g_r``:

* ``T1`` is not in the table (its entries are normalised to one node), so it is a parameter,
  ``intra_node_comm`` = 0.075 by default: the median over Pollux's six applications
  (``pollux/traces/*/placements.csv``) of ``(step(g) - step(1)) / ((g - 1) * step(1))`` on one
  node, g = 2 and 4 (per application, medians over local batch sizes: cifar10 0.05,
  imagenet 0.015, bert 0.015, yolov3 0.08, deepspeech2 0.05, ncf 0.25).
* ``T2`` comes from the table: an entry ``s`` = speed at ``k`` GPUs over ``n`` nodes relative
  to one node is ``T_iter(k, 1) / T_iter(k, n)``, so
  ``T2(n) = ((1 + (k - 1) * T1) / s - 1) / (k - 1)`` (at least 0). ``k`` is ``g_r`` when the
  table has it, else the nearest GPU count it has (ties: the larger). As in the paper, where
  two GPUs profile any count, ``T1`` / ``T2`` are taken not to depend on the GPU count.
  Without a table (or a table row without multi-node entries) ``T2`` is ``inter_node_comm``
  = 0.12 by default: the median (0.117) of the ``T2`` that the Chronus table implies with
  the default ``T1`` (alexnet/vgg16 0.2-0.95, resnet101/mobilenet/inception 0.07-0.2).

At the requested count the table value is used as is: 1.0 on one node, the entry for ``n``
nodes, for a node count it lacks the entry of the nearest larger one, beyond its largest the
worst (slowest) entry. When a policy gives the job ``g != g_r`` GPUs, Eq. 2 is extended to a
fixed global batch (the job's iteration count and learning curve stay as the user set them):
each GPU computes ``g_r / g`` of the batch, so

    T_iter(g, n) = g_r / g + (g - 1) * T(n),   T(1) = T1, T(n >= 2) = T2(n)
    speed(g, n)  = T_iter(g_r, 1) / T_iter(g, n) = (1 + (g_r - 1) * T1) / T_iter(g, n)

which at ``g = g_r`` is exactly the table's value (Eq. 2 as written).

**Suspension and resumption** (UniSched §III-B3, Fig. 3). "The suspension overhead of various
models ... remains consistently within a range of 4 seconds": ``suspend_s`` = 4 s, the upper
bound. Resumption grows with the GPU count and "is much larger than the suspension overhead";
the combined overhead at 2 and 16 GPUs differs by at most 5 s for VGG19, hence
``resume_s = resume_base_s + resume_per_gpu_s * gpus`` with a slope of 5 / 14 s per GPU.
Fig. 3's values are not in the text: the base, 20 s (five times the suspension bound), is our
reading of "much larger", and the knob to turn for sensitivity studies (cf. Fig. 9c).

**Stopping and accuracy.** An iteration-based job works its trace duration. A
performance-based job stops when its learning curve reaches its target: at a per-job fraction
``f`` of its duration drawn uniformly in ``stop_fraction_range``, (0.69, 0.95) by default, with
the target the curve's value at ``f``. UniSched Fig. 1 reports performance-based stopping
saving up to 22 % (target: the best accuracy) to 31 % (99 % of the best) of the epochs: hence
at least 0.69, and at most 0.95 so that every such job stops early. Each job gets one of the
``curves`` (default :data:`simulator.curves.DEFAULT_CURVES`, fitted to the ONES histories).
Per-job draws hash ``(seed, job id)``: deterministic, independent of job order.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from simulator.curves import DEFAULT_CURVES, CurveParams, fit_curve_shapes
from simulator.types import TraceJob

INTRA_NODE_COMM = 0.075  # T1 / T_comp, see the module docstring
INTER_NODE_COMM = 0.12  # T2 / T_comp without a table entry
SUSPEND_S = 4.0  # Fig. 3(a): within 4 s
RESUME_BASE_S = 20.0
RESUME_PER_GPU_S = 5.0 / 14.0  # Fig. 3: 2 -> 16 GPUs adds at most 5 s
STOP_FRACTION_RANGE = (0.69, 0.95)  # Fig. 1: up to 31 % fewer epochs

Scaling = Mapping[str, Mapping[int, Mapping[int, float]]]
SpeedModelKind = Literal["table", "eq2-defaults", "eq2"]


@dataclass(frozen=True)
class SpeedModel:
    """Which placement-speed model a :class:`TraceJobModel` uses.

    ``kind``: ``"table"`` (a ``model_info.json`` scaling table), ``"eq2-defaults"`` (no table:
    Eq. 2 with ``INTRA_NODE_COMM`` / ``INTER_NODE_COMM`` for every job) or ``"eq2"`` (no table,
    other communication costs). ``path``: the table's file, absolute; None without a file.
    """

    kind: SpeedModelKind
    path: str | None = None

    def describe(self) -> str:
        """One line for people: the table's path, or Eq. 2 and its costs."""
        if self.kind == "table":
            return f"model_info table {self.path or '(given in memory)'}"
        if self.kind == "eq2-defaults":
            return f"UniSched Eq. 2 defaults (T1 = {INTRA_NODE_COMM}, T2 = {INTER_NODE_COMM})"
        return "UniSched Eq. 2 with custom communication costs"

    def to_json(self) -> dict[str, str | None]:
        """``{"kind": ..., "path": ...}`` for JSON reports."""
        return {"kind": self.kind, "path": self.path}


class UnknownModel(ValueError):
    """A job names a model the scaling table does not have."""

    def __init__(self, model: str, valid: Sequence[str]):
        self.model = model
        self.valid = tuple(valid)
        super().__init__(
            f"unknown model {model!r} for job speeds; valid models: {', '.join(self.valid)} "
            "(or pass default_model=...)"
        )


def load_model_info(path: str | Path) -> dict[str, dict[int, dict[int, float]]]:
    """Read a Chronus ``model_info.json``: model -> GPU count -> nodes spanned -> speed
    relative to one node (keys are strings in the file, ints here)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    try:
        return _check_scaling(raw)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _positive_key(key: object) -> int:
    try:
        value = int(str(key))
    except (TypeError, ValueError):
        value = 0
    if value < 1 or str(value) != str(key).strip():
        raise ValueError(f"{key!r} is not a positive integer")
    return value


def _check_scaling(raw: object) -> dict[str, dict[int, dict[int, float]]]:
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("expected a non-empty mapping of model -> GPU count -> nodes -> speed")
    table: dict[str, dict[int, dict[int, float]]] = {}
    for model, by_gpus in raw.items():
        if not isinstance(by_gpus, Mapping) or not by_gpus:
            raise ValueError(f"model {model!r}: expected a mapping of GPU count -> nodes")
        table[str(model)] = rows = {}
        for gpus_key, by_nodes in by_gpus.items():
            where = f"model {model!r}: GPU count {gpus_key!r}"
            try:
                gpus = _positive_key(gpus_key)
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            if not isinstance(by_nodes, Mapping) or not by_nodes:
                raise ValueError(f"{where}: expected a mapping of nodes -> speed")
            rows[gpus] = entry = {}
            for nodes_key, speed in by_nodes.items():
                try:
                    nodes = _positive_key(nodes_key)
                except ValueError as e:
                    raise ValueError(f"{where}: nodes {e}") from None
                if nodes > gpus:
                    raise ValueError(f"{where}: {nodes} nodes for {gpus} GPUs")
                if isinstance(speed, bool) or not isinstance(speed, (int, float)):
                    raise ValueError(f"{where}: nodes {nodes}: speed {speed!r} is not a number")
                if not (speed > 0 and math.isfinite(speed)):
                    raise ValueError(f"{where}: nodes {nodes}: speed {speed!r} is not positive")
                entry[nodes] = float(speed)
            entry.setdefault(1, 1.0)
    return table


def _unit_hash(seed: int, tag: str, job_id: str) -> float:
    """A number in [0, 1) fixed by (seed, tag, job id): stable across runs and processes."""
    digest = hashlib.blake2b(f"{seed}\x1f{tag}\x1f{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _lookup_nodes(entries: Mapping[int, float], nodes: int, worst: float) -> float:
    """The entry for ``nodes``, else the nearest larger node count's, else ``worst``."""
    if nodes in entries:
        return entries[nodes]
    larger = [n for n in entries if n > nodes]
    return entries[min(larger)] if larger else worst


class TraceJobModel:
    """The simulator's job model (see the module docstring for the model and its defaults).

    ``scaling``: model -> GPU count -> nodes -> relative speed (:func:`load_model_info`), or
    None to use ``intra_node_comm`` / ``inter_node_comm`` for every job. A job whose model the
    table lacks raises :class:`UnknownModel` unless ``default_model`` (a table model) is given.
    ``speed_model`` says which of these it uses (:class:`SpeedModel`).
    """

    def __init__(
        self,
        scaling: Scaling | None = None,
        *,
        default_model: str | None = None,
        intra_node_comm: float = INTRA_NODE_COMM,
        inter_node_comm: float = INTER_NODE_COMM,
        suspend_s: float = SUSPEND_S,
        resume_base_s: float = RESUME_BASE_S,
        resume_per_gpu_s: float = RESUME_PER_GPU_S,
        curves: Sequence[CurveParams] | None = None,
        stop_fraction_range: tuple[float, float] = STOP_FRACTION_RANGE,
        seed: int = 0,
    ):
        self._table = None if scaling is None else _check_scaling(scaling)
        if (
            default_model is not None
            and self._table is not None
            and default_model not in self._table
        ):
            raise UnknownModel(default_model, sorted(self._table))
        self.default_model = default_model
        for name, value in (
            ("intra_node_comm", intra_node_comm),
            ("inter_node_comm", inter_node_comm),
            ("suspend_s", suspend_s),
            ("resume_base_s", resume_base_s),
            ("resume_per_gpu_s", resume_per_gpu_s),
        ):
            if not (value >= 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a non-negative number, got {value}")
        self.intra_node_comm = intra_node_comm
        self.inter_node_comm = inter_node_comm
        self.suspend_fixed_s = suspend_s
        self.resume_base_s = resume_base_s
        self.resume_per_gpu_s = resume_per_gpu_s
        self.curves = tuple(DEFAULT_CURVES if curves is None else curves)
        if not self.curves:
            raise ValueError("curves must not be empty")
        lo, hi = stop_fraction_range
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(
                f"stop_fraction_range must satisfy 0 < low <= high <= 1, got {stop_fraction_range}"
            )
        self.stop_fraction_range = (lo, hi)
        self.seed = seed
        self._table_path: str | None = None  # set by from_model_info
        self._t2_cache: dict[tuple[str | None, int], dict[int, float]] = {}
        self._speed_cache: dict[tuple[str | None, int, int, int], float] = {}
        # (tag, job id) -> _unit_hash: the engine asks for a job's curve every cycle
        self._hash_cache: dict[tuple[str, str], float] = {}

    @classmethod
    def from_model_info(
        cls, path: str | Path, *, history: str | Path | None = None, **kwargs
    ) -> TraceJobModel:
        """A model from a Chronus ``model_info.json``; with ``history`` (an ONES-style
        ``job_history.csv``) the curves are fitted to it (:func:`fit_curve_shapes`) instead of
        using the built-in ones."""
        if history is not None:
            kwargs["curves"] = fit_curve_shapes(history)
        model = cls(load_model_info(path), **kwargs)
        model._table_path = str(Path(path).resolve())
        return model

    @property
    def models(self) -> tuple[str, ...]:
        return () if self._table is None else tuple(sorted(self._table))

    @property
    def speed_model(self) -> SpeedModel:
        """Which speed model this job model uses (:class:`SpeedModel`)."""
        if self._table is not None:
            return SpeedModel("table", self._table_path)
        defaults = (INTRA_NODE_COMM, INTER_NODE_COMM)
        if (self.intra_node_comm, self.inter_node_comm) == defaults:
            return SpeedModel("eq2-defaults")
        return SpeedModel("eq2")

    # --- speed ----------------------------------------------------------------------------------

    def table_model(self, job: TraceJob) -> str | None:
        """The table row used for ``job`` (None without a table); raises UnknownModel."""
        if self._table is None:
            return None
        if job.model in self._table:
            return job.model
        if self.default_model is not None:
            return self.default_model
        raise UnknownModel(job.model, self.models)

    def check_jobs(self, jobs: Sequence[TraceJob]) -> None:
        """Fail fast: raise :class:`UnknownModel` for the first job whose model the table lacks
        (``speed`` only consults the table for multi-node or resized allocations)."""
        for job in jobs:
            self.table_model(job)

    def _rows(self, model: str) -> dict[int, dict[int, float]]:
        assert self._table is not None
        return self._table[model]

    def _table_gpus(self, model: str, gpus: int) -> int:
        """The table's GPU count nearest to ``gpus`` (ties: the larger)."""
        return min(self._rows(model), key=lambda k: (abs(k - gpus), -k))

    def inter_node_comm_for(self, model: str | None, requested: int) -> dict[int, float]:
        """``T2(n)`` (in units of ``T_comp``) per node count ``n >= 2`` of the table entry
        used for a job of ``model`` requesting ``requested`` GPUs; empty: use the default."""
        key = (model, requested)
        found = self._t2_cache.get(key)
        if found is None:
            found = {}
            if model is not None:
                k = self._table_gpus(model, requested)
                base = 1.0 + (k - 1) * self.intra_node_comm  # T_iter(k, 1) / T_comp
                for n, s in self._rows(model)[k].items():
                    if n >= 2:
                        # Eq. 2: s = T_iter(k, 1) / T_iter(k, n), T_iter(k, n) = 1 + (k-1) T2
                        found[n] = max(0.0, (base / s - 1.0) / (k - 1))
            self._t2_cache[key] = found
        return found

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        """Progress per second on ``gpus`` GPUs over ``nodes`` nodes, relative to the requested
        count on one node (module docstring)."""
        if gpus < 1 or not 1 <= nodes <= gpus:
            raise ValueError(f"need gpus >= 1 and 1 <= nodes <= gpus, got {gpus} on {nodes}")
        requested = job.gpus
        if requested < 1:
            raise ValueError(f"job {job.id!r} requests {requested} GPUs")
        if gpus == requested and nodes == 1:
            return 1.0
        model = self.table_model(job)
        key = (model, requested, gpus, nodes)
        value = self._speed_cache.get(key)
        if value is None:
            value = self._speed(model, requested, gpus, nodes)
            self._speed_cache[key] = value
        return value

    def _speed(self, model: str | None, requested: int, gpus: int, nodes: int) -> float:
        if model is not None and gpus == requested and requested in self._rows(model):
            entries = self._rows(model)[requested]
            return _lookup_nodes(entries, nodes, min(entries.values()))
        rho = self.intra_node_comm
        if nodes == 1:
            comm = rho
        else:
            t2 = self.inter_node_comm_for(model, requested)
            comm = _lookup_nodes(t2, nodes, max(t2.values())) if t2 else self.inter_node_comm
        # Eq. 2 with a fixed global batch: T_iter(g, n) = T_comp g_r / g + (g - 1) T(n)
        t_iter = requested / gpus + (gpus - 1) * comm
        return (1.0 + (requested - 1) * rho) / t_iter

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        """(T_iter, T_comp) in seconds as measured with the requested per-GPU batch: Eq. 2,
        ``T_comp + (gpus - 1) * T(nodes)``, where one iteration at the requested count on one
        node takes ``duration / iterations``."""
        if gpus < 1 or not 1 <= nodes <= gpus:
            raise ValueError(f"need gpus >= 1 and 1 <= nodes <= gpus, got {gpus} on {nodes}")
        requested = max(1, job.gpus)
        per_iteration = job.duration_s / max(1, job.iterations)
        t_comp = per_iteration / (1.0 + (requested - 1) * self.intra_node_comm)
        if nodes == 1:
            comm = self.intra_node_comm
        else:
            t2 = self.inter_node_comm_for(self.table_model(job), requested)
            comm = _lookup_nodes(t2, nodes, max(t2.values())) if t2 else self.inter_node_comm
        return t_comp * (1.0 + (gpus - 1) * comm), t_comp

    # --- suspension and resumption (Fig. 3) -----------------------------------------------------

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        return self.suspend_fixed_s

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        return self.resume_base_s + self.resume_per_gpu_s * gpus

    # --- stopping and accuracy ------------------------------------------------------------------

    def stop_fraction(self, job: TraceJob) -> float:
        """Fraction of the duration after which the job stops: 1 for iteration-based jobs."""
        if not job.performance_based:
            return 1.0
        lo, hi = self.stop_fraction_range
        return lo + (hi - lo) * self._unit("stop", job.id)

    def curve(self, job: TraceJob) -> CurveParams:
        """The job's learning curve, over the fraction of its full duration."""
        return self.curves[int(self._unit("curve", job.id) * len(self.curves))]

    def _unit(self, tag: str, job_id: str) -> float:
        """:func:`_unit_hash` under this model's seed, computed once per (tag, job)."""
        key = (tag, job_id)
        value = self._hash_cache.get(key)
        if value is None:
            value = self._hash_cache[key] = _unit_hash(self.seed, tag, job_id)
        return value

    def target_metric(self, job: TraceJob) -> float | None:
        """The accuracy a performance-based job stops at; None for iteration-based jobs."""
        if not job.performance_based:
            return None
        return self.curve(job)(self.stop_fraction(job))

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s * self.stop_fraction(job)

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        """Accuracy after ``fraction`` (clipped to [0, 1]) of ``work_s``: for a
        performance-based job ``metric_at(job, 1.0)`` is its target."""
        fraction = min(1.0, max(0.0, fraction))
        return self.curve(job)(fraction * self.stop_fraction(job))
