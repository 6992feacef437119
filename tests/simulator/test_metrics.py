"""Metrics on hand-made results; every expected value is worked out by hand in the comments."""

from __future__ import annotations

import json

import pytest

from mlsched.model import Deadline, JobClass
from simulator.metrics import (
    busy_gpu_seconds,
    compute_metrics,
    cumulative_busy,
    gpu_utilization,
    percentile,
    summary,
)
from simulator.types import JobRecord, SimResult, TraceJob

STRICT = JobClass.STRICT_SLO
SOFT = JobClass.SOFT_SLO
BEST_EFFORT = JobClass.BEST_EFFORT


def record(
    job_id: str,
    job_class: JobClass,
    submit: float,
    start: float | None,
    end: float | None,
    deadlines: tuple[tuple[float, float], ...] = (),
    suspensions: int = 0,
) -> JobRecord:
    job = TraceJob(
        id=job_id,
        user="u",
        submit_s=submit,
        duration_s=10.0,
        gpus=1,
        job_class=job_class,
        deadlines=tuple(Deadline(s, r) for s, r in deadlines),
    )
    return JobRecord(job=job, first_start_s=start, end_s=end, suspensions=suspensions)


def sample_result() -> SimResult:
    """Five jobs on a 4-GPU cluster (JCT = end - submit, queue = start - submit):

    strict-met    submit 0,  start 0,  end 80:  JCT 80 <= 100, loss 0,           hit
    strict-miss   submit 10, start 30, end 160: JCT 150 > 100, loss 1,           miss
    soft-second   submit 20, start 50, end 220: JCT 200 meets only the 300 s deadline
                  (deadlines listed out of order), V_got 40 of V_max 100: loss 0.6, miss
    soft-never    submit 30, start 50, never ends:                   loss 1,   miss
    best-effort   submit 0,  start 0,  end 40:  JCT 40; not an SLO job
    """
    records = [
        record("strict-met", STRICT, 0, 0, 80, ((100, 100),)),
        record("strict-miss", STRICT, 10, 30, 160, ((100, 100),), suspensions=2),
        record("soft-second", SOFT, 20, 50, 220, ((300, 40), (100, 100)), suspensions=1),
        record("soft-never", SOFT, 30, 50, None, ((100, 100), (200, 50)), suspensions=3),
        record("best-effort", BEST_EFFORT, 0, 0, 40),
    ]
    # Busy GPUs: 2 on [0,40), 1 on [40,50), 3 on [50,80), 2 on [80,160), 1 on [160,220), then 0.
    utilization = [(0, 2), (40, 1), (50, 3), (80, 2), (160, 1), (220, 0)]
    return SimResult(
        policy="fifo",
        total_gpus=4,
        records=records,
        utilization=utilization,
        decision_times_s=[0.1, 0.2, 0.3, 0.4],
        makespan_s=220.0,
        wall_s=1.5,
    )


def test_r_slo_averages_lost_reward_over_every_slo_job():
    # (0 + 1 + 0.6 + 1) / 4
    metrics = compute_metrics(sample_result())
    assert metrics["r_slo"] == pytest.approx(0.65)
    assert metrics["slo_jobs"] == 4


def test_deadline_miss_rate_counts_late_and_unfinished_slo_jobs():
    # strict-miss, soft-second (late for its first deadline) and soft-never: 3 of 4
    assert compute_metrics(sample_result())["deadline_miss_rate"] == pytest.approx(0.75)


def test_finishing_exactly_at_a_deadline_meets_it():
    result = SimResult("p", 1, [record("j", STRICT, 5, 5, 105, ((100, 100),))], makespan_s=105)
    metrics = compute_metrics(result)
    assert metrics["r_slo"] == 0.0
    assert metrics["deadline_miss_rate"] == 0.0


def test_soft_job_earning_its_first_deadline_loses_nothing_even_if_a_later_reward_is_lower():
    # Deadlines 100 s (reward 100) and 300 s (reward 40); JCT 60 earns the full 100.
    result = SimResult("p", 1, [record("j", SOFT, 0, 0, 60, ((300, 40), (100, 100)))])
    assert compute_metrics(result)["r_slo"] == 0.0


def test_v_max_is_the_highest_reward_not_the_first():
    # Rewards 50 at 100 s, 80 at 200 s; JCT 150 earns 80 of 80 -> loss 0, but it missed the
    # first deadline.
    result = SimResult("p", 1, [record("j", SOFT, 0, 0, 150, ((100, 50), (200, 80)))])
    metrics = compute_metrics(result)
    assert metrics["r_slo"] == 0.0
    assert metrics["deadline_miss_rate"] == 1.0


def test_slo_jobs_without_deadlines_are_not_scored():
    result = SimResult("p", 1, [record("j", STRICT, 0, 0, 10), record("b", BEST_EFFORT, 0, 0, 5)])
    metrics = compute_metrics(result)
    assert (metrics["r_slo"], metrics["deadline_miss_rate"], metrics["slo_jobs"]) == (None, None, 0)


