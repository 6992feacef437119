"""Reports: JSON round trip, the side-by-side table and the PNG figure."""

from __future__ import annotations

import json
import random

import pytest

from mlsched.model import Deadline, JobClass
from simulator.metrics import compute_metrics, gpu_utilization
from simulator.report import (
    ROWS,
    class_mean_jct_s,
    format_table,
    jct_cdf,
    output_png,
    plot,
    queue_cdf,
    underload_warning,
    utilization_series,
    write_json,
)
from simulator.types import JobRecord, SimResult, TraceJob

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def job(job_id: str, submit: float, job_class: JobClass = JobClass.BEST_EFFORT) -> TraceJob:
    deadlines = () if job_class is JobClass.BEST_EFFORT else (Deadline(100, 100),)
    return TraceJob(job_id, "u", submit, 10.0, 1, job_class=job_class, deadlines=deadlines)


def result(policy: str, ends: list[float | None]) -> SimResult:
    """Jobs j0, j1, ... submitted at 0, 10, 20, ..., started on submission; j0 is strict SLO."""
    records = [
        JobRecord(
            job=job(f"j{i}", 10 * i, JobClass.STRICT_SLO if i == 0 else JobClass.BEST_EFFORT),
            first_start_s=10 * i,
            end_s=end,
        )
        for i, end in enumerate(ends)
    ]
    makespan = max((e for e in ends if e is not None), default=0.0)
    return SimResult(
        policy=policy,
        total_gpus=2,
        records=records,
        utilization=[(0, 1), (10, 2), (makespan, 0)],
        decision_times_s=[0.001, 0.002],
        makespan_s=makespan,
        wall_s=0.25,
    )


@pytest.fixture
def results() -> dict[str, SimResult]:
    return {"fifo": result("fifo", [90, 300, None]), "unisched": result("unisched", [50, 200, 400])}


def test_json_round_trip(tmp_path, results):
    metrics = {name: compute_metrics(r) for name, r in results.items()}
    path = write_json(metrics, tmp_path / "out" / "metrics.json")
    assert json.loads(path.read_text()) == metrics
    assert list(json.loads(path.read_text())) == ["fifo", "unisched"]


def test_json_leads_with_the_speed_model(tmp_path, results):
    metrics = {name: compute_metrics(r) for name, r in results.items()}
    speed = {"kind": "table", "path": "/data/model_info.json"}
    path = write_json(metrics, tmp_path / "metrics.json", speed_model=speed)
    written = json.loads(path.read_text())
    assert list(written) == ["speed_model", "fifo", "unisched"]
    assert written == {"speed_model": speed, **metrics}
    with pytest.raises(ValueError, match="speed_model"):
        write_json({"speed_model": {}}, tmp_path / "clash.json", speed_model=speed)


def test_table_has_every_policy_and_metric_row(results):
    table = format_table({name: compute_metrics(r) for name, r in results.items()})
    lines = table.splitlines()
    assert lines[0].split() == ["metric", "fifo", "unisched", "better"]
    for label, _, _ in ROWS:
        assert any(line.startswith(label) for line in lines), label
    assert len(lines) == len(ROWS) + 2  # header and rule


def test_table_values_and_units(results):
    table = format_table({name: compute_metrics(r) for name, r in results.items()})
    width = max(len(label) for label, _, _ in ROWS)
    rows = {line[:width].strip(): line[width:].split() for line in table.splitlines()[2:]}
    # j0 (strict, deadline 100 s) finishes at 90 under fifo and at 50 under unisched.
    assert rows["R^slo (%)"] == ["0.00", "0.00", "lower"]  # a weighted miss rate (Eq. 15)
    # fifo JCT all: [90, 290] -> avg 190 s = 3.2 min; unisched: [50, 190, 380] -> 206.67 s
    assert rows["JCT avg all (min)"] == ["3.2", "3.4", "lower"]
    # no soft jobs: a dash in each column
    assert rows["JCT avg soft (min)"] == ["-", "-", "lower"]
    assert rows["Jobs completed"] == ["2", "3", "higher"]
    assert rows["Jobs total"] == ["3", "3"]  # a count, no score: no direction
    assert rows["Decision max (ms)"] == ["2.0", "2.0", "lower"]
    assert rows["Decision cycles"] == ["2", "2", "lower"]
    assert rows["Refused launches"] == ["0", "0", "lower"]


