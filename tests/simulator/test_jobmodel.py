"""The trace job model: table speeds, Eq. 2, suspend/resume costs, stopping, learning curves."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.curves import DEFAULT_CURVES, CurveParams, fit_curve, fit_curve_shapes
from simulator.jobmodel import SpeedModel, TraceJobModel, UnknownModel, load_model_info
from simulator.trace import TraceError
from simulator.types import JobModel, TraceJob

TABLE = {
    "m": {"2": {"1": 1.0, "2": 0.8}, "4": {"1": 1.0, "2": 0.6, "4": 0.5}},
    "w": {"4": {"1": 1.0, "2": 0.7}},
    "fast": {"2": {"1": 1.0, "2": 1.02}},
}


def data_dir() -> Path:
    env = os.environ.get("MLSCHED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    return path.resolve()


def shared_file(relative: str) -> Path:
    path = data_dir() / relative
    if not path.is_file():
        pytest.skip(f"shared data file {path} not found (set MLSCHED_DATA to the data directory)")
    return path


@pytest.fixture
def model_info(tmp_path) -> Path:
    path = tmp_path / "model_info.json"
    path.write_text(json.dumps(TABLE))
    return path


def job(gpus: int, model: str = "m", *, id: str = "j", perf: bool = False) -> TraceJob:
    return TraceJob(id, "u", 0.0, 1000.0, gpus, model, performance_based=perf)


def test_is_a_job_model(model_info):
    model: JobModel = TraceJobModel.from_model_info(model_info)  # type-checks statically
    for name in ("work_s", "speed", "suspend_s", "resume_s", "metric_at"):
        assert callable(getattr(model, name))


# --- speed: the table at the requested count ---------------------------------------------------


def test_table_speeds_at_requested_count(model_info):
    model = TraceJobModel.from_model_info(model_info)
    assert model.models == ("fast", "m", "w")
    assert model.speed(job(4), 4, 1) == 1.0
    assert model.speed(job(4), 4, 2) == 0.6
    assert model.speed(job(4), 4, 4) == 0.5
    assert model.speed(job(4), 4, 3) == 0.5  # not in the table: the nearest larger (4 nodes)
    assert model.speed(job(4, "w"), 4, 4) == 0.7  # beyond the table: the worst entry
    assert model.speed(job(2), 2, 2) == 0.8
    assert model.speed(job(2, "fast"), 2, 2) == 1.02  # the table's value, even above 1


def test_unknown_model_and_default(model_info):
    model = TraceJobModel.from_model_info(model_info)
    with pytest.raises(UnknownModel, match=r"unknown model 'bert'.*valid models: fast, m, w"):
        model.speed(job(2, "bert"), 2, 2)
    with pytest.raises(UnknownModel, match="unknown model ''"):
        model.speed(job(4, ""), 4, 2)
    assert model.speed(job(2, "bert"), 2, 1) == 1.0  # one node needs no table
    with pytest.raises(UnknownModel, match="'bert'"):
        model.check_jobs([job(2, "m"), job(2, "bert")])
    model.check_jobs([job(2, "m"), job(4, "w")])
    fallback = TraceJobModel.from_model_info(model_info, default_model="m")
    assert fallback.speed(job(4, "bert"), 4, 2) == 0.6
    assert fallback.speed(job(4, ""), 4, 4) == 0.5
    with pytest.raises(UnknownModel, match="valid models: fast, m, w"):
        TraceJobModel.from_model_info(model_info, default_model="bert")


def test_invalid_allocations(model_info):
    model = TraceJobModel.from_model_info(model_info)
    for gpus, nodes in [(0, 1), (2, 0), (2, 3)]:
        with pytest.raises(ValueError, match="need gpus >= 1"):
            model.speed(job(2), gpus, nodes)
    with pytest.raises(ValueError, match="requests 0 GPUs"):
        model.speed(job(0), 2, 2)


# --- speed: Eq. 2 when the GPU count changes ---------------------------------------------------


def test_eq2_ratios_by_hand(model_info):
    model = TraceJobModel.from_model_info(model_info, intra_node_comm=0.1)
    # Requested 2 (in the table): T_iter(2, 1) = 1 + 1 * 0.1 = 1.1 (T_comp = 1);
    # the entry 0.8 at 2 nodes gives T2 = (1.1 / 0.8 - 1) / 1 = 0.375.
    assert model.inter_node_comm_for("m", 2) == {2: pytest.approx(0.375)}
    # 4 GPUs on one node: each computes 2/4 of the batch, T_iter = 0.5 + 3 * 0.1 = 0.8.
    assert model.speed(job(2), 4, 1) == pytest.approx(1.1 / 0.8)
    # 4 GPUs on two nodes: T_iter = 0.5 + 3 * 0.375 = 1.625.
    assert model.speed(job(2), 4, 2) == pytest.approx(1.1 / 1.625)
    # 1 GPU: T_iter = 2 / 1 = 2.
    assert model.speed(job(2), 1, 1) == pytest.approx(0.55)
    # 4 GPUs on 4 nodes: no entry beyond 2 nodes at the requested count -> the worst T2.
    assert model.speed(job(2), 4, 4) == pytest.approx(1.1 / 1.625)

    # Requested 1 (not in the table): the nearest count, 2, gives T2 = 0.375.
    assert model.speed(job(1), 2, 1) == pytest.approx(1 / (0.5 + 0.1))
    assert model.speed(job(1), 2, 2) == pytest.approx(1 / (0.5 + 0.375))

    # Requested 3: 2 and 4 are equally near, the larger (4) is used:
    # T_iter(4, 1) = 1 + 3 * 0.1 = 1.3, entry 0.6 at 2 nodes: T2 = (1.3 / 0.6 - 1) / 3 = 7/18,
    # entry 0.5 at 4 nodes: T2 = (1.3 / 0.5 - 1) / 3 = 1.6 / 3.
    t2 = model.inter_node_comm_for("m", 3)
    assert t2 == {2: pytest.approx(7 / 18), 4: pytest.approx(1.6 / 3)}
    assert model.speed(job(3), 3, 1) == 1.0
    assert model.speed(job(3), 3, 2) == pytest.approx(1.2 / (1 + 2 * 7 / 18))
    assert model.speed(job(3), 3, 3) == pytest.approx(1.2 / (1 + 2 * 1.6 / 3))  # next larger: 4
    assert model.speed(job(3), 6, 2) == pytest.approx(1.2 / (0.5 + 5 * 7 / 18))


def test_eq2_reproduces_the_table_at_the_requested_count(model_info):
    model = TraceJobModel.from_model_info(model_info, intra_node_comm=0.05)
    for requested, entries in ((2, {2: 0.8}), (4, {2: 0.6, 4: 0.5})):
        base = 1 + (requested - 1) * 0.05
        for nodes, s in entries.items():
            t2 = model.inter_node_comm_for("m", requested)[nodes]
            assert base / (1 + (requested - 1) * t2) == pytest.approx(s)


def test_eq2_without_a_table():
    model = TraceJobModel(intra_node_comm=0.1, inter_node_comm=0.5)
    any_model = job(2, "anything")
    assert model.speed(any_model, 2, 1) == 1.0
    assert model.speed(any_model, 2, 2) == pytest.approx(1.1 / (1 + 0.5))
    assert model.speed(any_model, 4, 1) == pytest.approx(1.1 / (0.5 + 0.3))
    assert model.speed(any_model, 4, 4) == pytest.approx(1.1 / (0.5 + 1.5))
    assert model.speed(job(1, ""), 1, 1) == 1.0
    defaults = TraceJobModel()
    assert (defaults.intra_node_comm, defaults.inter_node_comm) == (0.075, 0.12)


def test_speed_model_names_the_table_or_eq2(model_info, tmp_path, monkeypatch):
    # A relative path is reported absolute: the table's file as the run read it.
    monkeypatch.chdir(tmp_path)
    table = TraceJobModel.from_model_info("model_info.json").speed_model
    assert table == SpeedModel("table", str(model_info.resolve()))
    assert table.describe() == f"model_info table {model_info.resolve()}"
    assert table.to_json() == {"kind": "table", "path": str(model_info.resolve())}
    in_memory = TraceJobModel(TABLE).speed_model
    assert in_memory == SpeedModel("table", None)
    assert in_memory.describe() == "model_info table (given in memory)"
    defaults = TraceJobModel().speed_model
    assert defaults == SpeedModel("eq2-defaults", None)
    assert defaults.describe() == "UniSched Eq. 2 defaults (T1 = 0.075, T2 = 0.12)"
    assert defaults.to_json() == {"kind": "eq2-defaults", "path": None}
    # Other communication costs are not the defaults.
    assert TraceJobModel(inter_node_comm=0.5).speed_model == SpeedModel("eq2", None)


def test_negative_t2_is_clamped(model_info):
    model = TraceJobModel.from_model_info(model_info, intra_node_comm=0.0)
    # 1.02 at 2 nodes would mean T2 < 0; away from the requested count it counts as 0.
    assert model.inter_node_comm_for("fast", 2) == {2: 0.0}
    assert model.speed(job(2, "fast"), 4, 2) == pytest.approx(1 / 0.5)


def test_shared_model_info_speeds():
    path = shared_file("chronus_philly/model_info.json")
    table = json.loads(path.read_text())
    model = TraceJobModel.from_model_info(path)
    for name, by_gpus in table.items():
        for gpus, by_nodes in by_gpus.items():
            for nodes, speed in by_nodes.items():
                assert model.speed(job(int(gpus), name), int(gpus), int(nodes)) == speed
    assert model.speed(job(8, "alexnet"), 8, 8) == table["alexnet"]["8"]["4"]  # worst entry


def test_model_info_validation(tmp_path):
    bad = [
        ({"m": {"x": {"1": 1.0}}}, "model 'm': GPU count 'x': 'x' is not a positive integer"),
        ({"m": {"2": {"3": 0.5}}}, "model 'm': GPU count '2': 3 nodes for 2 GPUs"),
        ({"m": {"2": {"2": -1}}}, "nodes 2: speed -1 is not positive"),
        ({"m": {"2": {"2": "fast"}}}, "nodes 2: speed 'fast' is not a number"),
        ({}, "expected a non-empty mapping"),
    ]
    path = tmp_path / "info.json"
    for table, message in bad:
        path.write_text(json.dumps(table))
        with pytest.raises(ValueError) as e:
            load_model_info(path)
        assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    path.write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_model_info(path)
    assert load_model_info(_write(tmp_path)) == {"m": {2: {1: 1.0, 2: 0.5}}}


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps({"m": {"2": {"2": 0.5}}}))  # one node implied: 1.0
    return path


# --- suspension and resumption -----------------------------------------------------------------


def test_suspend_resume_overheads():
    model = TraceJobModel()
    assert model.suspend_s(job(1), 1) == model.suspend_s(job(16), 16) == 4.0
    assert model.resume_s(job(2), 2) == pytest.approx(20.0 + 2 * 5 / 14)
    assert model.resume_s(job(16), 16) - model.resume_s(job(2), 2) == pytest.approx(5.0)
    custom = TraceJobModel(suspend_s=1.0, resume_base_s=3.0, resume_per_gpu_s=0.5)
    assert custom.suspend_s(job(8), 8) == 1.0
    assert custom.resume_s(job(8), 8) == 7.0
    with pytest.raises(ValueError, match="resume_base_s must be a non-negative number"):
        TraceJobModel(resume_base_s=-1.0)


# --- stopping, targets and metrics -------------------------------------------------------------


def test_work_of_iteration_based_jobs_is_the_duration():
    model = TraceJobModel()
    assert model.work_s(job(2)) == 1000.0
    assert model.stop_fraction(job(2)) == 1.0
    assert model.target_metric(job(2)) is None


def test_performance_based_jobs_stop_early_deterministically():
    model = TraceJobModel()
    fractions = []
    for i in range(2000):
        j = job(1, id=f"job-{i}", perf=True)
        work = model.work_s(j)
        assert 0.69 * 1000.0 <= work <= 0.95 * 1000.0
        fractions.append(work / 1000.0)
        assert TraceJobModel().work_s(j) == work  # same id, same answer
    # Uniform on [0.69, 0.95]: mean 0.82.
    assert statistics.mean(fractions) == pytest.approx(0.82, abs=0.01)
    other_seed = TraceJobModel(seed=1)
    assert [other_seed.work_s(job(1, id=f"job-{i}", perf=True)) for i in range(20)] != [
        f * 1000.0 for f in fractions[:20]
    ]
    narrow = TraceJobModel(stop_fraction_range=(0.5, 0.5))
    assert narrow.work_s(job(1, perf=True)) == 500.0
    with pytest.raises(ValueError, match="stop_fraction_range"):
        TraceJobModel(stop_fraction_range=(0.0, 0.5))


def test_metric_at_follows_the_job_curve():
    curve = CurveParams(0.8, 0.6, 4.0)
    model = TraceJobModel(curves=[curve], stop_fraction_range=(0.5, 0.5))
    iteration = job(1)
    assert model.curve(iteration) == curve
    assert model.metric_at(iteration, 0.0) == pytest.approx(0.2)
    assert model.metric_at(iteration, 0.25) == pytest.approx(0.8 - 0.6 * math.exp(-1.0))
    assert model.metric_at(iteration, 1.0) == pytest.approx(0.8 - 0.6 * math.exp(-4.0))
    assert model.metric_at(iteration, 1.5) == model.metric_at(iteration, 1.0)  # clipped
    perf = job(1, perf=True)
    # The fraction is of work_s, which is half the duration here.
    target = 0.8 - 0.6 * math.exp(-2.0)
    assert model.target_metric(perf) == pytest.approx(target)
    assert model.metric_at(perf, 1.0) == pytest.approx(target)
    assert model.metric_at(perf, 0.5) == pytest.approx(0.8 - 0.6 * math.exp(-1.0))
    assert curve.fraction_reaching(target) == pytest.approx(0.5)


def test_curves_are_spread_over_jobs():
    model = TraceJobModel()
    picked = {model.curve(job(1, id=str(i))) for i in range(500)}
    assert picked == set(DEFAULT_CURVES)
    for i in range(200):
        j = replace(job(1, id=str(i)), performance_based=True)
        values = [model.metric_at(j, f / 10) for f in range(11)]
        assert values == sorted(values)
        assert values[0] >= 0.0 and values[-1] <= 1.0
        assert values[-1] == pytest.approx(model.target_metric(j))
    with pytest.raises(ValueError, match="curves must not be empty"):
        TraceJobModel(curves=[])


# --- curve fitting -----------------------------------------------------------------------------


def test_fit_recovers_a_synthetic_curve():
    truth = CurveParams(0.8, 0.6, 4.0)
    xs = [i / 30 for i in range(1, 31)]
    fitted = fit_curve(xs, [truth(x) for x in xs])
    assert (fitted.a, fitted.b, fitted.c) == pytest.approx((0.8, 0.6, 4.0), abs=1e-6)
    noise = random.Random(0)
    noisy = fit_curve(xs, [truth(x) + noise.gauss(0.0, 0.005) for x in xs])
    assert (noisy.a, noisy.b, noisy.c) == pytest.approx((0.8, 0.6, 4.0), rel=0.05)
    with pytest.raises(ValueError, match="at least 3"):
        fit_curve([0.1, 0.2], [0.1, 0.2])


def test_curve_inverse_by_hand():
    curve = CurveParams(0.9, 0.5, 2.0)
    # 0.9 - 0.5 exp(-2x) = 0.7  <=>  exp(-2x) = 0.4  <=>  x = ln(2.5) / 2
    assert curve.fraction_reaching(0.7) == pytest.approx(math.log(2.5) / 2)
    assert curve.fraction_reaching(0.3) == 0.0
    assert curve.fraction_reaching(0.95) is None


def test_fit_curve_shapes_from_a_history_file(tmp_path):
    first, second = CurveParams(0.75, 0.5, 3.0), CurveParams(0.6, 0.45, 6.0)
    lines = ["id,epoch,epoch_size,loss,acc"]
    for job_id, curve, epochs in ((0, first, 20), (1, second, 10)):
        lines += [f"{job_id},{e},100,1.0,{curve(e / epochs)}" for e in range(1, epochs + 1)]
    lines += [f"2,{e},100,1.0,0.1" for e in range(1, 11)]  # stuck at chance: left out
    lines += [f"3,{e},100,1.0,{0.1 * e}" for e in range(1, 4)]  # three epochs: left out
    path = tmp_path / "history.csv"
    path.write_text("\n".join(lines) + "\n")
    fitted = fit_curve_shapes(path)
    assert len(fitted) == 2
    for got, want in zip(fitted, (first, second), strict=True):
        assert (got.a, got.b, got.c) == pytest.approx((want.a, want.b, want.c), abs=1e-4)
    from_file = TraceJobModel.from_model_info(_write(tmp_path), history=path)
    assert from_file.curves == tuple(fitted)


def test_fit_curve_shapes_errors(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text("id,epoch\n0,1\n")
    with pytest.raises(TraceError, match=r"history.csv:1: missing column\(s\) 'acc'"):
        fit_curve_shapes(path)
    path.write_text("id,epoch,acc\n0,1,0.5\n0,2,high\n")
    with pytest.raises(TraceError, match=r"history.csv:3: column 'acc': expected a number"):
        fit_curve_shapes(path)


def test_default_curves_come_from_the_ones_history():
    path = shared_file("ones/job_history.csv")
    fitted = fit_curve_shapes(path)
    assert len(fitted) == len(DEFAULT_CURVES) == 14
    for got, built_in in zip(fitted, DEFAULT_CURVES, strict=True):
        assert (got.a, got.b, got.c) == pytest.approx(
            (built_in.a, built_in.b, built_in.c), abs=2e-3
        )
