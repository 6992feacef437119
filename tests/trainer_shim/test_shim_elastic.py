"""The shim's elastic scale (issue 14): world size, global and per-GPU batch, learning-rate
scale, and callbacks when a batch changes in place."""

from __future__ import annotations

import pytest
import torch

import trainer_shim
from trainer_shim.elastic import Scale, from_env

ELASTIC = {
    "MLSCHED_ELASTIC_BATCH_SIZE": "96",
    "MLSCHED_BASE_BATCH_SIZE": "64",
    "MLSCHED_LR_SCALING": "linear",
}


def test_the_controller_s_batch_is_split_over_the_ranks_and_scales_the_learning_rate():
    scale, elastic = from_env(ELASTIC, world_size=4, rank=1, batch_size=64)
    assert elastic
    assert (scale.batch_size, scale.per_gpu_batch_size, scale.lr_scale) == (96, 24, 1.5)
    uneven = Scale(world_size=4, rank=1, batch_size=10, base_batch_size=10)
    assert [Scale(4, r, 10, 10).per_gpu_batch_size for r in range(4)] == [3, 3, 2, 2]
    assert uneven.lr_scale == 1.0  # no linear scaling asked for


def test_a_job_that_is_not_elastic_keeps_its_batch_and_learning_rate():
    scale, elastic = from_env({}, world_size=2, rank=0, batch_size=128)
    assert not elastic
    assert (scale.batch_size, scale.per_gpu_batch_size, scale.lr_scale) == (128, 64, 1.0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("MLSCHED_ELASTIC_BATCH_SIZE", "0", "must be at least 1"),
        ("MLSCHED_BASE_BATCH_SIZE", "many", "is not an integer"),
        ("MLSCHED_LR_SCALING", "sqrt", "linear or none"),
    ],
)
def test_a_bad_variable_is_named(key, value, message):
    with pytest.raises(ValueError, match=f"{key}.*{message}"):
        from_env({**ELASTIC, key: value}, 1, 0, None)


def test_a_batch_change_calls_back_once_at_the_step_boundary(tmp_path):
    seen: list[Scale] = []
    with trainer_shim.init(environ=ELASTIC, checkpoint_dir=tmp_path, batch_size=32) as job:
        assert job.scale.batch_size == 96  # the controller's batch outranks the script's
        job.on_scale_change(seen.append)
        job.control.request_batch_size(192)
        assert seen == []  # nothing happens between step boundaries
        assert not job.should_stop()  # a step boundary: the change is applied here
        assert [(s.batch_size, s.lr_scale) for s in seen] == [(192, 3.0)]
        assert not job.should_stop()
        assert len(seen) == 1
        job.control.request_batch_size(192)  # the same batch again: no call
        assert job.check_scale() is None and len(seen) == 1


@pytest.mark.parametrize(("environ", "expected"), [(ELASTIC, 96), ({}, 40)])
def test_on_resume_the_controller_s_batch_outranks_the_checkpoint_s(tmp_path, environ, expected):
    model = torch.nn.Linear(2, 2)
    with trainer_shim.init(environ={}, checkpoint_dir=tmp_path, batch_size=32) as job:
        job.restore(model)
        job.report(1, batch_size=40)
        job.save_checkpoint(1, model)
    seen: list[Scale] = []
    with trainer_shim.init(
        environ=environ, checkpoint_dir=tmp_path, batch_size=32, resume=True
    ) as job:
        job.on_scale_change(seen.append)
        assert job.restore(model) == 1
        assert job.scale.batch_size == expected
        assert [s.batch_size for s in seen] == ([] if environ else [40])
