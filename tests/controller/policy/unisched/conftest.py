"""The UniSched tests' job views, built one way for every module (test modules cannot import
each other): ``unisched_job(name, ...)`` is a job of ``IterationStop(1000)`` that has been
profiled as the real system profiles it (one 2-GPU one-node sample: T_iter 1.1 s, T_comp 1 s)
and has a measured suspend + resume overhead of 10 s."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.policy.base import JobView
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState, SpeedSample

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
