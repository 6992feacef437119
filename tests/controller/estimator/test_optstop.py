"""OptStop (MLFS §3.5 after Domhan et al.): predicted best accuracy and the stop verdicts."""

from __future__ import annotations

import math

import pytest

from controller.estimator.optstop import (
    OptStopConfig,
    OptStopPrediction,
    opt_stop,
    predict_best,
)
from mlsched.model import MetricGoal

MAX = 20_000
MAXIMIZE, MINIMIZE = MetricGoal.MAXIMIZE, MetricGoal.MINIMIZE


def noise(i: int, scale: float = 0.004) -> float:
    """Deterministic evaluation noise: a fixed pseudo-random pattern in [-scale, scale]."""
    return scale * math.sin(i * 2.399963)  # golden-angle steps: no visible period


def curve(f, until: int, every: int = 20, scale: float = 0.004) -> list[tuple[int, float]]:
    return [(it, f(it) + noise(it, scale)) for it in range(every, until + 1, every)]


def saturating(it: int) -> float:  # 0.4 -> 0.9, mostly done by iteration 1000
    return 0.9 - 0.5 * math.exp(-it / 300)


def slow(it: int) -> float:  # 0.4 -> 0.9 over the whole budget
    return 0.9 - 0.5 * math.exp(-it / 6000)


# --- predictions -----------------------------------------------------------------------------


def test_a_saturated_curve_predicts_its_plateau():
    p = predict_best(curve(saturating, 3000), MAXIMIZE, MAX)
    assert p is not None
    assert p.best == pytest.approx(0.9, abs=0.005)
    assert p.spread < 0.005
    assert p.iteration == 3000
    assert p.current == pytest.approx(saturating(3000) + noise(3000))
    assert set(p.models) == {"exp", "pow"}  # MMF and log err over 3 times as much: left out


def test_a_rising_curve_predicts_more_to_come():
    p = predict_best(curve(slow, 2000), MAXIMIZE, MAX)
    assert p is not None
    assert p.gain > 0.1
    assert p.recent_gain > 0.02


def test_a_fraction_is_never_predicted_above_1():
    steep = [(it, min(0.999, 0.5 + it / 4000)) for it in range(100, 2001, 100)]
    p = predict_best(steep, MAXIMIZE, MAX)
    assert p is not None and p.best <= 1.0


def test_a_loss_curve_is_predicted_downwards_and_never_below_0():
    history = curve(lambda it: 0.2 + 2.0 * math.exp(-it / 300), 3000, scale=0.002)
    p = predict_best(history, MINIMIZE, MAX)
    assert p is not None
    assert p.best == pytest.approx(0.2, abs=0.01)
    assert p.gain < 0.01  # in the goal's direction: a lower loss is a gain
    falling = [(it, 1.0 - it / 2500) for it in range(100, 2001, 100)]  # a straight line to 0
    p = predict_best(falling, MINIMIZE, MAX)
    assert p is not None and p.best >= 0.0


def test_an_unbounded_metric_is_not_capped():
    history = [(it, 10.0 + 5.0 * math.log(it)) for it in range(100, 3001, 100)]
    p = predict_best(history, MAXIMIZE, MAX)
    assert p is not None and p.best > 50.0


def test_a_flat_history_is_its_own_best():
    p = predict_best([(it, 0.7) for it in range(10, 101, 10)], MAXIMIZE, MAX)
    assert p == OptStopPrediction(0.7, 0.0, 0.7, 100, MAXIMIZE, (), 0.0)


@pytest.mark.parametrize(
    "history",
    [
        [],
        [(10, 0.1), (20, 0.2), (30, 0.3), (40, 0.4)],  # fewer than min_points
        [(0, 0.1), (10, 0.2), (20, 0.3), (30, float("nan")), (40, 0.5)],  # 3 usable
        [(it, 0.1 * it / MAX) for it in range(MAX - 40, MAX + 1, 10)],  # at max_iterations
    ],
    ids=["empty", "short", "unusable", "at-budget"],
)
def test_nothing_to_predict(history):
    assert predict_best(history, MAXIMIZE, MAX) is None
    verdict = opt_stop(history, MAXIMIZE, MAX)
    assert (verdict.stop, verdict.prediction) == (False, None)
    assert verdict.reason == "not enough history to predict"


def test_min_points_is_a_parameter():
    history = [(10, 0.1), (20, 0.2), (30, 0.25)]
    assert predict_best(history, MAXIMIZE, MAX, min_points=3) is not None


def test_invalid_input_raises():
    with pytest.raises(ValueError, match="strictly increasing"):
        predict_best([(10, 0.1), (10, 0.2)], MAXIMIZE, MAX)
    with pytest.raises(ValueError, match="max_iterations"):
        predict_best([(10, 0.1)], MAXIMIZE, 0)
    with pytest.raises(ValueError, match="epsilon"):
        OptStopConfig(epsilon=-1.0)
    with pytest.raises(ValueError, match="z"):
        OptStopConfig(z=float("nan"))
    with pytest.raises(ValueError, match="min_points"):
        OptStopConfig(min_points=2)


