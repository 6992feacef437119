"""The ``pollux`` policy through the real simulator path on a slice of a Pollux workload, and
the gradient-noise-scale report it reads (docs/pollux.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.policy.pollux import PolluxPolicy
from simulator.elastic import ElasticJobModel, batch_metrics, critical_batch, load_pollux
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
needs_data = pytest.mark.skipif(not (DATA / "pollux").is_dir(), reason="shared data absent")


@needs_data
def test_batch_jobs_report_their_noise_scale():
    job = load_pollux(DATA / "pollux" / "workloads" / "workload-1.csv", DATA)[0]
    metrics = batch_metrics(job.elastic, {}, 0.5, 10.0, job.elastic.batch, 2)
    assert metrics["grad_noise_scale"] == critical_batch(DATA, job.model)


@needs_data
def test_pollux_completes_a_slice_of_a_pollux_workload():
    jobs = load_pollux(DATA / "pollux" / "workloads" / "workload-2.csv", DATA)[:30]
    policy = PolluxPolicy(population=16, generations=8)  # a smaller search: a faster test
    sim = Simulation(
        jobs, policy, ClusterShape(4, 4), ElasticJobModel(), SimConfig(check_invariants=True)
    )
    result = sim.run()
    metrics = compute_metrics(result)
    assert metrics["jobs_completed"] == 30
    assert metrics["refused_resizes"] == 0 and metrics["refused_launches"] == 0
    assert policy.rounds > 0
    assert sum(r.resizes for r in result.records) > 0  # it did reallocate