def test_jct_stats_over_finished_jobs_per_class():
    jct = compute_metrics(sample_result())["jct_s"]
    # all finished: [40, 80, 150, 200]; median (80+150)/2; p95 at rank 0.95*3 = 2.85:
    # 150 + 0.85 * (200 - 150) = 192.5
    assert jct["all"] == {"avg": 117.5, "median": 115.0, "p95": pytest.approx(192.5), "count": 4}
    # strict: [80, 150]; p95 at rank 0.95: 80 + 0.95 * 70 = 146.5
    assert jct["strict"] == {"avg": 115.0, "median": 115.0, "p95": pytest.approx(146.5), "count": 2}
    # soft: only soft-second finished
    assert jct["soft"] == {"avg": 200.0, "median": 200.0, "p95": 200.0, "count": 1}
    assert jct["best_effort"] == {"avg": 40.0, "median": 40.0, "p95": 40.0, "count": 1}


def test_queue_stats_over_started_jobs():
    queue = compute_metrics(sample_result())["queue_s"]
    # [0, 20, 30, 20, 0] -> sorted [0, 0, 20, 20, 30]; p95 at rank 3.8: 20 + 0.8 * 10 = 28
    assert queue["all"] == {"avg": 14.0, "median": 20.0, "p95": pytest.approx(28.0), "count": 5}
    assert queue["soft"] == {"avg": 25.0, "median": 25.0, "p95": pytest.approx(29.5), "count": 2}


def test_a_class_with_no_finished_job_has_null_stats():
    result = SimResult("p", 1, [record("j", SOFT, 0, None, None, ((10, 1),))])
    metrics = compute_metrics(result)
    empty = {"avg": None, "median": None, "p95": None, "count": 0}
    assert all(stats == empty for stats in metrics["jct_s"].values())
    assert metrics["queue_s"]["soft"] == empty
    assert metrics["r_slo"] == 1.0


def test_utilization_is_the_time_weighted_busy_fraction():
    # Area: 2*40 + 1*10 + 3*30 + 2*80 + 1*60 = 400 GPU-s over 4 GPUs * 220 s.
    result = sample_result()
    assert busy_gpu_seconds(result.utilization, 0, 220) == pytest.approx(400)
    assert gpu_utilization(result) == pytest.approx(400 / 880)
    assert compute_metrics(result)["gpu_utilization"] == pytest.approx(5 / 11)


def test_utilization_window_starts_at_first_submission():
    # Samples before the first submission (t=100) are clipped; the last level holds to makespan.
    jobs = [record("a", BEST_EFFORT, 100, 100, 200), record("b", BEST_EFFORT, 150, 150, 300)]
    result = SimResult("p", 2, jobs, utilization=[(0, 2), (120, 1), (250, 2)], makespan_s=300)
    # [100,120): 2 -> 40; [120,250): 1 -> 130; [250,300): 2 -> 100; total 270 of 2 * 200
    assert gpu_utilization(result) == pytest.approx(270 / 400)


def test_step_integral_handles_unsorted_samples_ties_and_gaps():
    # Listed out of order; two samples at t=10 (the later-listed 3 wins); nothing busy before 5.
    samples = [(10, 1), (5, 2), (10, 3), (20, 0)]
    assert busy_gpu_seconds(samples, 0, 30) == pytest.approx(2 * 5 + 3 * 10)
    assert busy_gpu_seconds(samples, 7, 15) == pytest.approx(2 * 3 + 3 * 5)
    assert busy_gpu_seconds([], 0, 10) == 0.0
    assert list(cumulative_busy(samples, [0, 5, 10, 20, 25])) == [0, 0, 10, 40, 40]


def test_preemptions_completion_and_run_metrics():
    metrics = compute_metrics(sample_result())
    assert metrics["preemptions_per_job"] == pytest.approx(6 / 5)  # 0 + 2 + 1 + 3 + 0
    assert (metrics["jobs_completed"], metrics["jobs_total"]) == (4, 5)
    assert metrics["makespan_s"] == 220.0
    assert metrics["wall_s"] == 1.5
    assert metrics["policy"] == "fifo"
    # [0.1, 0.2, 0.3, 0.4]: p50 0.25; p95 at rank 2.85: 0.3 + 0.85 * 0.1 = 0.385
    decisions = metrics["decision_time_s"]
    assert decisions == {
        "p50": pytest.approx(0.25),
        "p95": pytest.approx(0.385),
        "max": pytest.approx(0.4),
        "cycles": 4,
    }
    assert metrics["refused_launches"] == 0


def test_refused_launches_are_reported():
    result = sample_result()
    result.refused_launches = 3
    assert compute_metrics(result)["refused_launches"] == 3


def test_an_empty_result_gives_nulls_not_errors():
    metrics = compute_metrics(SimResult("idle", 8, []))
    assert metrics["r_slo"] is None
    assert metrics["gpu_utilization"] is None
    assert metrics["preemptions_per_job"] is None
    assert metrics["decision_time_s"] == {"p50": None, "p95": None, "max": None, "cycles": 0}
    assert (metrics["jobs_completed"], metrics["jobs_total"]) == (0, 0)


def test_metrics_are_json_ready():
    metrics = compute_metrics(sample_result())
    assert json.loads(json.dumps(metrics, allow_nan=False)) == metrics


def test_percentile_is_linear_interpolation():
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)  # rank 3.8
    assert summary([]) == {"avg": None, "median": None, "p95": None, "count": 0}