def test_table_shows_a_dash_for_missing_metrics():
    table = format_table({"old": {"policy": "old", "r_slo": 0.5}})
    assert "50.00" in table
    assert table.splitlines()[3].split()[-2:] == ["-", "lower"]  # deadline miss rate absent


def _run(queue_avg: float, jct_avg: float) -> dict:
    return {"queue_s": {"all": {"avg": queue_avg}}, "jct_s": {"all": {"avg": jct_avg}}}


def test_underload_warning_only_when_no_policy_made_jobs_wait():
    # 1 % of a 600 s JCT is 6 s: waits of 0 and 5.9 s in both runs -> warned, the larger named.
    warning = underload_warning({"fifo": _run(0.0, 600.0), "srtf": _run(5.9, 600.0)})
    assert warning is not None and "underloaded" in warning and "5.9 s" in warning
    assert underload_warning({"fifo": _run(0.0, 600.0), "srtf": _run(6.1, 600.0)}) is None
    assert underload_warning({"old": {"policy": "old"}}) is None  # nothing to judge by


def test_plot_writes_a_png(tmp_path, results):
    out = plot(results, tmp_path / "fig.png")
    assert out == tmp_path / "fig.png"
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def test_plot_into_a_directory(tmp_path, results):
    out = plot(results, tmp_path / "plots")
    assert out == output_png(tmp_path / "plots") == tmp_path / "plots" / "metrics.png"
    assert out.read_bytes().startswith(PNG_MAGIC)


def test_plot_copes_with_a_policy_that_finished_nothing(tmp_path):
    idle = SimResult("idle", 4, [JobRecord(job=job("a", 0))])
    assert plot({"idle": idle}, tmp_path / "idle.png").read_bytes().startswith(PNG_MAGIC)


def test_series_are_downsampled_and_keep_the_utilization_integral():
    rng = random.Random(7)
    times = sorted(rng.uniform(0, 100_000) for _ in range(10_000))
    samples = [(t, rng.randint(0, 8)) for t in times]
    records = [JobRecord(job=job(f"j{i}", 0), end_s=rng.uniform(1, 100_000)) for i in range(5000)]
    big = SimResult("p", 8, records, utilization=samples, makespan_s=100_000)
    starts, util = utilization_series(big)
    assert len(starts) == len(util) == 2000
    assert util.mean() == pytest.approx(gpu_utilization(big))  # equal bins: mean of means
    jcts, fraction = jct_cdf(big)
    assert len(jcts) == 2000
    assert fraction[-1] == 1.0 and jcts[-1] == max(r.jct_s for r in records)


def test_queue_cdf_and_class_means_by_hand(results):
    # unisched: j0 (strict) 0-50, j1 10-200, j2 20-400, each started on submission.
    waits, fraction = queue_cdf(results["unisched"])
    assert list(waits) == [0.0, 0.0, 0.0] and list(fraction) == pytest.approx([1 / 3, 2 / 3, 1])
    assert class_mean_jct_s(results["unisched"]) == {
        "strict": 50.0,
        "best_effort": pytest.approx((190 + 380) / 2),
    }
    # fifo: j2 never ends, so only j1 counts for best effort.
    assert class_mean_jct_s(results["fifo"]) == {"strict": 90.0, "best_effort": 290.0}
    late = SimResult("late", 4, [JobRecord(job=job("a", 0)), JobRecord(job("b", 10), 70.0)])
    waits, fraction = queue_cdf(late)  # a never started: the curve tops out at 1/2
    assert list(waits) == [60.0] and list(fraction) == [0.5]
