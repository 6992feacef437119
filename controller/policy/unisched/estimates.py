"""Per-job estimates for the Selector: UniSched's Estimator (§III-B) applied to a JobView."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.estimator.duration import duration_s
from controller.estimator.speed import SpeedModel, fit_speed_model
from controller.estimator.sr import sr_overhead_best_effort, sr_overhead_slo
from controller.policy.base import JobTruth, JobView
from controller.policy.unisched.config import UniSchedConfig


@dataclass(frozen=True)
class JobEstimator:
    """Eq. 1-3 for one job at one moment: remaining iterations and speed are fixed here."""

    view: JobView
    remaining_iterations: float
    speed: SpeedModel | JobTruth | None  # the oracle's truth has the same iteration_time
    t_sr: float  # measured combined suspend + resume overhead, or the default
    config: UniSchedConfig

    @classmethod
    def of(cls, view: JobView, iterations: int, config: UniSchedConfig) -> JobEstimator:
        if config.oracle:
            return cls.known(view, config)
        speed = fit_speed_model(view.speed_samples, config.inter_node_ratio)
        return cls.fitted(view, iterations, config, speed)

    @classmethod
    def fitted(
        cls, view: JobView, iterations: int, config: UniSchedConfig, speed: SpeedModel | None
    ) -> JobEstimator:
        """As :meth:`of`, with the speed model already fitted to ``view.speed_samples`` (a
        caller that keeps fitted models between cycles passes its own)."""
        if config.oracle:
            return cls.known(view, config)
        t_sr = view.sr_overhead_s if view.sr_overhead_s is not None else config.default_t_sr_s
        remaining = max(1.0, iterations - view.iteration)
        return cls(view, remaining, speed, t_sr, config)

    @classmethod
    def known(cls, view: JobView, config: UniSchedConfig) -> JobEstimator:
        """The oracle's estimate: the job's true iterations, speeds and overhead."""
        truth = view.truth
        if truth is None:
            raise ValueError(
                f"job {view.id}: the oracle needs the job's true duration and speeds"
                " (JobView.truth), which only the simulator fills"
            )
        remaining = max(1.0, truth.iterations - view.iteration)
        return cls(view, remaining, truth, truth.sr_overhead_s, config)

    def iteration_time(self, gpus: int, nodes: int) -> float | None:
        return None if self.speed is None else self.speed.iteration_time(gpus, nodes)

    def run_s(self, gpus: int, nodes: int) -> float:
        """Remaining training seconds without overheads (N_iter * T_iter); without a speed
        model, the snapshot's own remaining-time estimate, else one second per iteration."""
        t_iter = self.iteration_time(gpus, nodes)
        if t_iter is not None:
            return self.remaining_iterations * t_iter
        if self.view.estimated_remaining_s is not None:
            return self.view.estimated_remaining_s
        return self.remaining_iterations

    def slo_leases_before(
        self, run_s: float, lease_s: float, terms: Sequence[int]
    ) -> tuple[int, ...]:
        """Lease terms an SLO job needs before each of its deadlines, ``terms`` lease terms
        away: Eq. 1 with Eq. 3's T_sr (n terms running within m = the terms to the deadline)."""
        n = max(1, math.ceil(run_s / lease_s))
        if not self.config.sr_aware:
            return (n,) * len(terms)
        t_sr = self.t_sr
        leases = []
        for q in terms:  # Eq. 1 with N_iter * T_iter = run_s (a hot loop: no call it can spare)
            need = math.ceil((sr_overhead_slo(n, q if q > n else n, t_sr) + run_s) / lease_s)
            leases.append(need if need > 1 else 1)
        return tuple(leases)

    def best_effort_remaining_s(self, run_s: float, lease_s: float) -> float:
        """Eq. 1 with a best-effort job's T_sr = n/2 t_sr."""
        if not self.config.sr_aware:
            return run_s
        n = max(1, math.ceil(run_s / lease_s))
        return duration_s(sr_overhead_best_effort(n, self.t_sr), 1, run_s)
