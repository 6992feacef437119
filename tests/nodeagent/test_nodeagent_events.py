"""Periodic events, the progress relay and the trainer command channel (fake clock)."""

from __future__ import annotations

import logging

import pytest
from nodeagent_testkit import FakeClock

from nodeagent import convert
from nodeagent.events import EventLoop, PeriodicEvent
from nodeagent.model import (
    ProgressInfo,
    StopCommand,
    SuspendCommand,
    TaskRef,
    TaskState,
    TaskStatusInfo,
)
from nodeagent.progress import ProgressRelay
from nodeagent.trainer_channel import ChannelClosed, TrainerChannel


def test_events_run_on_their_own_intervals_and_failures_are_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    runs: list[str] = []

    def boom() -> None:
        runs.append("boom")
        raise RuntimeError("broken event")

    loop = EventLoop(
        [
            PeriodicEvent("fast", 1.0, lambda: runs.append("fast")),
            PeriodicEvent("slow", 3.0, lambda: runs.append("slow")),
            PeriodicEvent("boom", 2.0, boom),
        ],
        clock,
    )
    assert loop.run_due() == pytest.approx(1.0)
    assert runs == []
    with caplog.at_level(logging.ERROR):
        for _ in range(6):
            clock.advance(1.0)
            loop.run_due()
    assert runs.count("fast") == 6
    assert runs.count("slow") == 2
    assert runs.count("boom") == 3
    assert "periodic event boom failed" in caplog.text
    loop.set_interval("slow", 0.5)
    clock.advance(0.5)
    loop.run_due()
    assert runs.count("slow") == 3


def test_progress_relay_rate_limits_per_task_latest_wins() -> None:
    clock = FakeClock()
    sent: list[tuple[TaskRef, int]] = []
    relay = ProgressRelay(lambda ref, p: sent.append((ref, p.iteration)), 1.0, clock)
    a, b = TaskRef("a", 0, 1), TaskRef("b", 0, 1)
    relay.offer(a, ProgressInfo(iteration=1))
    relay.offer(b, ProgressInfo(iteration=1))
    relay.offer(a, ProgressInfo(iteration=2))
    relay.offer(a, ProgressInfo(iteration=3))
    assert sent == [(a, 1), (b, 1)]
    clock.advance(0.5)
    relay.flush()
    assert len(sent) == 2
    clock.advance(0.5)
    relay.flush()
    assert sent[-1] == (a, 3) and len(sent) == 3
    relay.offer(b, ProgressInfo(iteration=2))
    assert sent[-1] == (b, 2)
    relay.offer(a, ProgressInfo(iteration=4))
    relay.forget(a)  # a held report is sent before forgetting
    assert sent[-1] == (a, 4)


def test_progress_conversion_keeps_the_compute_time() -> None:
    info = ProgressInfo(
        iteration=7,
        loss=0.5,
        metrics={"accuracy": 0.75},
        iteration_time_s=0.25,
        batch_size=32,
        time=1_000.0,
        compute_time_s=0.125,
    )
    message = convert.progress_to_pb(info)
    assert (message.iteration_time_s, message.compute_time_s) == (0.25, 0.125)
    assert convert.progress_from_pb(message) == info
    request = convert.progress_request(TaskRef("j", 0, 2), info)
    assert request.progress.progress.compute_time_s == 0.125
    assert convert.progress_from_pb(type(message)(iteration=3)).compute_time_s == 0.0  # old shim


def test_a_status_carries_the_newest_progress_on_the_wire() -> None:
    progress = ProgressInfo(iteration=1500, loss=0.125, metrics={"accuracy": 0.9})
    ref = TaskRef("j", 0, 1)
    status = convert.task_status_to_pb(TaskStatusInfo(ref, TaskState.COMPLETED, progress=progress))
    assert status.HasField("last_progress")
    assert convert.progress_from_pb(status.last_progress) == progress
    assert not convert.task_status_to_pb(TaskStatusInfo(ref, TaskState.RUNNING)).HasField(
        "last_progress"
    )


def test_trainer_channel_queue_takeover_and_sticky_commands() -> None:
    channel = TrainerChannel()
    channel.push(SuspendCommand("lease"), sticky=True)
    first = channel.attach()
    assert channel.next_command(first, 0.01) == SuspendCommand("lease")
    assert channel.next_command(first, 0.01) is None
    second = channel.attach()  # a reconnecting shim gets the suspension again
    with pytest.raises(ChannelClosed):
        channel.next_command(first, 0.01)
    assert channel.next_command(second, 0.01) == SuspendCommand("lease")
    channel.push(StopCommand("target reached"))
    assert channel.next_command(second, 0.01) == StopCommand("target reached")
    channel.close()
    with pytest.raises(ChannelClosed):
        channel.next_command(second, 0.01)
    with pytest.raises(ChannelClosed):
        channel.attach()
