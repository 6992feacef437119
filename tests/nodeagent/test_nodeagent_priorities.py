"""Priorities from the controller in the agent's overload choice (nodeagent/priorities.py,
MLFS §3.3.3): received values rank tasks, a task without one falls back to its start."""

from __future__ import annotations

import logging

import pytest

from controller.commands import PriorityCommand
from controller.commands import TaskRef as ControllerTaskRef
from controller.dispatch import encode
from nodeagent.controller_link import ControllerLink
from nodeagent.model import NodeMetrics, RunningTask, TaskMetrics, TaskRef
from nodeagent.overload import Capacity, OverloadDetector, OverloadSettings, measure_load
from nodeagent.priorities import TaskPriorities, fallback

GIB = 1 << 30
CAPACITY = Capacity(cpu_cores=64.0, memory_bytes=10 * GIB)


def task(job: str, launched_at: float) -> RunningTask:
    return RunningTask(TaskRef(job, 0, 1), 100, (), launched_at)


def rss(job: str, gib: float, cores: float = 0.0) -> TaskMetrics:
    return TaskMetrics(TaskRef(job, 0, 1), cores * 100.0, int(gib * GIB))


def node() -> NodeMetrics:
    return NodeMetrics(1.0, 0.0, 0, 64 * GIB, 0.0, 0.0, ())


def test_fallback_ranks_below_every_received_value_oldest_lowest():
    # received: 2.5 and -1; floor = -1 - 1 = -2; missing: c (t=5), d (t=1), e (t=9)
    # -> oldest lowest: d -4, c -3, e -2
    missing = [task("c", 5.0), task("d", 1.0), task("e", 9.0)]
    assert fallback(missing, [2.5, -1.0]) == {
        TaskRef("d", 0, 1): -4.0,
        TaskRef("c", 0, 1): -3.0,
        TaskRef("e", 0, 1): -2.0,
    }
    assert fallback([task("x", 0.0)], []) == {TaskRef("x", 0, 1): -1.0}


def test_ranked_logs_a_missing_priority_once_and_forgets_gone_tasks(caplog):
    book = TaskPriorities()
    a, b = task("a", 1.0), task("b", 2.0)
    book.set(a.ref, 0.3)
    book.set(b.ref, float("nan"))  # refused
    with caplog.at_level(logging.INFO, logger="nodeagent.priorities"):
        assert book.ranked([a, b]) == {a.ref: 0.3, b.ref: pytest.approx(-0.7)}
        assert book.ranked([a, b]) == {a.ref: 0.3, b.ref: pytest.approx(-0.7)}
    warned = [r for r in caplog.records if "has no priority" in r.getMessage()]
    assert len(warned) == 1 and str(b.ref) in warned[0].getMessage()
    book.ranked([b])  # a has left
    assert book.get(a.ref) is None


def overloaded_choice(priorities: dict[TaskRef, float] | None) -> str:
    """Memory at 9.6 of 10 GiB (> h_r 0.9): twins x, y at 4.0 and 3.8 GiB, z at 1.8 GiB.
    U_o = (gpu 0, cpu 0, memory max 0.40, bandwidth 0, traffic 0): x at distance 0, y 0.02,
    z 0.22. x and y are within 0.05 of the closest: the lower priority of the two leaves
    (then 5.6 or 5.8 GiB: relieved)."""
    tasks = [
        (task("x", 1.0), rss("x", 4.0)),
        (task("y", 2.0), rss("y", 3.8)),
        (task("z", 3.0), rss("z", 1.8)),
    ]
    load = measure_load(node(), tasks, CAPACITY, priorities=priorities)
    detector = OverloadDetector("n", OverloadSettings(samples=1))
    return ",".join(w.ref.job_id for w in detector.observe(load))


def test_the_lower_priority_of_near_equal_tasks_leaves():
    x, y, z = TaskRef("x", 0, 1), TaskRef("y", 0, 1), TaskRef("z", 0, 1)
    assert overloaded_choice({x: 1.0, y: 2.0, z: 0.0}) == "x"
    assert overloaded_choice({x: 2.0, y: 1.0, z: 0.0}) == "y"
    # z has the lowest priority but is not near the ideal task: it stays
    assert overloaded_choice({x: 5.0, y: 4.0, z: -9.0}) == "y"
    # nothing received: the oldest start (x, t=1) is the lowest
    assert overloaded_choice(None) == "x"
    # only y received one: x falls back below it and leaves
    assert overloaded_choice({y: 0.0}) == "x"


class _Handler:
    """The link's handler, keeping priorities as the agent does."""

    def __init__(self) -> None:
        self.priorities = TaskPriorities()

    def priority(self, ref: TaskRef, priority: float) -> None:
        self.priorities.set(ref, priority)


def test_the_controllers_message_reaches_the_agents_book():
    # the controller's encoding of a PriorityCommand, dispatched by the agent's link
    handler = _Handler()
    link = ControllerLink("127.0.0.1:1", "t", handler, lambda _: None)  # type: ignore[arg-type]
    link._dispatch(encode(PriorityCommand(ControllerTaskRef("j", 1, 3), -12.5)))
    assert handler.priorities.get(TaskRef("j", 1, 3)) == -12.5
