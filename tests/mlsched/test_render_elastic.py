"""`mlsched describe` of an elastic job: its range, batch rule and resizes (issue 14)."""

from __future__ import annotations

from mlsched import render
from mlsched.model import (
    BatchRule,
    ElasticSpec,
    Event,
    IterationStop,
    Job,
    JobSpec,
    JobState,
)


def job(elastic: ElasticSpec) -> Job:
    spec = JobSpec(
        name="e", command=("python", "t.py"), gpus=2, stopping=IterationStop(10), batch_size=64
    )
    spec = JobSpec(**{**spec.__dict__, "elastic": elastic})
    return Job("j-1", "alice", spec, JobState.RUNNING, 100.0, 100.0)


def event(seq: int, time: float, kind: str, message: str) -> Event:
    return Event(seq, time, kind, message, "j-1", "")


def test_describe_lists_the_resizes_with_their_reason_and_cost():
    events = [
        event(1, 160.0, "job_state", "RUNNING -> SUSPENDING: resizing"),
        event(2, 160.0, "resize_ordered", "1 -> 2 GPUs (n:[0], n:[1]), ...: slaq: predicted 0.2"),
        event(
            3, 171.5, "job_resized", "1 -> 2 GPUs, global batch 128, by suspend/resume in 11.50 s"
        ),
    ]
    elastic = ElasticSpec(1, 4, BatchRule.SCHEDULER, max_batch_size=512, linear_lr=True)
    lines = render.describe(job(elastic), [], render.resize_events(events)).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("elastic:"))
    assert lines[at : at + 5] == [
        "elastic: 1 to 4 GPUs; batch scheduler up to 512 (base 64); learning rate scaled linearly",
        "resizes:",
        "  +    0.0 s ordered: 1 -> 2 GPUs (n:[0], n:[1]), ...: slaq: predicted 0.2",
        "  +   11.5 s done: 1 -> 2 GPUs, global batch 128, by suspend/resume in 11.50 s",
        "resumptions:",
    ]


def test_a_rigid_job_has_no_elastic_lines():
    assert "resizes" not in render.describe(job(ElasticSpec()), [], [])
