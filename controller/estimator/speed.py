"""Runtime speed estimator (UniSched §III-B1, Eq. 2).

From iteration times measured on at most two GPUs during profiling, Eq. 2 predicts the time per
iteration on any allocation::

    T_iter = T_comp                        if N_gpu = 1
    T_iter = T_comp + (N_gpu - 1) * T1     if N_node = 1, N_gpu >= 2
    T_iter = T_comp + (N_gpu - 1) * T2     otherwise

``T_comp`` is the trainer's reported computation time when it reports one, else the iteration
time of a 1-GPU sample; without either, the smallest measured iteration time stands in for it
(communication then counts as zero in that sample: an underestimate that execution-phase
samples correct). A measurement at the exact shape asked for always wins over the formula (the
paper updates T_iter during execution, §III-B1 Discussion (3)). When only one of T1, T2 was
profiled, the other is derived with ``inter_node_ratio`` (T2 = ratio * T1): the paper profiles
only the one the job's execution will need; a relaxed (multi-node) allocation of a one-node job
needs T2 too, and erring slow keeps deadlines safe (Discussion (1)).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from mlsched.model import SpeedSample

DEFAULT_INTER_NODE_RATIO = 1.5  # T2 / T1 when only one was measured (see module docstring)


@dataclass(frozen=True)
class SpeedModel:
    """Eq. 2's parameters for one job, plus the shapes measured directly."""

    t_comp: float
    t_intra: float  # T1: extra seconds per additional GPU on one node
    t_inter: float  # T2: extra seconds per additional GPU across nodes
    measured: Mapping[tuple[int, int], float] = field(default_factory=dict)
    inter_measured: bool = False  # T2 comes from a multi-node sample, not from the ratio

    def iteration_time(self, gpus: int, nodes: int) -> float:
        """Predicted seconds per iteration on ``gpus`` GPUs over ``nodes`` nodes (Eq. 2)."""
        if gpus < 1 or not 1 <= nodes <= gpus:
            raise ValueError(f"need gpus >= 1 and 1 <= nodes <= gpus, got {gpus} on {nodes}")
        exact = self.measured.get((gpus, nodes))
        if exact is not None:
            return exact
        if gpus == 1:
            return self.t_comp
        per_gpu = self.t_intra if nodes == 1 else self.t_inter
        return self.t_comp + (gpus - 1) * per_gpu


def fit_speed_model(
    samples: Iterable[SpeedSample], inter_node_ratio: float = DEFAULT_INTER_NODE_RATIO
) -> SpeedModel | None:
    """Eq. 2's parameters from measured samples; None without any usable sample."""
    usable = [s for s in samples if s.iteration_time_s > 0 and s.gpus >= 1]
    if not usable:
        return None
    computes = [s.compute_time_s for s in usable if s.compute_time_s > 0]
    singles = [s.iteration_time_s for s in usable if s.gpus == 1]
    if computes:
        t_comp = min(computes)
    elif singles:
        t_comp = min(singles)
    else:
        t_comp = min(s.iteration_time_s for s in usable)
    intra = _per_gpu_cost(t_comp, (s for s in usable if s.gpus >= 2 and s.nodes == 1))
    inter = _per_gpu_cost(t_comp, (s for s in usable if s.nodes >= 2))
    if intra is None and inter is None:
        intra = inter = 0.0
    elif intra is None:
        intra = inter / inter_node_ratio  # type: ignore[operator]
    elif inter is None:
        inter = intra * inter_node_ratio
    measured = {(s.gpus, s.nodes): s.iteration_time_s for s in usable}
    inter_measured = any(s.nodes >= 2 for s in usable)
    return SpeedModel(t_comp, intra, inter, measured, inter_measured)  # type: ignore[arg-type]


def _per_gpu_cost(t_comp: float, samples: Iterable[SpeedSample]) -> float | None:
    """Mean of (T_iter - T_comp) / (N_gpu - 1) over the samples, weighted by report count."""
    total = weight = 0.0
    for s in samples:
        total += s.count * max(0.0, s.iteration_time_s - t_comp) / (s.gpus - 1)
        weight += s.count
    return total / weight if weight else None
