"""Elastic jobs in the simulator: loaders, resizes, quality metrics; SLAQ and fair complete a
slice of the ONES trace (issue 14)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from controller.policy import make_policy
from simulator.elastic import (
    BatchProfile,
    ElasticJobModel,
    critical_batch,
    load_ones,
    load_pollux,
    placement_key,
)
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics
from simulator.quality import normalised_loss_series, quality_metrics
from simulator.report import plot
from simulator.types import ElasticProfile, JobRecord, SimResult, TraceJob

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "pollux").is_dir(), reason="shared data absent")


def test_placement_keys_pack_4_gpu_nodes():
    assert [placement_key(g) for g in (1, 4, 6, 9, 16)] == ["1", "4", "24", "144", "4444"]


def test_quality_and_delay_by_hand():
    # loss 1 -> 0 linearly over the work; 100 s of work at one speed from t=0
    profile = ElasticProfile(1, 2, (1.0, 1.5), ((0.0, 1.0), (1.0, 0.0)))
    job = TraceJob("a", "", 0.0, 100.0, 1, elastic=profile)
    record = JobRecord(job, first_start_s=0.0, end_s=100.0, progress=[(0.0, 0.0), (100.0, 100.0)])
    metrics = quality_metrics(SimResult("p", 2, [record], makespan_s=100.0))
    assert metrics["quality_avg"] == pytest.approx(0.5, abs=1e-3)  # mean of t/100 over [0, 100]
    assert metrics["delay_90_s"]["avg"] == pytest.approx(90.0, abs=0.5)
    assert metrics["delay_95_s"]["median"] == pytest.approx(95.0, abs=0.5)


def test_a_resize_costs_suspend_and_resume_and_speeds_the_job_up():
    from controller.placement import TaskPlacement
    from controller.policy.base import Decision, Launch, Renew, Resize

    profile = ElasticProfile(1, 2, (1.0, 2.0), ((0.0, 1.0), (1.0, 0.0)))
    job = TraceJob("a", "", 0.0, 1000.0, 1, iterations=1000, elastic=profile)

    class Grow:
        """Launch on one GPU, grow to two at the first boundary, then renew."""

        name = "grow"

        def decide(self, snapshot):
            one = (TaskPlacement(0, "n000", (0,)),)
            two = (*one, TaskPlacement(1, "n000", (1,)))
            if snapshot.queued:
                return Decision(launch=(Launch("a", one, 100.0),))
            if snapshot.active and len(snapshot.active[0].placement) == 1:
                return Decision(resize=(Resize("a", two, 100.0),))
            return Decision(renew=(Renew("a", 100.0),))

    model = ElasticJobModel()
    result = Simulation([job], Grow(), ClusterShape(1, 2), model, SimConfig(lease_s=100.0)).run()
    record = result.records[0]
    assert record.resizes == 1
    # 100 s on 1 GPU (100 work s), then 4 + 20.71 s of overhead, then 900 work s at speed 2
    overhead = model.suspend_s(job, 1) + model.resume_s(job, 2)
    assert record.end_s == pytest.approx(100.0 + overhead + 450.0)


@needs_data
def test_loaders_read_the_shared_traces():
    ones = load_ones(DATA / "ones" / "trace_1.csv", DATA)
    pollux = load_pollux(DATA / "pollux" / "workloads" / "workload-1.csv", DATA)
    assert len(ones) == 400 and len(pollux) == 160
    for job in (*ones, *pollux):
        assert job.elastic is not None and job.duration_s > 0
        assert job.elastic.speedup[job.gpus - 1] == pytest.approx(1.0)
        assert job.elastic.loss[0][0] == 0.0 and job.elastic.loss[-1][0] == pytest.approx(1.0)


@needs_data
@pytest.mark.parametrize("policy", ["slaq", "fair", "ones", "optimus"])
def test_a_slice_of_the_ones_trace_completes(policy):
    jobs = load_ones(DATA / "ones" / "trace_1.csv", DATA)[:30]
    sim = Simulation(
        jobs,
        make_policy(policy),
        ClusterShape(4, 4),
        ElasticJobModel(),
        SimConfig(lease_s=60.0, cycle_s=10.0, check_invariants=True),
    )
    metrics = compute_metrics(sim.run())
    assert metrics["jobs_completed"] == 30
    assert 0.0 < metrics["quality_avg"] < 1.0
    assert metrics["refused_resizes"] == 0 and metrics["refused_launches"] == 0


# --- issue 15: the batch as the scheduler's decision ------------------------------------------


def _batch_job(critical: float = 100.0) -> TraceJob:
    """100 s of work at batch 100 on 1 GPU (1000 samples, 10 samples/s); twice as fast on 2."""
    profile = BatchProfile(
        1,
        2,
        (1.0, 2.0),
        ((0.0, 1.0), (1.0, 0.0)),
        batch=100,
        gpus=1,
        base_s=100.0,
        max_batch=400,
        samples=1000.0,
        critical=critical,
        accuracy=((0.0, 0.0), (1.0, 0.8)),
        epoch=200,
    )
    return TraceJob("a", "", 0.0, 100.0, 1, iterations=10, elastic=profile)


class _Scripted:
    """Launch on GPU 0 at t=0 (leases of 50 s); at t=50 send ``order``; then renew. Keeps
    the views it was shown."""

    name = "scripted"

    def __init__(self, order):
        self.order = order
        self.seen = []

    def decide(self, snapshot):
        from controller.placement import TaskPlacement
        from controller.policy.base import Decision, Launch, Renew

        self.seen.extend((snapshot.now, v) for v in snapshot.active)
        if snapshot.queued:
            return Decision(launch=(Launch("a", (TaskPlacement(0, "n000", (0,)),), 50.0),))
        if snapshot.now == 50.0:
            return Decision(resize=(self.order,))
        return Decision(renew=tuple(Renew(v.id, 50.0) for v in snapshot.active))


def _run(order, critical=100.0):
    policy = _Scripted(order)
    model = ElasticJobModel()
    result = Simulation(
        [_batch_job(critical)], policy, ClusterShape(1, 2), model, SimConfig(lease_s=50.0)
    ).run()
    return result, policy, model


def test_the_spec_lets_the_scheduler_pick_the_batch():
    from mlsched.model import BatchRule

    _, policy, _ = _run(_resize_order((0,), 100))
    spec = policy.seen[0][1].spec
    assert spec.batch_size == 100
    assert spec.elastic.batch is BatchRule.SCHEDULER and spec.elastic.max_batch_size == 400
    assert spec.elastic.linear_lr


def _resize_order(gpus, batch):
    from controller.placement import TaskPlacement
    from controller.policy.base import Resize

    return Resize(
        "a", tuple(TaskPlacement(i, "n000", (g,)) for i, g in enumerate(gpus)), 50.0, batch
    )


def test_a_batch_change_in_place_pauses_one_second_and_needs_more_samples():
    result, policy, _ = _run(_resize_order((0,), 200))
    record = result.records[0]
    assert record.resizes == 1
    # 50 work s by t=50; E(200) = 1000 (100 + 200) / (100 + 100) = 1500 samples, so speed
    # 1000 / 1500 = 2/3 from t=51: 50 / (2/3) = 75 s more
    assert record.end_s == pytest.approx(50.0 + 1.0 + 75.0)
    at_50 = next(v for t, v in policy.seen if t == 50.0)
    assert at_50.metrics["samples"] == pytest.approx(500.0)
    assert at_50.metrics["epoch"] == 2.0 and at_50.metrics["epoch_size"] == 200.0
    assert at_50.metrics["batch_size"] == 100.0
    assert at_50.metrics["throughput"] == pytest.approx(10.0)
    assert at_50.metrics["accuracy"] == pytest.approx(0.4)
    at_100 = next(v for t, v in policy.seen if t == 100.0)
    # 49 s at speed 2/3 since t=51: 32.67 work s = 0.3267 of 1500 samples
    assert at_100.metrics["samples"] == pytest.approx(500.0 + 49 * (2 / 3) / 100 * 1500)
    assert at_100.metrics["batch_size"] == 200.0


def test_a_gpu_count_change_pauses_for_checkpoint_and_restart():
    result, _, model = _run(_resize_order((0, 1), 200))
    job = result.records[0].job
    pause = model.suspend_s(job, 1) + model.resume_s(job, 2)
    assert pause > 20.0  # ONES §4.3: more than 20 s
    # 2 GPUs at batch 200: twice the throughput, E(200) = 1.5 E(100): speed 4/3
    assert result.records[0].end_s == pytest.approx(50.0 + pause + 50.0 * 3 / 4)


def test_a_batch_beyond_the_limit_or_below_one_per_gpu_is_refused():
    for batch in (401, 1):
        result, _, _ = _run(_resize_order((0, 1), batch))
        assert result.refused_resizes == 1 and result.records[0].resizes == 0
        assert result.records[0].suspensions == 1  # its lease, neither renewed nor resized


def test_without_a_critical_batch_the_samples_do_not_grow():
    result, _, _ = _run(_resize_order((0,), 200), critical=math.inf)
    assert result.records[0].end_s == pytest.approx(50.0 + 1.0 + 50.0)


@needs_data
def test_critical_batches_fitted_to_the_pollux_curves():
    # samples to 97 % of the worst final metric grow with the batch for every application:
    # cifar10 1.95 M at 128 against 5.92 M at 4096 gives B_crit near 1,800 (fitted: ~1,970)
    assert 1500 < critical_batch(DATA, "cifar10") < 2500
    assert 10000 < critical_batch(DATA, "imagenet") < 20000
    job = load_ones(DATA / "ones" / "trace_1.csv", DATA)[0]
    profile = job.elastic
    assert isinstance(profile, BatchProfile) and profile.batch == 512
    assert profile.max_batch == 512 * 16  # lr 5e-4 scaled linearly up to max_lr 0.008
    assert profile.speed(job.gpus, profile.batch) == pytest.approx(1.0)


def test_normalised_loss_series_by_hand():
    # two jobs, loss 1 -> 0 linearly over their work: "a" over [0, 100], "b" over [50, 150]
    profile = ElasticProfile(1, 2, (1.0, 1.5), ((0.0, 1.0), (1.0, 0.0)))
    records = [
        JobRecord(
            TraceJob(name, "", start, 100.0, 1, elastic=profile),
            first_start_s=start,
            end_s=start + 100.0,
            progress=[(start, 0.0), (start + 100.0, 100.0)],
        )
        for name, start in (("a", 0.0), ("b", 50.0))
    ]
    times, loss = normalised_loss_series(SimResult("p", 2, records, makespan_s=150.0))
    assert times[0] == 0.0 and times[-1] < 150.0  # no job is present at the makespan
    at = lambda t: float(np.interp(t, times, loss))  # noqa: E731
    assert at(25.0) == pytest.approx(0.75, abs=1e-3)  # "a" alone, a quarter done
    assert at(75.0) == pytest.approx((0.25 + 0.75) / 2, abs=1e-3)  # both present
    assert at(125.0) == pytest.approx(0.25, abs=1e-3)  # "b" alone, three quarters done


def test_the_plot_shows_normalised_loss_when_jobs_have_curves(tmp_path: Path):
    profile = ElasticProfile(1, 2, (1.0, 1.5), ((0.0, 1.0), (1.0, 0.0)))
    job = TraceJob("a", "", 0.0, 100.0, 1, elastic=profile)
    record = JobRecord(job, first_start_s=0.0, end_s=100.0, progress=[(0.0, 0.0), (100.0, 100.0)])
    with_curve = plot({"p": SimResult("p", 2, [record], makespan_s=100.0)}, tmp_path / "q.png")
    plain = JobRecord(TraceJob("b", "", 0.0, 100.0, 1), first_start_s=0.0, end_s=100.0)
    without = plot({"p": SimResult("p", 2, [plain], makespan_s=100.0)}, tmp_path / "n.png")
    height = lambda png: int.from_bytes(png.read_bytes()[20:24], "big")  # noqa: E731 (IHDR)
    assert height(with_curve) > height(without)  # the fifth panel: normalised loss over time
