"""A job's own suspend grace (issue 18 #4): the controller's suspensions carry it, including
the ones repeated to an agent that reconnects; without one, the controller's default."""

from __future__ import annotations

from dataclasses import replace

from controller import lifecycle
from controller.commands import SuspendCommand, TaskRef
from controller.placement import TaskPlacement
from mlsched.model import IterationStop, JobSpec, TaskState

SPEC = JobSpec("slow-save", ("python", "train.py"), 1, IterationStop(1000))


def _running(c, spec: JobSpec):
    job = c.jobs.submit("alice", spec)
    with c.state.lock:
        lifecycle.launch(c.state, job, (TaskPlacement(0, "n1", (0,)),), 100.0)
    c.report_all(job.id, TaskState.RUNNING)
    return job


def test_a_jobs_grace_replaces_the_default_and_is_repeated_after_a_reconnect(cluster):
    c = cluster  # the controller's default grace here: 10 s
    c.add_node("n1", 2)
    slow = _running(c, replace(SPEC, suspend_grace_s=120.0))
    plain = _running(c, replace(SPEC, name="plain"))
    c.sink.clear()
    with c.state.lock:
        lifecycle.suspend(c.state, slow, "lease expired")
        lifecycle.suspend(c.state, plain, "lease expired")
    assert c.sink.sent == [
        ("n1", SuspendCommand(TaskRef(slow.id, 0, 1), 120.0, "lease expired")),
        ("n1", SuspendCommand(TaskRef(plain.id, 0, 1), 10.0, "lease expired")),
    ]
    c.sink.clear()
    c.add_node(
        "n1",
        2,
        reports=[
            c.report_of(slow.id, 0, TaskState.RUNNING),
            c.report_of(plain.id, 0, TaskState.RUNNING),
        ],
    )
    repeated = sorted(
        (cmd.task.job_id, cmd.grace_s) for _, cmd in c.sink.sent if isinstance(cmd, SuspendCommand)
    )
    assert repeated == sorted([(slow.id, 120.0), (plain.id, 10.0)])
