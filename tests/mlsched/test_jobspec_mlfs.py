"""The ``mlfs:`` section of a job spec (MLFS §3.1, §3.3.1, §3.5): parsing and every error."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsched.jobspec import (
    SpecError,
    load_spec_file,
    mlfs_to_dict,
    parse_spec,
    tracked_metric,
    validate_spec,
    watched_metric,
)
from mlsched.model import IterationStop, MetricGoal, MlfsSpec, StopOption, TargetMetricStop

TARGET = {"metric": "loss", "target": 0.1, "goal": "min", "max_iterations": 500}


def doc(mlfs=..., **fields) -> dict:
    base = {"name": "mlp", "command": "python mlp.py", "gpus": 1, "stop": {"iterations": 100}}
    base.update(fields)
    if mlfs is not ...:
        base["mlfs"] = mlfs
    return base


def problems_of(data) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.problems


def only_problem(data) -> str:
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


# --- valid sections --------------------------------------------------------------------------


def test_no_section_and_an_empty_one_give_the_defaults():
    assert parse_spec(doc()).mlfs == MlfsSpec()
    assert parse_spec(doc({})).mlfs == MlfsSpec()
    assert parse_spec(doc(None)).mlfs == MlfsSpec()


def test_every_field():
    spec = parse_spec(
        doc(
            {
                "urgency": 7.5,
                "partitions": [0.5, 0.25, 0.25],
                "dependencies": [[0, 1], {"parent": 1, "child": 2}, [0, 2]],
                "stop_option": "opt-stop",
                "system_may_switch": True,
                "required_accuracy": 0.8,
            },
            gpus=3,
        )
    )
    assert spec.mlfs == MlfsSpec(
        urgency=7.5,
        partitions=(0.5, 0.25, 0.25),
        dependencies=((0, 1), (1, 2), (0, 2)),
        stop_option=StopOption.OPT_STOP,
        system_may_switch=True,
        required_accuracy=0.8,
    )


@pytest.mark.parametrize("option", list(StopOption))
def test_each_stop_option(option):
    spec = parse_spec(doc({"stop_option": option.value, "required_accuracy": 0.5}))
    assert spec.mlfs.stop_option is option


@pytest.mark.parametrize("urgency", [1, 10, 1.0, 5.5])
def test_urgency_bounds_are_inclusive(urgency):
    assert parse_spec(doc({"urgency": urgency})).mlfs.urgency == urgency


def test_partitions_may_sum_to_one_within_rounding():
    spec = parse_spec(doc({"partitions": [0.1] * 10}, gpus=10))
    assert spec.mlfs.partitions == (0.1,) * 10


def test_partitions_count_processes_not_gpus():
    spec = parse_spec(doc({"partitions": [0.5, 0.5]}, gpus=4, gpus_per_process=2))
    assert spec.mlfs.partitions == (0.5, 0.5)


def test_required_accuracy_of_a_target_metric_job_is_in_its_metric_units():
    spec = parse_spec(
        doc({"stop_option": "required-accuracy", "required_accuracy": 2}, stop=TARGET)
    )
    assert spec.mlfs.required_accuracy == 2.0


def test_yaml_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: mlp\ncommand: python mlp.py\ngpus: 2\nstop: {iterations: 100}\n"
        "mlfs:\n  urgency: 3\n  partitions: [0.6, 0.4]\n  dependencies: [[0, 1]]\n"
        "  stop_option: required-accuracy\n  required_accuracy: 0.9\n"
    )
    mlfs = load_spec_file(path).mlfs
    assert mlfs == MlfsSpec(3.0, (0.6, 0.4), ((0, 1),), StopOption.REQUIRED, False, 0.9)


def test_validate_spec_accepts_what_parse_spec_built_and_judges_mlfs():
    spec = parse_spec(
        doc({"partitions": [0.5, 0.5], "dependencies": [[0, 1]], "urgency": 2}, gpus=2)
    )
    validate_spec(spec)
    validate_spec(replace(spec, mlfs=MlfsSpec()))
    with pytest.raises(SpecError, match=r"mlfs\.urgency"):
        validate_spec(replace(spec, mlfs=MlfsSpec(urgency=11.0)))
    cyclic = MlfsSpec(partitions=(0.5, 0.5), dependencies=((0, 1), (1, 0)))
    with pytest.raises(SpecError, match="cycle"):
        validate_spec(replace(spec, mlfs=cyclic))


def test_mlfs_to_dict_round_trips_through_parse_spec():
    mlfs = MlfsSpec(4.0, (0.75, 0.25), ((1, 0),), StopOption.OPT_STOP, True, 0.7)
    assert parse_spec(doc(mlfs_to_dict(mlfs), gpus=2)).mlfs == mlfs
    assert parse_spec(doc(mlfs_to_dict(MlfsSpec()))).mlfs == MlfsSpec()


# --- the metric MLF-C watches ----------------------------------------------------------------


def test_watched_metric_is_the_target_metric_else_accuracy():
    spec = parse_spec(doc())
    assert watched_metric(spec) == ("accuracy", MetricGoal.MAXIMIZE)
    target = replace(spec, stopping=TargetMetricStop("loss", 0.1, MetricGoal.MINIMIZE, 9))
    assert watched_metric(target) == ("loss", MetricGoal.MINIMIZE)


def test_tracked_metric_only_for_target_jobs_and_jobs_mlf_c_may_stop():
    plain = parse_spec(doc())
    assert tracked_metric(plain) is None
    assert tracked_metric(replace(plain, mlfs=MlfsSpec(system_may_switch=True))) == "accuracy"
    opt = replace(plain, mlfs=MlfsSpec(stop_option=StopOption.OPT_STOP))
    assert tracked_metric(opt) == "accuracy"
    target = replace(plain, stopping=TargetMetricStop("mAP", 0.5, MetricGoal.MAXIMIZE, 9))
    assert tracked_metric(target) == "mAP"
    assert tracked_metric(replace(plain, stopping=IterationStop(5))) is None


# --- errors name the field -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mlfs", "problem"),
    [
        (
            [1, 2],
            "mlfs: must be a mapping with fields urgency, partitions, dependencies, "
            "stop_option, system_may_switch, required_accuracy",
        ),
        (
            {"urgent": 3},
            "mlfs: unknown field(s): urgent; valid: urgency, partitions, "
            "dependencies, stop_option, system_may_switch, required_accuracy",
        ),
        ({"urgency": 0}, "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got 0"),
        (
            {"urgency": 10.5},
            "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got 10.5",
        ),
        (
            {"urgency": "high"},
            "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got 'high'",
        ),
        (
            {"urgency": True},
            "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got True",
        ),
        (
            {"urgency": float("nan")},
            "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got nan",
        ),
        ({"partitions": 1.0}, "mlfs.partitions: a list of positive shares summing to 1, got 1.0"),
        (
            {"partitions": [1.0, 0.0]},
            "mlfs.partitions[1]: a positive number (a share of the model), got 0.0",
        ),
        (
            {"partitions": [-0.5, 1.5]},
            "mlfs.partitions[0]: a positive number (a share of the model), got -0.5",
        ),
        (
            {"partitions": ["a"]},
            "mlfs.partitions[0]: a positive number (a share of the model), got 'a'",
        ),
        ({"partitions": [0.5, 0.4]}, "mlfs.partitions: the shares must sum to 1, they sum to 0.9"),
        (
            {"partitions": [0.5, 0.5]},
            "mlfs.partitions: one per process, 1 (gpus / gpus_per_process); got 2",
        ),
        (
            {"dependencies": [[0, 1]]},
            "mlfs.dependencies: needs mlfs.partitions (they are partition indices)",
        ),
        (
            {"stop_option": "early"},
            "mlfs.stop_option: one of iterations, opt-stop, required-accuracy; got 'early'",
        ),
        (
            {"stop_option": "required-accuracy"},
            "mlfs.required_accuracy: required with stop_option required-accuracy",
        ),
        ({"system_may_switch": "yes"}, "mlfs.system_may_switch: true or false, got 'yes'"),
        ({"required_accuracy": "0.8"}, "mlfs.required_accuracy: a finite number, got '0.8'"),
        ({"required_accuracy": float("inf")}, "mlfs.required_accuracy: a finite number, got inf"),
        (
            {"required_accuracy": 80},
            "mlfs.required_accuracy: an accuracy between 0 and 1 (the "
            "job reports 'accuracy' as a fraction), got 80",
        ),
    ],
)
def test_errors(mlfs, problem):
    assert only_problem(doc(mlfs)) == problem


@pytest.mark.parametrize(
    ("dependencies", "problem"),
    [
        ({"0": 1}, "mlfs.dependencies: a list of [parent, child] pairs, got {'0': 1}"),
        (
            [[0, 1, 2]],
            "mlfs.dependencies[0]: a [parent, child] pair of partition indices, got [0, 1, 2]",
        ),
        (
            [{"parent": 0}],
            "mlfs.dependencies[0]: a [parent, child] pair of partition indices, got {'parent': 0}",
        ),
        ([[0, 1], [0, "2"]], "mlfs.dependencies[1]: partition indices are integers, got [0, '2']"),
        ([[0, True]], "mlfs.dependencies[0]: partition indices are integers, got [0, True]"),
        ([[0, 3]], "mlfs.dependencies[0]: partition indices are 0 to 2, got [0, 3]"),
        ([[-1, 0]], "mlfs.dependencies[0]: partition indices are 0 to 2, got [-1, 0]"),
        ([[1, 1]], "mlfs.dependencies[0]: partition 1 cannot depend on itself"),
        ([[0, 1], [0, 1]], "mlfs.dependencies[1]: [0, 1] is listed twice"),
        (
            [[0, 1], [1, 2], [2, 0]],
            "mlfs.dependencies: must not form a cycle; found 0 -> 1 -> 2 -> 0",
        ),
        ([[0, 2], [2, 1], [1, 2]], "mlfs.dependencies: must not form a cycle; found 2 -> 1 -> 2"),
    ],
)
def test_dependency_errors(dependencies, problem):
    mlfs = {"partitions": [0.5, 0.25, 0.25], "dependencies": dependencies}
    assert only_problem(doc(mlfs, gpus=3)) == problem


def test_a_diamond_is_a_dag():
    mlfs = {"partitions": [0.25] * 4, "dependencies": [[0, 1], [0, 2], [1, 3], [2, 3]]}
    assert parse_spec(doc(mlfs, gpus=4)).mlfs.dependencies == ((0, 1), (0, 2), (1, 3), (2, 3))


def test_every_mlfs_problem_is_listed_with_the_others():
    problems = problems_of(doc({"urgency": 0, "stop_option": "x", "system_may_switch": 1}, gpus=0))
    assert problems == [
        "gpus: must be between 1 and 1024, got 0",
        "mlfs.urgency: a number from 1 (least urgent) to 10 (most urgent), got 0",
        "mlfs.stop_option: one of iterations, opt-stop, required-accuracy; got 'x'",
        "mlfs.system_may_switch: true or false, got 1",
    ]


def test_partition_count_is_not_judged_when_the_gpus_are_wrong():
    problems = problems_of(doc({"partitions": [0.5, 0.5]}, gpus=3, gpus_per_process=2))
    assert problems == ["gpus (3) must be a multiple of gpus_per_process (2)"]
