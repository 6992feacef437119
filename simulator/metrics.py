"""Metrics of one simulation run, as a JSON-ready dict.

Every metric is a pure function of a :class:`SimResult`. ``compute_metrics`` merges the dicts
returned by the functions in ``SECTIONS``; a new metric is one more such function.

Conventions:

* Times are seconds on the simulation clock; fractions are in [0, 1] (the report shows %).
* A metric with nothing to measure (no finished jobs, no SLO jobs) is ``None`` (JSON null).
* Percentiles use numpy's default ``method="linear"`` (Hyndman & Fan type 7: the value at rank
  ``q * (n - 1)`` of the sorted sample, interpolated linearly between neighbours).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from mlsched.model import Deadline, JobClass
from simulator.quality import quality_metrics
from simulator.types import JobRecord, SimResult

CLASS_KEYS: dict[JobClass, str] = {
    JobClass.BEST_EFFORT: "best_effort",
    JobClass.STRICT_SLO: "strict",
    JobClass.SOFT_SLO: "soft",
}
SLO_CLASSES = (JobClass.STRICT_SLO, JobClass.SOFT_SLO)

Stats = dict[str, float | int | None]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation (numpy ``method="linear"``)."""
    return float(np.percentile(np.asarray(values, dtype=float), q, method="linear"))


def summary(values: Sequence[float]) -> Stats:
    """``{"avg", "median", "p95", "count"}`` of ``values``; the statistics are None when empty."""
    if not values:
        return {"avg": None, "median": None, "p95": None, "count": 0}
    return {
        "avg": float(np.mean(np.asarray(values, dtype=float))),
        "median": percentile(values, 50),
        "p95": percentile(values, 95),
        "count": len(values),
    }


def by_class(records: Iterable[JobRecord], value: Callable[[JobRecord], float | None]) -> dict:
    """``summary`` of ``value`` overall and per class, skipping records where it is None."""
    groups: dict[str, list[float]] = {"all": [], **{key: [] for key in CLASS_KEYS.values()}}
    for record in records:
        v = value(record)
        if v is not None:
            groups["all"].append(v)
            groups[CLASS_KEYS[record.job.job_class]].append(v)
    return {name: summary(values) for name, values in groups.items()}


# --- SLO attainment ---------------------------------------------------------------------------


def scored_slo_records(records: Iterable[JobRecord]) -> list[JobRecord]:
    """SLO jobs (strict or soft) that can be scored: at least one deadline, a positive top reward.

    Every such job of the trace counts, whether the policy admitted, started or finished it.
    """
    return [
        r
        for r in records
        if r.job.job_class in SLO_CLASSES
        and r.job.deadlines
        and max(d.reward for d in r.job.deadlines) > 0
    ]


def in_deadline_order(deadlines: Iterable[Deadline]) -> list[Deadline]:
    return sorted(deadlines, key=lambda d: d.seconds_after_submit)


def reward_earned(record: JobRecord) -> float:
    """Reward of the first deadline, in deadline order, that the job's JCT meets (JCT <= deadline);
    0 if it meets none or never finished."""
    jct = record.jct_s
    if jct is None:
        return 0.0
    for deadline in in_deadline_order(record.job.deadlines):
        if jct <= deadline.seconds_after_submit:
            return deadline.reward
    return 0.0


def reward_lost(record: JobRecord) -> float:
    """(V_max - V_got) / V_max, with V_max the job's highest deadline reward."""
    v_max = max(d.reward for d in record.job.deadlines)
    return (v_max - reward_earned(record)) / v_max


def missed_first_deadline(record: JobRecord) -> bool:
    """True if the job finished after its earliest deadline or never finished."""
    jct = record.jct_s
    first = in_deadline_order(record.job.deadlines)[0]
    return jct is None or jct > first.seconds_after_submit


