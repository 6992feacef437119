"""Carrying out ``Stop`` orders (MLF-C's early stops) in the controller, agents simulated."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.commands import StopTrainingCommand, TaskRef
from controller.policy.base import ClusterSnapshot, Decision, Stop, Suspend
from controller.policy.fifo import FifoPolicy
from controller.stops import RESEND_S, completion_message
from mlsched.model import (
    IterationStop,
    Job,
    JobState,
    MlfsSpec,
    Progress,
    StopOption,
    Task,
    TaskState,
)

TRAINER_STOPPED = "completed (exit code 0); trainer: StopNow: MLF-C: test stop"


class StoppingPolicy:
    """FIFO plus a Stop (or a Suspend) for every job named in ``stops`` (``suspends``)."""

    name = "fifo-with-stops"

    def __init__(self) -> None:
        self.fifo = FifoPolicy()
        self.stops: dict[str, str] = {}
        self.suspends: set[str] = set()

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = self.fifo.decide(snapshot)
        return replace(
            decision,
            stop=tuple(Stop(job_id, reason) for job_id, reason in self.stops.items()),
            suspend=decision.suspend + tuple(Suspend(j, "test") for j in self.suspends),
        )


@pytest.fixture
def setup(make_cluster):
    policy = StoppingPolicy()
    c = make_cluster(policy=policy)
    c.add_node("n1", 2)
    return c, policy


def running(c, gpus: int = 2) -> Job:
    job = c.submit(gpus=gpus)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    return job


def sent_stops(c) -> list:
    return c.sink.of(StopTrainingCommand)


def test_a_stop_goes_to_rank_0_once_and_is_recorded(setup):
    c, policy = setup
    job = running(c)
    policy.stops[job.id] = "MLF-C: test stop"
    c.sink.clear()
    c.cycle()
    assert sent_stops(c) == [("n1", StopTrainingCommand(TaskRef(job.id, 0, 1), "MLF-C: test stop"))]
    assert job.message == "stop requested: MLF-C: test stop"
    assert job.state is JobState.RUNNING  # until the trainer has stopped
    events = [e for e in c.store.events_after(0, job.id) if e.kind == "stop_requested"]
    assert [(e.message, e.node_id) for e in events] == [("MLF-C: test stop", "n1")]
    c.cycle()
    c.cycle()
    assert len(sent_stops(c)) == 1  # the policy repeats it; the controller does not


def test_a_stop_is_sent_again_after_the_resend_interval(setup):
    c, policy = setup
    job = running(c)
    policy.stops[job.id] = "MLF-C: test stop"
    c.sink.clear()
    c.cycle()
    c.advance(RESEND_S - 1, heartbeat=True)
    c.cycle()
    assert len(sent_stops(c)) == 1
    c.advance(1, heartbeat=True)
    c.cycle()
    assert len(sent_stops(c)) == 2
    assert c.event_kinds(job.id).count("stop_requested") == 1


def test_the_job_completes_with_the_trainers_reason(setup):
    c, policy = setup
    job = running(c)
    policy.stops[job.id] = "MLF-C: test stop"
    c.cycle()
    c.advance(5.0, heartbeat=True)
    c.report(job.id, 1, TaskState.COMPLETED, message="completed (exit code 0)")
    assert job.state is JobState.RUNNING
    c.report(job.id, 0, TaskState.COMPLETED, message=TRAINER_STOPPED)
    assert job.state is JobState.COMPLETED
    assert job.message == "reached its stopping criterion: StopNow: MLF-C: test stop"
    states = [e.message for e in c.store.events_after(0, job.id) if e.kind == "job_state"]
    assert (
        states[-1] == "RUNNING -> COMPLETED: reached its stopping criterion: StopNow: MLF-C: "
        "test stop"
    )
    c.sink.clear()
    c.cycle()  # the policy still names it: an ended job gets nothing
    assert sent_stops(c) == []


def test_queued_and_suspended_jobs_are_not_stopped(setup):
    c, policy = setup
    first = running(c)
    waiting = c.submit(gpus=2, name="waiting")
    policy.stops = {first.id: "r", waiting.id: "r"}
    policy.suspends = {first.id}
    c.sink.clear()
    c.cycle()
    assert first.state is JobState.SUSPENDING
    assert waiting.state is JobState.PENDING
    assert sent_stops(c) == []
    assert "stop_requested" not in c.event_kinds()


def test_a_stop_for_an_unknown_job_is_ignored(setup):
    c, policy = setup
    policy.stops["j-nope"] = "r"
    c.cycle()
    assert sent_stops(c) == []


def test_a_resumed_attempt_is_stopped_again(setup):
    c, policy = setup
    job = running(c, gpus=1)
    policy.stops[job.id] = "MLF-C: test stop"
    c.cycle()
    policy.stops.clear()
    policy.suspends = {job.id}
    c.cycle()
    c.report_all(job.id, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED
    policy.suspends.clear()
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert (job.state, job.attempt) == (JobState.RUNNING, 2)
    policy.stops[job.id] = "MLF-C: test stop"
    c.sink.clear()
    c.cycle()
    assert sent_stops(c) == [("n1", StopTrainingCommand(TaskRef(job.id, 0, 2), "MLF-C: test stop"))]


# --- the completion message ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("done", "reached its stopping criterion"),
        ("completed (exit code 0)", "reached its stopping criterion"),
        (
            "completed (exit code 0); trainer: target reached: accuracy=0.91 >= 0.9",
            "reached its stopping criterion: target reached: accuracy=0.91 >= 0.9",
        ),
        (TRAINER_STOPPED, "reached its stopping criterion: StopNow: MLF-C: test stop"),
    ],
)
def test_completion_message(message, expected):
    tasks = [
        Task("j", 1, 1, "n1", (1,), TaskState.COMPLETED, 0, "completed; trainer: other rank"),
        Task("j", 0, 1, "n1", (0,), TaskState.COMPLETED, 0, message),
    ]
    assert completion_message(tasks) == expected


def test_completion_message_without_a_completed_rank_0():
    assert completion_message([]) == "reached its stopping criterion"


# --- the metric history MLF-C reads ----------------------------------------------------------


@pytest.mark.parametrize(
    ("mlfs", "recorded"),
    [
        (MlfsSpec(), False),
        (MlfsSpec(system_may_switch=True), True),
        (MlfsSpec(stop_option=StopOption.OPT_STOP), True),
        (MlfsSpec(stop_option=StopOption.REQUIRED, required_accuracy=0.9), True),
    ],
)
def test_accuracy_history_of_an_iteration_job_mlf_c_may_stop(cluster, mlfs, recorded):
    c = cluster
    c.add_node("n1", 1)
    spec = replace(c.spec(stopping=IterationStop(10_000)), mlfs=mlfs)
    job = c.jobs.submit("alice", spec)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    for it, acc in ((100, 0.5), (150, 0.5), (200, 0.6)):
        c.events.progress("n1", job.id, 0, 1, Progress(it, 1.0, {"accuracy": acc}, 0.1, 64, 0.0))
    assert job.metric_history == ([(100, 0.5), (200, 0.6)] if recorded else [])
