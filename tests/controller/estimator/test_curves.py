"""The training-iteration estimator (UniSched §III-B2): learning-curve ensemble extrapolation.

Expected crossings of the exact synthetic curves are solved by hand in each test's comment.
"""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

from controller.estimator import curves
from controller.estimator.curves import CurvePrediction, predict_target_iteration
from mlsched.model import MetricGoal

MAX = MetricGoal.MAXIMIZE
MIN = MetricGoal.MINIMIZE
FAMILIES = {"pow3", "pow4", "ilog2", "mmf", "weibull", "vapor_pressure"}


def sample(f, iterations) -> list[tuple[int, float]]:
    return [(i, f(i)) for i in iterations]


def assert_close(prediction: CurvePrediction, true: float, rel: float) -> None:
    assert prediction.reached
    assert abs(prediction.iteration - true) <= rel * true, (prediction, true)
    assert prediction.models and set(prediction.models) <= FAMILIES


# --- answered from the history --------------------------------------------------------------


def test_target_already_met_gives_first_observed_iteration():
    history = [(100, 0.5), (200, 0.72), (300, 0.8)]
    assert predict_target_iteration(history, 0.7, MAX, 1000) == CurvePrediction(200, True, ())


def test_target_already_met_minimize():
    history = [(10, 2.0), (20, 1.1), (30, 0.9), (40, 0.95)]
    assert predict_target_iteration(history, 1.0, MIN, 100) == CurvePrediction(30, True, ())


def test_target_met_exactly_counts_and_iteration_zero_is_allowed():
    assert predict_target_iteration([(0, 0.7)], 0.7, MAX, 10) == CurvePrediction(0, True, ())


def test_target_met_only_after_max_iterations_is_not_reached():
    history = [(5, 0.1), (8, 0.2), (12, 0.9)]
    assert predict_target_iteration(history, 0.8, MAX, 10) == CurvePrediction(10, False, ())


# --- the conservative fallback ----------------------------------------------------------------


@pytest.mark.parametrize(
    "history",
    [
        [],
        [(10, 0.2)],
        [(10, 0.2), (20, 0.3)],
        [(10, 0.2), (20, float("nan")), (30, 0.4)],  # NaN is skipped: two usable points
        [(0, 0.1), (10, 0.2), (20, 0.3)],  # iteration 0 is not fitted (x = 0 is singular)
    ],
)
def test_too_few_points_fall_back_to_max_iterations(history):
    assert predict_target_iteration(history, 0.9, MAX, 500) == CurvePrediction(500, False, ())


def test_flat_history_falls_back():
    history = [(i, 0.1) for i in range(10, 110, 10)]
    assert predict_target_iteration(history, 0.5, MAX, 1000) == CurvePrediction(1000, False, ())


def test_history_reaching_max_iterations_falls_back():
    history = [(i, 0.1 * i) for i in range(1, 6)]
    assert predict_target_iteration(history, 0.9, MAX, 5) == CurvePrediction(5, False, ())


# --- exact synthetic curves ---------------------------------------------------------------------


def test_power_law_curve():
    # y = 0.9 - 0.5 (1 + t/100)^-1.5 >= 0.8  <=>  (1 + t/100)^1.5 >= 5  <=>  t >= 100 (5^(2/3) - 1)
    true = 100 * (5 ** (2 / 3) - 1)  # 192.4
    history = sample(lambda t: 0.9 - 0.5 * (1 + t / 100) ** -1.5, range(10, 101, 10))
    assert_close(predict_target_iteration(history, 0.8, MAX, 1000), true, 0.03)


def test_exponential_saturation():
    # y = 0.85 - 0.6 exp(-t/200) >= 0.8  <=>  exp(-t/200) <= 1/12  <=>  t >= 200 ln 12
    true = 200 * math.log(12)  # 497.0
    history = sample(lambda t: 0.85 - 0.6 * math.exp(-t / 200), range(20, 201, 20))
    assert_close(predict_target_iteration(history, 0.8, MAX, 2000), true, 0.05)


def test_minimize_exponential_loss():
    # loss = 0.2 + 2 exp(-t/300) <= 0.3  <=>  exp(-t/300) <= 1/20  <=>  t >= 300 ln 20
    true = 300 * math.log(20)  # 898.7
    history = sample(lambda t: 0.2 + 2 * math.exp(-t / 300), range(30, 451, 30))
    assert_close(predict_target_iteration(history, 0.3, MIN, 2000), true, 0.05)


