"""The UniSched tests' job views and simulated cases, built one way for every module (test
modules cannot import each other).

``unisched_job(name, ...)`` (fixture ``make_job``) is a job of ``IterationStop(1000)`` that has
been profiled as the real system profiles it (one 2-GPU one-node sample: T_iter 1.1 s, T_comp
1 s) and has a measured suspend + resume overhead of 10 s.

Fixture ``sim`` runs trace jobs through the simulator with UniSched Eq. 2's default costs and
a 300 s BE lease: ``sim.slo(name, gpus, duration_s, deadline_s)`` is a strict-SLO job
submitted at 0; ``sim.run(policy, jobs, shape)`` gives the metrics and the records by job id;
``sim.r_slo(...)`` only R^slo."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest

from controller.policy import make_policy
from controller.policy.base import JobView
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState, SpeedSample
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.jobmodel import TraceJobModel
from simulator.metrics import compute_metrics
from simulator.types import TraceJob

ONE_NODE_PROFILE = (SpeedSample(2, 1, 1.1, 1.0),)


def unisched_job(
    name: str,
    job_class: JobClass = JobClass.STRICT_SLO,
    deadline: float = 1900.0,
    gpus: int = 6,
    samples: tuple[SpeedSample, ...] = ONE_NODE_PROFILE,
    **kw,
) -> JobView:
    deadlines = () if job_class is JobClass.BEST_EFFORT else (Deadline(deadline, 100.0),)
    spec = JobSpec(
        name=name,
        command=("train",),
        gpus=gpus,
        stopping=IterationStop(1000),
        job_class=job_class,
        deadlines=deadlines,
    )
    values = dict(
        id=name,
        user="u",
        spec=spec,
        state=JobState.PENDING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1,
        suspensions=0,
        speed_samples=samples,
        sr_overhead_s=10.0,
    )
    values.update(kw)
    return JobView(**values)


@pytest.fixture
def make_job() -> Callable[..., JobView]:
    return unisched_job


SIM_CONFIG = SimConfig(lease_s=300.0, cycle_s=60.0, check_invariants=True)


def _slo(name: str, gpus: int, duration_s: float, deadline_s: float) -> TraceJob:
    return TraceJob(
        name,
        "u",
        0.0,
        duration_s,
        gpus,
        job_class=JobClass.STRICT_SLO,
        deadlines=(Deadline(deadline_s, 100.0),),
    )


def _run(policy: str, jobs: list[TraceJob], shape: ClusterShape) -> dict:
    result = Simulation(jobs, make_policy(policy), shape, TraceJobModel(seed=0), SIM_CONFIG).run()
    return {"metrics": compute_metrics(result), "records": {r.job.id: r for r in result.records}}


def _r_slo(policy: str, jobs: list[TraceJob], shape: ClusterShape) -> float:
    return _run(policy, jobs, shape)["metrics"]["r_slo"] or 0.0


@pytest.fixture
def sim() -> SimpleNamespace:
    return SimpleNamespace(slo=_slo, run=_run, r_slo=_r_slo)