def test_long_histories_are_deterministic():
    history = curve(saturating, 5120)  # 256 points, the controller's cap
    first = predict_best(history, MAXIMIZE, MAX)
    assert first == predict_best(history, MAXIMIZE, MAX)


# --- the near-best rule ----------------------------------------------------------------------


def test_stops_on_the_plateau_with_its_reason():
    verdict = opt_stop(curve(saturating, 3000), MAXIMIZE, MAX)
    assert verdict.stop
    p = verdict.prediction
    assert verdict.reason == (
        f"predicted best {p.best:.4g} (+/- {p.spread:.2g}), now {p.current:.4g}"
    )


def test_first_stop_on_a_saturating_curve_is_close_to_its_best():
    history = curve(saturating, 5000)
    first = next(k for k in range(5, len(history)) if opt_stop(history[:k], MAXIMIZE, MAX).stop)
    iteration, value = history[first - 1]
    assert 500 <= iteration <= 3000
    assert value >= 0.9 - 0.02


def test_never_stops_while_the_curve_climbs():
    history = curve(slow, 4000)
    assert not any(opt_stop(history[:k], MAXIMIZE, MAX).stop for k in range(5, len(history) + 1))


def test_a_dip_in_the_latest_value_holds_the_stop_back():
    history = curve(saturating, 3000)
    assert opt_stop(history, MAXIMIZE, MAX).stop
    dipped = [*history[:-1], (history[-1][0], history[-1][1] - 0.05)]
    assert not opt_stop(dipped, MAXIMIZE, MAX).stop


def test_a_loss_stops_at_its_floor():
    history = curve(lambda it: 0.2 + 2.0 * math.exp(-it / 300), 5000, scale=0.002)
    first = next(k for k in range(5, len(history)) if opt_stop(history[:k], MINIMIZE, MAX).stop)
    iteration, value = history[first - 1]
    assert 1000 <= iteration <= 5000  # the power law keeps predicting a little more for a while
    assert value == pytest.approx(0.2, abs=0.005)


@pytest.mark.parametrize(
    ("gain", "spread", "recent", "near"),
    [
        (0.0, 0.0, 0.0, True),
        (0.0099, 0.0, 0.0, True),
        (0.011, 0.0, 0.0, False),
        (0.0, 0.006, 0.0, True),  # 1.645 * 0.006 = 0.00987
        (0.0, 0.007, 0.0, False),
        (-0.02, 0.015, 0.0, True),  # the latest value is above the prediction
        (0.0, 0.0, 0.011, False),  # the recent trend still climbs
        (0.0, 0.0, -0.05, True),  # ... or falls
    ],
)
def test_near_best_rule(gain, spread, recent, near):
    p = OptStopPrediction(0.8 + gain, spread, 0.8, 100, MAXIMIZE, ("exp",), recent)
    assert p.near_best(OptStopConfig()) is near


def test_near_best_rule_for_a_minimised_metric():
    p = OptStopPrediction(0.295, 0.001, 0.3, 100, MINIMIZE, ("exp",), 0.0)
    assert p.gain == pytest.approx(0.005)
    assert p.near_best(OptStopConfig())
    assert not p.near_best(OptStopConfig(epsilon=0.001))


# --- the out-of-reach rule -------------------------------------------------------------------


def test_stops_when_the_requirement_is_confidently_out_of_reach():
    history = curve(lambda it: 0.8 - 0.3 * math.exp(-it / 1500), 3000, scale=0.002)
    assert not opt_stop(history, MAXIMIZE, MAX).stop  # still climbing
    verdict = opt_stop(history, MAXIMIZE, MAX, required=0.95)
    assert verdict.stop
    assert verdict.reason.startswith("required 0.95 out of reach: predicted best ")
    assert not opt_stop(history, MAXIMIZE, MAX, required=0.78).stop  # reachable


@pytest.mark.parametrize(
    ("best", "spread", "current", "required", "out"),
    [
        (0.8, 0.01, 0.7, 0.9, True),
        (0.8, 0.07, 0.7, 0.9, False),  # 0.8 + 1.645 * 0.07 > 0.9: not confident
        (0.8, 0.0, 0.7, 0.8, False),
        (0.8, 0.0, 0.95, 0.9, False),  # already met
    ],
)
def test_out_of_reach_rule(best, spread, current, required, out):
    p = OptStopPrediction(best, spread, current, 100, MAXIMIZE, ("exp",), 0.05)
    assert p.out_of_reach(required, OptStopConfig()) is out


def test_out_of_reach_for_a_minimised_metric():
    p = OptStopPrediction(0.5, 0.01, 0.6, 100, MINIMIZE, ("exp",), -0.05)
    assert p.out_of_reach(0.3, OptStopConfig())
    assert not p.out_of_reach(0.55, OptStopConfig())
