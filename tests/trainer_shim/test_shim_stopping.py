"""Stopping criteria, the command mailbox, and should_stop/should_suspend in local mode."""

from __future__ import annotations

import math

import pytest

import trainer_shim
from trainer_shim.stopping import ControlState, StoppingCriteria, Target


def test_target_goals() -> None:
    assert Target("accuracy", 0.9).reached(0.9)
    assert not Target("accuracy", 0.9).reached(0.89)
    assert Target("loss", 0.1, "min").reached(0.05)
    assert not Target("loss", 0.1, "min").reached(0.2)
    assert not Target("loss", 0.1, "min").reached(math.nan)
    with pytest.raises(ValueError):
        Target("loss", 0.1, "minimise")


def test_criteria_check() -> None:
    budget = StoppingCriteria(max_iterations=100)
    assert budget.check(99, {}) is None
    assert "max_iterations" in (budget.check(100, {}) or "")
    target = StoppingCriteria(max_iterations=1000, target=Target("accuracy", 0.9))
    assert target.check(10, {"accuracy": 0.5, "loss": 0.1}) is None
    assert "target reached" in (target.check(10, {"accuracy": 0.95}) or "")
    assert "max_iterations" in (target.check(1000, {"accuracy": 0.5}) or "")
    assert StoppingCriteria().check(10**9, {"accuracy": 1.0}) is None


def test_batch_size_change_is_taken_once_and_newest_wins() -> None:
    control = ControlState()
    control.request_batch_size(64)
    control.request_batch_size(128)
    control.request_batch_size(0)  # ignored
    assert control.take_batch_size() == 128
    assert control.take_batch_size() is None


def test_first_reason_wins() -> None:
    control = ControlState()
    control.request_stop("first")
    control.request_stop("second")
    assert control.stop_reason == "first"
    assert control.wait_for(lambda c: c.stop_reason is not None, timeout=0)


def test_should_stop_at_the_iteration_budget() -> None:
    with trainer_shim.init(max_iterations=3, environ={}) as job:
        steps = 0
        while not job.should_stop():
            steps += 1
            job.report(steps, loss=1.0 / steps)
        assert steps == 3
        assert "max_iterations" in (job.stop_reason or "")
        assert job.should_stop()  # sticky


@pytest.mark.parametrize(
    ("goal", "values", "stop_after"),
    [("max", [0.5, 0.7, 0.91, 0.3], 3), ("min", [2.0, 0.5, 0.09, 1.0], 3)],
)
def test_should_stop_at_the_target(goal: str, values: list[float], stop_after: int) -> None:
    with trainer_shim.init(
        max_iterations=100, target=("m", 0.9 if goal == "max" else 0.1, goal), environ={}
    ) as job:
        step = 0
        while not job.should_stop():
            job.report(step + 1, metrics={"m": values[step]})
            step += 1
        assert step == stop_after
        assert "target reached" in (job.stop_reason or "")


def test_a_metric_reported_earlier_still_counts() -> None:
    with trainer_shim.init(target=("accuracy", 0.9), environ={}) as job:
        job.report(1, metrics={"accuracy": 0.95})
        job.report(2, loss=0.3)  # no accuracy in this report
        assert job.should_stop()
        assert job.last_metrics == {"accuracy": 0.95}
