"""``mlsched stop``: a user finishes a job now and keeps its model (agents simulated)."""

from __future__ import annotations

import pytest

from controller import lifecycle
from controller.commands import StopTrainingCommand, SuspendCommand, TaskRef
from controller.errors import FailedPrecondition, NotFound, PermissionDenied
from mlsched.model import JobState, TaskState

STOPPED_RUNNING = "completed (exit code 0); trainer: StopNow: stopped by alice: enough"


def suspend(c, job) -> None:
    """What the scheduler does at a lease boundary the policy did not renew."""
    with c.state.lock:
        lifecycle.suspend(c.state, job, "lease expired")


def running_job(c, gpus: int = 1):
    c.add_node("n1", 2)
    job = c.submit(gpus=gpus)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    return job


def suspended_job(c, checkpoint_step: int):
    job = running_job(c)
    suspend(c, job)
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=checkpoint_step)
    assert job.state is JobState.SUSPENDED
    return job


def test_a_running_job_is_told_to_stop_at_the_next_cycle_and_completes(cluster):
    c = cluster
    job = running_job(c)
    c.sink.clear()
    c.jobs.stop("alice", job.id, "enough")
    assert job.stop_requested == "stopped by alice: enough"
    assert job.state is JobState.RUNNING  # the trainer decides the step it stops at
    c.cycle()
    assert c.sink.of(StopTrainingCommand) == [
        ("n1", StopTrainingCommand(TaskRef(job.id, 0, 1), "stopped by alice: enough"))
    ]
    c.report(job.id, 0, TaskState.COMPLETED, message=STOPPED_RUNNING, checkpoint_step=40)
    assert job.state is JobState.COMPLETED
    assert job.message == "reached its stopping criterion: StopNow: stopped by alice: enough"
    assert c.event_kinds(job.id).count("user_stop") == 1


def test_a_suspended_job_completes_at_once_from_its_checkpoint(cluster):
    c = cluster
    job = suspended_job(c, checkpoint_step=120)
    c.sink.clear()
    c.jobs.stop("alice", job.id)
    assert job.state is JobState.COMPLETED
    assert job.end_time is not None
    assert job.message == (
        "reached its stopping criterion: stopped by alice; final model: checkpoint at step 120"
    )
    c.cycle()
    assert c.sink.sent == []  # nothing relaunched, nothing to tell any agent


def test_a_job_stopped_while_suspending_completes_when_it_has_checkpointed(cluster):
    c = cluster
    job = running_job(c)
    suspend(c, job)
    assert job.state is JobState.SUSPENDING
    assert c.sink.of(SuspendCommand)
    c.jobs.stop("alice", job.id)
    assert job.state is JobState.SUSPENDING
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=64)
    assert job.state is JobState.COMPLETED
    assert job.message.endswith("final model: checkpoint at step 64")


def test_a_job_that_never_checkpointed_cannot_be_stopped_only_cancelled(cluster):
    c = cluster
    job = c.submit()  # PENDING: nothing trained, nothing to keep
    with pytest.raises(FailedPrecondition, match=r"no checkpoint to finish with .*cancel it"):
        c.jobs.stop("alice", job.id)
    assert job.state is JobState.PENDING
    assert job.stop_requested == ""


def test_stop_checks_owner_existence_and_end(cluster):
    c = cluster
    job = running_job(c)
    with pytest.raises(PermissionDenied, match="belongs to 'alice', not 'mallory'"):
        c.jobs.stop("mallory", job.id)
    with pytest.raises(NotFound):
        c.jobs.stop("alice", "j-nope")
    c.report(job.id, 0, TaskState.COMPLETED)
    with pytest.raises(FailedPrecondition, match="already ended: COMPLETED"):
        c.jobs.stop("alice", job.id)


def test_a_second_stop_changes_nothing(cluster):
    c = cluster
    job = running_job(c)
    c.jobs.stop("alice", job.id, "first")
    c.jobs.stop("alice", job.id, "second")
    assert job.stop_requested == "stopped by alice: first"
    assert c.event_kinds(job.id).count("user_stop") == 1


def test_a_stop_request_survives_a_controller_restart(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    job = running_job(first)
    first.jobs.stop("alice", job.id, "enough")
    second = make_cluster(path)
    assert second.state.jobs[job.id].stop_requested == "stopped by alice: enough"
    second.cycle()  # the new controller sends the order the old one may not have
    assert [cmd.reason for _, cmd in second.sink.of(StopTrainingCommand)] == [
        "stopped by alice: enough"
    ]
