"""The ``elastic`` section: validation naming the field, and both encodings (issue 14)."""

from __future__ import annotations

import pytest

from controller.store.codec import spec_from_dict, spec_to_dict
from mlsched.jobspec import SpecError, parse_spec, validate_spec
from mlsched.model import BatchRule, ElasticSpec
from mlsched.serde import spec_from_proto, spec_to_proto

BASE = {"name": "el", "command": "python t.py", "gpus": 2, "stop": {"iterations": 10}}


def parse(elastic, **top):
    return parse_spec({**BASE, "batch_size": 64, **top, "elastic": elastic})


def problems(elastic, **top):
    with pytest.raises(SpecError) as info:
        parse(elastic, **top)
    return info.value.problems


def test_a_full_section_parses():
    spec = parse(
        {
            "min_gpus": 1,
            "max_gpus": 4,
            "batch": "scheduler",
            "max_batch_size": 512,
            "lr_scaling": "linear",
        }
    )
    assert spec.elastic == ElasticSpec(1, 4, BatchRule.SCHEDULER, 512, True)
    assert spec.elastic.enabled


def test_defaults_fixed_global_without_scaling():
    spec = parse({"min_gpus": 1, "max_gpus": 4})
    assert spec.elastic == ElasticSpec(1, 4, BatchRule.FIXED_GLOBAL, 0, False)


def test_no_section_is_a_rigid_job():
    spec = parse_spec({**BASE})
    assert spec.elastic == ElasticSpec() and not spec.elastic.enabled


@pytest.mark.parametrize(
    ("elastic", "top", "expected"),
    [
        ({"min_gpus": 4, "max_gpus": 2}, {}, "elastic.min_gpus (4) must not exceed"),
        ({"min_gpus": 3, "max_gpus": 4}, {}, "gpus (2) must lie within elastic.min_gpus"),
        ({"max_gpus": 4}, {}, "elastic.min_gpus: required"),
        ({"min_gpus": 1, "max_gpus": 0}, {}, "elastic.max_gpus: an integer"),
        (
            {"min_gpus": 1, "max_gpus": 3},
            {"gpus_per_process": 2},
            "elastic.min_gpus (1) must be a multiple of gpus_per_process",
        ),
        ({"min_gpus": 1, "max_gpus": 4, "batch": "adaptive"}, {}, "elastic.batch: one of"),
        ({"min_gpus": 1, "max_gpus": 4, "lr_scaling": "sqrt"}, {}, "elastic.lr_scaling: none"),
        (
            {"min_gpus": 1, "max_gpus": 4, "lr_scaling": "linear"},
            {},
            "elastic.lr_scaling: linear needs a batch that changes",
        ),
        ({"min_gpus": 1, "max_gpus": 128}, {}, "batch_size (64) must be at least elastic.max_gpus"),
        (
            {"min_gpus": 1, "max_gpus": 4, "batch": "fixed-per-gpu"},
            {"batch_size": 63},
            "batch_size (63) must be divisible by gpus (2)",
        ),
        (
            {"min_gpus": 1, "max_gpus": 4, "batch": "scheduler"},
            {},
            "elastic.max_batch_size: required with batch: scheduler",
        ),
        (
            {"min_gpus": 1, "max_gpus": 4, "batch": "scheduler", "max_batch_size": 32},
            {},
            "elastic.max_batch_size (32) must be at least batch_size (64)",
        ),
        (
            {"min_gpus": 1, "max_gpus": 4, "max_batch_size": 128},
            {},
            "elastic.max_batch_size: only with batch: scheduler",
        ),
        (
            {"min_gpus": 1, "max_gpus": 4},
            {"batch_size": 0},
            "batch_size: required (> 0) with elastic.batch: fixed-global",
        ),
        ({"min_gpus": 1, "max_gpus": 4, "stretch": 2}, {}, "elastic: unknown field(s): stretch"),
        ([1, 4], {}, "elastic: must be a mapping"),
    ],
)
def test_bad_combinations_name_the_field(elastic, top, expected):
    found = problems(elastic, **top)
    assert any(expected in p for p in found), found


def test_batch_and_lr_rules_by_hand():
    per_gpu = ElasticSpec(1, 8, BatchRule.FIXED_PER_GPU, 0, True)
    assert per_gpu.batch_size(64, 2, 8) == 256  # 32 a GPU, on 8 GPUs
    assert per_gpu.lr_scale(64, 256) == 4.0
    fixed = ElasticSpec(1, 8, BatchRule.FIXED_GLOBAL)
    assert fixed.batch_size(64, 2, 8) == 64 and fixed.lr_scale(64, 64) == 1.0


def test_wire_store_and_validation_round_trip():
    spec = parse({"min_gpus": 2, "max_gpus": 8, "batch": "fixed-per-gpu", "lr_scaling": "linear"})
    assert spec_from_proto(spec_to_proto(spec)) == spec
    assert spec_from_dict(spec_to_dict(spec)) == spec
    validate_spec(spec)  # the wire path judges it by the same rules
    rigid = parse_spec({**BASE})
    assert not spec_to_proto(rigid).HasField("elastic")
    assert spec_from_dict(spec_to_dict(rigid)) == rigid


def test_rows_written_before_elastic_still_load():
    spec = parse({"min_gpus": 1, "max_gpus": 4})
    old = spec_to_dict(spec)
    del old["elastic"]
    assert spec_from_dict(old).elastic == ElasticSpec()
