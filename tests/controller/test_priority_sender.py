"""Decision.priorities reach the agents: after the launch, again only when they change by more
than 1 % or the job runs a new attempt (controller/priority_sender.py)."""

from __future__ import annotations

import math

from controller.commands import LaunchCommand, PriorityCommand, TaskRef
from controller.dispatch import encode
from controller.placement import TaskPlacement
from controller.policy.base import Decision, Launch, Migrate
from controller.priority_sender import changed
from mlsched.model import JobState, TaskState


class FixedPolicy:
    """Gives the decision it holds (tests change it between cycles)."""

    name = "fixed"

    def __init__(self) -> None:
        self.decision = Decision()

    def decide(self, snapshot):
        return self.decision


def started(c, policy: FixedPolicy, gpus: int = 2, priority: float = 3.0):
    job = c.submit(gpus=gpus)
    placement = (TaskPlacement(0, "n1", (0,)), TaskPlacement(1, "n2", (0,)))[:gpus]
    policy.decision = Decision(
        launch=(Launch(job.id, placement, 100.0),), priorities={job.id: priority}
    )
    c.cycle()
    return job


def test_the_priority_follows_the_launch_to_every_task_and_is_not_repeated(make_cluster):
    policy = FixedPolicy()
    c = make_cluster(policy=policy)
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = started(c, policy)
    kinds = c.sink.kinds()
    assert kinds == ["LaunchCommand", "LaunchCommand", "PriorityCommand", "PriorityCommand"]
    assert c.sink.of(PriorityCommand) == [
        ("n1", PriorityCommand(TaskRef(job.id, 0, 1), 3.0)),
        ("n2", PriorityCommand(TaskRef(job.id, 1, 1), 3.0)),
    ]
    c.report_all(job.id, TaskState.RUNNING)
    c.sink.clear()
    # the same value, then one within 1 % (3.0 -> 3.02: 0.02 <= 0.0302): nothing sent
    policy.decision = Decision(priorities={job.id: 3.0})
    c.cycle()
    policy.decision = Decision(priorities={job.id: 3.02})
    c.cycle()
    assert c.sink.of(PriorityCommand) == []
    # 3.0 -> 3.1 (0.1 > 0.031, measured against what was sent): both tasks told
    policy.decision = Decision(priorities={job.id: 3.1})
    c.cycle()
    assert [cmd.priority for _, cmd in c.sink.of(PriorityCommand)] == [3.1, 3.1]
    # a decision that leaves the job out changes nothing
    c.sink.clear()
    policy.decision = Decision()
    c.cycle()
    assert c.sink.of(PriorityCommand) == []


def test_a_new_attempt_gets_the_last_value_without_being_named(make_cluster):
    policy = FixedPolicy()
    c = make_cluster(policy=policy)
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = started(c, policy, gpus=1, priority=-5.0)
    c.report_all(job.id, TaskState.RUNNING)
    target = (TaskPlacement(0, "n2", (0,)),)
    policy.decision = Decision(migrate=(Migrate(job.id, target, 100.0, "test"),))
    c.cycle()
    assert job.state is JobState.SUSPENDING
    c.sink.clear()
    c.report_all(job.id, TaskState.SUSPENDED)  # resumed on n2 at once (attempt 2)
    assert [n for n, _ in c.sink.of(LaunchCommand)] == ["n2"]
    policy.decision = Decision()
    c.cycle()  # the next cycle tells the new attempt its priority
    assert [type(cmd).__name__ for _, cmd in c.sink.sent][-1] == "PriorityCommand"
    assert c.sink.of(PriorityCommand) == [("n2", PriorityCommand(TaskRef(job.id, 0, 2), -5.0))]
    assert c.scheduler.priorities.sent(job.id) == (2, -5.0)


def test_ended_jobs_are_forgotten_and_bad_values_refused(make_cluster):
    policy = FixedPolicy()
    c = make_cluster(policy=policy)
    c.add_node("n1", 1)
    job = started(c, policy, gpus=1)
    c.report_all(job.id, TaskState.RUNNING)
    c.report_all(job.id, TaskState.COMPLETED)
    assert job.state is JobState.COMPLETED
    c.sink.clear()
    policy.decision = Decision(priorities={job.id: 9.0, "nobody": 1.0, "x": math.nan})
    c.cycle()
    assert c.sink.of(PriorityCommand) == []
    assert c.scheduler.priorities.sent(job.id) is None


def test_change_is_relative_to_the_larger_value():
    assert not changed(100.0, 100.9)
    assert changed(100.0, 101.1)
    assert changed(0.0, 1e-12)  # anything from 0
    assert not changed(-2.0, -2.01)


def test_encoded_on_the_session():
    msg = encode(PriorityCommand(TaskRef("j", 1, 2), 0.25))
    assert msg.WhichOneof("message") == "priority"
    assert (msg.priority.task.job_id, msg.priority.task.rank, msg.priority.task.attempt) == (
        "j",
        1,
        2,
    )
    assert msg.priority.priority == 0.25