def slo_metrics(result: SimResult) -> dict:
    """``r_slo``, ``deadline_miss_rate`` and ``slo_jobs`` (how many SLO jobs were scored).

    ``r_slo`` is UniSched's weighted deadline miss rate R^slo (Eq. 15, §VI-A): the mean over the
    SLO job set J^slo of a normalised reward term. Eq. 15 as printed normalises the reward W(j)
    with W_min = 0 and W_max = 100; we read it as a *miss* rate (lower is better, as the paper's
    results use it), i.e. the share of the reward that was lost, with W_max the job's own highest
    deadline reward: (V_max - V_got) / V_max, where V_got is the reward of the first deadline the
    JCT meets (0 if none, or if the job never finished).
    """
    scored = scored_slo_records(result.records)
    if not scored:
        return {"r_slo": None, "deadline_miss_rate": None, "slo_jobs": 0}
    return {
        "r_slo": sum(reward_lost(r) for r in scored) / len(scored),
        "deadline_miss_rate": sum(missed_first_deadline(r) for r in scored) / len(scored),
        "slo_jobs": len(scored),
    }


# --- Latency ----------------------------------------------------------------------------------


def latency_metrics(result: SimResult) -> dict:
    """``jct_s`` over finished jobs and ``queue_s`` (submission to first start) over started
    jobs, each overall and per class."""
    return {
        "jct_s": by_class(result.records, lambda r: r.jct_s),
        "queue_s": by_class(result.records, lambda r: r.queue_s),
    }


# --- Cluster ----------------------------------------------------------------------------------


def cumulative_busy(samples: Sequence[tuple[float, int]], at: Sequence[float]) -> np.ndarray:
    """Busy GPU-seconds from the start of time up to each instant in ``at``.

    ``samples`` are (time, busy GPUs) steps: a value holds from its time until the next sample's
    (the last one holds for ever); before the first sample no GPU is busy. Samples need not be
    sorted; of several at the same time the last one listed wins.
    """
    at = np.asarray(at, dtype=float)
    if not samples:
        return np.zeros_like(at)
    ordered = sorted(samples, key=lambda s: s[0])  # stable: ties keep their listed order
    times = np.array([t for t, _ in ordered], dtype=float)
    busy = np.array([b for _, b in ordered], dtype=float)
    area_at_sample = np.concatenate(([0.0], np.cumsum(busy[:-1] * np.diff(times))))
    idx = np.searchsorted(times, at, side="right") - 1
    before_first = idx < 0
    idx = np.maximum(idx, 0)
    area = area_at_sample[idx] + busy[idx] * (at - times[idx])
    return np.where(before_first, 0.0, area)