def test_minimize_power_law_loss():
    # loss = 0.5 + 3 / (1 + t/50) <= 1  <=>  1 + t/50 >= 6  <=>  t >= 250
    history = sample(lambda t: 0.5 + 3 / (1 + t / 50), range(10, 201, 10))
    assert_close(predict_target_iteration(history, 1.0, MIN, 5000), 250, 0.03)


def test_short_history_still_extrapolates():
    # 5 points (in-sample weights); same power law as above, target 0.75:
    # (1 + t/100)^1.5 >= 0.5 / 0.15  <=>  t >= 100 ((10/3)^(2/3) - 1) = 123.0
    true = 100 * ((10 / 3) ** (2 / 3) - 1)
    history = sample(lambda t: 0.9 - 0.5 * (1 + t / 100) ** -1.5, range(10, 51, 10))
    assert_close(predict_target_iteration(history, 0.75, MAX, 1000), true, 0.10)


def test_three_points_fit_only_the_three_parameter_families():
    history = sample(lambda t: 0.9 - 0.5 * (1 + t / 100) ** -1.5, (10, 30, 60))
    prediction = predict_target_iteration(history, 0.8, MAX, 1000)
    assert prediction.models and set(prediction.models) <= {"pow3", "ilog2"}
    assert 60 < prediction.iteration <= 1000


# --- unreachable targets ----------------------------------------------------------------------


def test_target_above_the_asymptote_is_not_reached():
    # y = 0.8 - 0.5 exp(-t/100) never reaches 0.9
    history = sample(lambda t: 0.8 - 0.5 * math.exp(-t / 100), range(10, 301, 10))
    prediction = predict_target_iteration(history, 0.9, MAX, 1000)
    assert (prediction.iteration, prediction.reached) == (1000, False)
    assert prediction.models  # the ensemble was fitted; it says "not by max_iterations"


def test_accuracy_cannot_pass_one():
    history = sample(lambda t: 0.5 + 0.001 * t, range(10, 110, 10))  # straight up, in [0, 1]
    prediction = predict_target_iteration(history, 1.01, MAX, 100_000)
    assert (prediction.iteration, prediction.reached) == (100_000, False)


def test_loss_cannot_drop_below_zero():
    history = sample(lambda t: 2.0 - 0.01 * t, range(10, 110, 10))  # straight down, >= 0
    prediction = predict_target_iteration(history, -0.01, MIN, 100_000)
    assert (prediction.iteration, prediction.reached) == (100_000, False)


def test_max_iterations_just_short_of_the_crossing():
    # exp saturation of test_exponential_saturation crosses 0.8 at ~497: not by 300
    history = sample(lambda t: 0.85 - 0.6 * math.exp(-t / 200), range(20, 201, 20))
    assert predict_target_iteration(history, 0.8, MAX, 300).reached is False


# --- properties ----------------------------------------------------------------------------------


def test_scaling_iterations_scales_the_prediction():
    # Iterations are normalised by max_iterations: the same curve 10^6 times longer crosses
    # 10^6 times later (exercises the multi-round crossing search over 10^9 iterations).
    def f(t: float) -> float:
        return 0.9 - 0.5 * (1 + t / 100) ** -1.5

    small = predict_target_iteration(sample(f, range(10, 101, 10)), 0.8, MAX, 1000)
    history = [(t * 10**6, f(t)) for t in range(10, 101, 10)]
    big = predict_target_iteration(history, 0.8, MAX, 10**9)
    assert big.reached and abs(big.iteration - small.iteration * 10**6) <= 10**6


def test_affine_change_of_metric_and_goal_gives_the_same_prediction():
    # Outside [0, 1] no natural bound applies; z is the same for y, 3y + 7 and (minimised) -y.
    def f(t: float) -> float:  # a BLEU-like score
        return 20 + 15 * (1 - math.exp(-t / 250))

    history = sample(f, range(25, 301, 25))
    base = predict_target_iteration(history, 33.0, MAX, 3000)
    shifted = predict_target_iteration([(t, 3 * y + 7) for t, y in history], 106.0, MAX, 3000)
    negated = predict_target_iteration([(t, -y) for t, y in history], -33.0, MIN, 3000)
    assert base.reached
    assert abs(shifted.iteration - base.iteration) <= 1
    assert abs(negated.iteration - base.iteration) <= 1


