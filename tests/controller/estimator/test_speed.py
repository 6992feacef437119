"""Eq. 2 from profiling samples."""

import pytest

from controller.estimator.speed import fit_speed_model
from mlsched.model import SpeedSample


def test_eq2_from_compute_time_and_two_gpu_samples():
    model = fit_speed_model(
        [SpeedSample(2, 1, 1.2, compute_time_s=1.0), SpeedSample(2, 2, 1.5, compute_time_s=1.0)]
    )
    assert model is not None
    assert (model.t_comp, model.t_intra, model.t_inter) == pytest.approx((1.0, 0.2, 0.5))
    assert model.iteration_time(1, 1) == 1.0
    assert model.iteration_time(6, 1) == pytest.approx(1.0 + 5 * 0.2)
    assert model.iteration_time(6, 2) == pytest.approx(1.0 + 5 * 0.5)
    assert model.iteration_time(2, 1) == 1.2  # measured shape: the measurement itself


def test_missing_inter_node_cost_is_derived_with_the_ratio():
    model = fit_speed_model([SpeedSample(1, 1, 1.0), SpeedSample(2, 1, 1.1)], inter_node_ratio=2)
    assert model is not None
    assert model.t_intra == pytest.approx(0.1)
    assert model.t_inter == pytest.approx(0.2)


def test_without_compute_time_smallest_sample_stands_in():
    model = fit_speed_model([SpeedSample(2, 1, 0.8)])
    assert model is not None
    assert model.t_comp == 0.8 and model.t_intra == 0.0
    assert fit_speed_model([]) is None
    with pytest.raises(ValueError):
        model.iteration_time(2, 3)