def busy_gpu_seconds(samples: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """Integral of the busy-GPU step function over [start, end]."""
    lo, hi = cumulative_busy(samples, [start, end])
    return float(hi - lo)


def first_submit_s(result: SimResult) -> float | None:
    return min((r.job.submit_s for r in result.records), default=None)


def gpu_utilization(result: SimResult) -> float | None:
    """Time-weighted mean of busy/total GPUs over [first submission, makespan].

    ``makespan_s`` is read as the clock time at which the simulation's last job ended.
    """
    start = first_submit_s(result)
    end = result.makespan_s
    if start is None or end <= start or result.total_gpus <= 0:
        return None
    busy = busy_gpu_seconds(result.utilization, start, end)
    return busy / (result.total_gpus * (end - start))


def cluster_metrics(result: SimResult) -> dict:
    records = result.records
    return {
        "makespan_s": result.makespan_s,
        "gpu_utilization": gpu_utilization(result),
        "preemptions_per_job": (
            sum(r.suspensions for r in records) / len(records) if records else None
        ),
        "jobs_completed": sum(r.end_s is not None for r in records),
        "jobs_total": len(records),
        "total_gpus": result.total_gpus,
    }


# --- The simulator itself ---------------------------------------------------------------------


def run_metrics(result: SimResult) -> dict:
    """Wall-clock time of the run, the policy's time per decision cycle (``p50``, ``p95``,
    ``max`` and the number of ``cycles``) and the number of launches the engine refused."""
    times = result.decision_times_s
    decisions: Stats = (
        {"p50": percentile(times, 50), "p95": percentile(times, 95), "max": float(max(times))}
        if times
        else {"p50": None, "p95": None, "max": None}
    )
    decisions["cycles"] = len(times)
    return {
        "wall_s": result.wall_s,
        "decision_time_s": decisions,
        "refused_launches": result.refused_launches,
    }


# --- MLFS (§3.2 Eq. 1, §4) ----------------------------------------------------------------------


def met_deadline(record: JobRecord) -> bool:
    """True if the job finished by its earliest deadline."""
    jct = record.jct_s
    first = min(d.seconds_after_submit for d in record.job.deadlines)
    return jct is not None and jct <= first


def mlfs_metrics(result: SimResult) -> dict:
    """MLFS' objectives (Eq. 1) beside the JCT above.

    * ``accuracy_by_deadline``: mean over jobs of the accuracy reached by the earliest deadline
      (jobs without one: at their end; unfinished ones: by the end of the run); None when the
      job model has no accuracy.
    * ``accuracy_guarantee_ratio`` (g_4): share of the jobs with a required accuracy whose
      final accuracy reaches it (never finished: not reached).
    * ``deadline_guarantee_ratio`` (g_2): share of the jobs with a deadline that finished by
      their earliest one.
    * ``bandwidth_cost_gb`` (g_3): GB sent between servers, summed over jobs; None when no job
      has a communication volume.
    * ``migrations_per_job`` (``Decision.migrate`` orders carried out),
      ``resumed_elsewhere_per_job`` (resumptions on other nodes than the attempt before: how
      policies without migrations, such as UniSched, move jobs), ``jobs_stopped`` (MLF-C
      early stops), ``overload_retreats`` (jobs an overload sent back to the queue with no host
      to move to: ``controller.policy.retreat.RETREAT_REASONS``), ``refused_migrations``.
    """
    records = result.records
    reached = [r.accuracy_by_deadline for r in records if r.accuracy_by_deadline is not None]
    required = [
        (r, r.job.mlfs.required_accuracy)
        for r in records
        if r.job.mlfs is not None and r.job.mlfs.required_accuracy is not None
    ]
    with_deadline = [r for r in records if r.job.deadlines]
    return {
        "accuracy_by_deadline": sum(reached) / len(reached) if reached else None,
        "accuracy_guarantee_ratio": (
            sum(r.final_metric is not None and r.final_metric >= a for r, a in required)
            / len(required)
            if required
            else None
        ),
        "deadline_guarantee_ratio": (
            sum(map(met_deadline, with_deadline)) / len(with_deadline) if with_deadline else None
        ),
        "bandwidth_cost_gb": (
            sum(r.bandwidth_gb for r in records)
            if any(r.job.demand is not None for r in records)
            else None
        ),
        "migrations_per_job": (
            sum(r.migrations for r in records) / len(records) if records else None
        ),
        "resumed_elsewhere_per_job": (
            sum(r.resumed_elsewhere for r in records) / len(records) if records else None
        ),
        "jobs_stopped": sum(r.stopped for r in records),
        "overload_retreats": sum(r.overload_retreats for r in records),
        "refused_migrations": result.refused_migrations,
    }


SECTIONS: tuple[Callable[[SimResult], dict], ...] = (
    slo_metrics,
    latency_metrics,
    cluster_metrics,
    mlfs_metrics,
    quality_metrics,
    run_metrics,
)


def compute_metrics(result: SimResult) -> dict:
    """All metrics of ``result``: a dict of JSON types only (str, int, float, None, dict)."""
    metrics: dict = {"policy": result.policy}
    for section in SECTIONS:
        metrics.update(section(result))
    return metrics