def test_higher_target_is_never_earlier():
    history = sample(lambda t: 0.7 - 0.6 * (1 + t / 40) ** -0.8, range(20, 401, 20))
    previous = 0
    for target in (0.5, 0.52, 0.55, 0.58, 0.6, 0.62, 0.65):
        prediction = predict_target_iteration(history, target, MAX, 20_000)
        assert prediction.iteration >= previous
        previous = prediction.iteration


def test_nan_values_are_skipped():
    def f(t: float) -> float:
        return 0.85 - 0.6 * math.exp(-t / 200)

    clean = sample(f, range(20, 201, 20))
    dirty = sorted([*clean, (25, float("nan")), (105, float("inf")), (195, float("-inf"))])
    assert predict_target_iteration(dirty, 0.8, MAX, 2000) == predict_target_iteration(
        clean, 0.8, MAX, 2000
    )


def test_accepts_integral_floats_and_numpy_types():

    def f(t: float) -> float:
        return 0.85 - 0.6 * math.exp(-t / 200)

    history = [(np.int64(t), np.float64(f(t))) for t in range(20, 201, 20)]
    as_floats = [(float(t), y) for t, y in sample(f, range(20, 201, 20))]
    a = predict_target_iteration(history, np.float64(0.8), MAX, np.int64(2000))
    b = predict_target_iteration(as_floats, 0.8, MAX, 2000.0)
    assert a == b and isinstance(a.iteration, int)


