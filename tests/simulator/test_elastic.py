"""Elastic jobs in the simulator: loaders, resizes, quality metrics; SLAQ and fair complete a
slice of the ONES trace (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.policy import make_policy
from simulator.elastic import ElasticJobModel, load_ones, load_pollux, placement_key
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics
from simulator.quality import quality_metrics
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
@pytest.mark.parametrize("policy", ["slaq", "fair"])
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