def test_noisy_and_odd_histories_never_raise_nor_warn():
    rng = random.Random(7)
    shapes = [
        lambda t: 0.9 - 0.8 * math.exp(-t / 300),
        lambda t: 0.1 + 0.0005 * t,
        lambda t: 5.0 / (1 + t / 30),
        lambda t: 1e6 * math.sin(t) + 1e7,
        lambda t: -50 + 1e-9 * t,
        lambda t: 0.5 + (0.3 if t % 20 else -0.3),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(60):
            f = rng.choice(shapes)
            n = rng.randint(3, 45)
            step = rng.choice([1, 7, 100, 10_000])
            scale = abs(f(step)) + 1e-3
            history = [
                (step * (k + 1), f(step * (k + 1)) + rng.gauss(0, 0.05 * scale)) for k in range(n)
            ]
            last = history[-1][0]
            max_iterations = last + rng.choice([1, 2, 10, 10 * last, 10**9])
            goal = rng.choice([MAX, MIN])
            target = rng.uniform(-2, 2) * scale + f(last)
            prediction = predict_target_iteration(history, target, goal, max_iterations)
            assert 0 <= prediction.iteration <= max_iterations
            if not prediction.reached:
                assert prediction.iteration == max_iterations
            elif prediction.models:
                assert prediction.iteration > last


def test_long_history_is_thinned():
    rng = random.Random(3)
    history = [(t, 0.9 - 0.8 * math.exp(-t / 3000) + rng.gauss(0, 0.01)) for t in range(1, 2001)]
    prediction = predict_target_iteration(history, 0.89, MAX, 50_000)
    assert prediction.models
    assert 2000 < prediction.iteration <= 50_000


# --- the fit itself (internals) ----------------------------------------------------------------


def _family(name: str):
    return next(f for f in curves._FAMILIES if f.name == name)


@pytest.mark.parametrize(
    ("name", "theta"),
    [
        ("pow3", (0.7,)),
        ("pow4", (37.0, 1.3)),
        ("ilog2", (250.0,)),
        ("mmf", (7.0, 1.7)),
        ("weibull", (4.0, 0.9)),
        ("vapor_pressure", (0.05, 0.6)),
    ],
)
def test_each_family_recovers_its_own_curve(name, theta):
    # Shapes between the coarse grid's points (the grid alone misses by RMSE 0.002-0.03):
    # least squares from the best grid point lands on them.
    family = _family(name)
    x = np.linspace(0.02, 0.5, 25)
    y = family.h(x, *theta)
    z = (y - y.min()) / (y.max() - y.min())
    (fits,) = curves._fit_families(x, z, 5.0, (25,))
    residual = z - fits[name](x)
    assert math.sqrt(residual @ residual / 25) < 1e-6
    assert fits[name].params[2:] == pytest.approx(theta, rel=1e-6)


def _bounded_reference(family, x, z, cap) -> float:
    """SSE of scipy's trust-region least squares with the bounds themselves (method trf) on
    the same projected residuals, the best from the three best grid points."""
    from scipy.optimize import least_squares

    xs, n = np.append(x, 1.0), z.size

    def residuals(u):
        h = family.h(xs, *family.theta(u.tolist()))
        c, a, _ = curves._solve(h[None, :], np.array([n]), z, cap)
        return c[0] + a[0] * h[:n] - z

    h = family.h(xs[None, :], *family.coarse_theta)
    _, _, sse = curves._solve(h, np.full(h.shape[0], n), z, cap)
    bounds = (family.low, family.high)
    starts = family.coarse[np.argsort(sse)[:3]]
    return min(2 * least_squares(residuals, u, bounds=bounds).cost for u in starts)


def test_fits_match_scipy_bounded_least_squares():
    # These noisy curves put several optima on a bound (pow4's rate, MMF's and Weibull's
    # sharpness, vapor pressure's s = 0), where the sine transform is slowest.
    rng = random.Random(5)
    shapes = [
        lambda t: 0.2 + 0.7 * (1 - math.exp(-((t / 300) ** 4))),
        lambda t: 0.9 - 0.5 * (1 + t / 100) ** -1.5,
        lambda t: 0.1 + 0.0005 * t,
        lambda t: 0.3 if t < 200 else 0.8,
    ]
    for f in shapes:
        its = np.arange(25, 601, 25)
        y = np.array([f(t) + rng.gauss(0, 0.01) for t in its])
        x, z = its / 2000, (y - y.min()) / (y.max() - y.min())
        cap = (1 - y.min()) / (y.max() - y.min())
        (fits,) = curves._fit_families(x, z, cap, (z.size,))
        for family in curves._FAMILIES:
            residual = z - fits[family.name](x)
            best = _bounded_reference(family, x, z, cap)
            assert residual @ residual <= best * (1 + 1e-3) + 1e-12, family.name


def test_one_candidate_projection_agrees_with_the_batched_one():
    # Random rising and falling h: the bounds bind in about half of the cases, and the end of
    # the run is above 0 (vapor pressure's constraint) in most.
    gen = np.random.default_rng(11)
    for _ in range(200):
        n = int(gen.integers(3, 30))
        m = int(gen.integers(3, n + 1))
        z = gen.uniform(0, 1, n)
        h = np.sort(gen.normal(0, 2, n + 1)) * gen.choice([1.0, -1.0, 1e-9])
        cap = float(gen.choice([1.0, 1.2, 5.0]))
        c, a, _ = curves._solve(h[None, :], np.array([m]), z, cap)
        hm, zm = np.append(h[:m], h[n]), z[:m]
        d, a1, g = curves._project(hm, zm, float(zm.sum()), float(zm @ zm), cap)
        assert a1 == pytest.approx(a[0], rel=1e-9, abs=1e-9)
        assert d + a1 * g == pytest.approx(c[0] + a[0] * h[:m], rel=1e-9, abs=1e-9)


# --- invalid arguments ----------------------------------------------------------------------------

GOOD = [(10, 0.1), (20, 0.2), (30, 0.3)]


@pytest.mark.parametrize(
    ("history", "target", "goal", "max_iterations", "message"),
    [
        (GOOD, 0.5, MAX, 0, "max_iterations must be >= 1"),
        (GOOD, 0.5, MAX, -5, "max_iterations must be >= 1"),
        (GOOD, 0.5, MAX, 10.5, "max_iterations must be an integer"),
        (GOOD, float("nan"), MAX, 100, "target must be finite"),
        (GOOD, float("inf"), MAX, 100, "target must be finite"),
        (GOOD, "high", MAX, 100, "target must be a number"),
        (GOOD, 0.5, "max", 100, "goal must be a MetricGoal"),
        ([(10, 0.1), (10, 0.2), (30, 0.3)], 0.5, MAX, 100, "strictly increasing"),
        ([(10, 0.1), (30, 0.2), (20, 0.3)], 0.5, MAX, 100, "strictly increasing"),
        ([(-1, 0.1), (10, 0.2)], 0.5, MAX, 100, "must be >= 0"),
        ([(1.5, 0.1), (10, 0.2)], 0.5, MAX, 100, "must be an integer"),
        ([(10, 0.1, 3)], 0.5, MAX, 100, r"\(iteration, value\) pair"),
        ([(10, "x")], 0.5, MAX, 100, "value must be a number"),
    ],
)
def test_invalid_arguments_raise_value_error(history, target, goal, max_iterations, message):
    with pytest.raises(ValueError, match=message):
        predict_target_iteration(history, target, goal, max_iterations)
