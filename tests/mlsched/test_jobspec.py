"""Job specs: parsing, validation and every error message path."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from mlsched.jobspec import (
    MAX_GPUS,
    SpecError,
    load_spec_file,
    parse_duration,
    parse_spec,
    stopping_to_dict,
    validate_spec,
)
from mlsched.model import (
    Deadline,
    IterationStop,
    JobClass,
    JobSpec,
    MetricGoal,
    TargetMetricStop,
)


def doc(**fields) -> dict:
    """A valid minimal spec document, with ``fields`` replacing or adding fields."""
    base = {"name": "mlp", "command": "python mlp.py", "gpus": 1, "stop": {"iterations": 100}}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not ...}


def problems_of(data, base_dir: Path | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(data, base_dir)
    return info.value.problems


def only_problem(data) -> str:
    problems = problems_of(data)
    assert len(problems) == 1, problems
    return problems[0]


# --- valid specs -----------------------------------------------------------------------------


def test_minimal_spec_gets_the_defaults():
    assert parse_spec(doc()) == JobSpec(
        name="mlp",
        command=("python", "mlp.py"),
        gpus=1,
        stopping=IterationStop(100),
        job_class=JobClass.BEST_EFFORT,
        deadlines=(),
        gpus_per_process=1,
        working_dir="",
        env=(),
        max_retries=0,
        batch_size=0,
    )


def test_command_string_is_split_like_a_shell():
    spec = parse_spec(doc(command="torchrun  train.py --tag 'run a' --lr=0.1"))
    assert spec.command == ("torchrun", "train.py", "--tag", "run a", "--lr=0.1")


def test_command_list_is_kept_and_numbers_become_strings():
    spec = parse_spec(doc(command=["python", "train.py", "--epochs", 3, "--lr", 0.5, "a b"]))
    assert spec.command == ("python", "train.py", "--epochs", "3", "--lr", "0.5", "a b")


def test_best_effort_class_explicitly():
    assert parse_spec(doc(**{"class": "best-effort"})).job_class is JobClass.BEST_EFFORT


def test_strict_slo_with_one_deadline_and_the_default_reward():
    spec = parse_spec(doc(**{"class": "strict-slo", "deadlines": [{"after": "30m"}]}))
    assert spec.job_class is JobClass.STRICT_SLO
    assert spec.deadlines == (Deadline(1800.0, 100.0),)


def test_soft_slo_with_decreasing_rewards():
    spec = parse_spec(
        doc(
            **{
                "class": "soft-slo",
                "deadlines": [
                    {"after": "90s", "reward": 100},
                    {"after": "30m", "reward": 60.5},
                    {"after": "2h", "reward": 60.5},  # equal reward is allowed
                    {"after": 86401, "reward": 0},
                ],
            }
        )
    )
    assert spec.job_class is JobClass.SOFT_SLO
    assert spec.deadlines == (
        Deadline(90.0, 100.0),
        Deadline(1800.0, 60.5),
        Deadline(7200.0, 60.5),
        Deadline(86401.0, 0.0),
    )
    assert all(isinstance(d.reward, float) for d in spec.deadlines)


def test_target_metric_stop_defaults_to_maximize():
    spec = parse_spec(doc(stop={"metric": "accuracy", "target": 0.9, "max_iterations": 5000}))
    assert spec.stopping == TargetMetricStop("accuracy", 0.9, MetricGoal.MAXIMIZE, 5000)


def test_target_metric_stop_minimize_with_integer_target():
    spec = parse_spec(doc(stop={"metric": "loss", "target": 1, "goal": "min", "max_iterations": 7}))
    assert spec.stopping == TargetMetricStop("loss", 1.0, MetricGoal.MINIMIZE, 7)
    assert isinstance(spec.stopping.target, float)


def test_every_optional_field():
    spec = parse_spec(
        doc(
            gpus=4,
            gpus_per_process=2,
            env={"SEED": 7, "A_VAR": "x", "_B": True},
            working_dir="/data/run",
            max_retries=100,
            batch_size=10**7,
        )
    )
    assert (spec.gpus, spec.gpus_per_process, spec.num_tasks) == (4, 2, 2)
    assert spec.env == (("A_VAR", "x"), ("SEED", "7"), ("_B", "True"))
    assert spec.working_dir == "/data/run"
    assert (spec.max_retries, spec.batch_size) == (100, 10**7)


def test_limits_are_inclusive():
    spec = parse_spec(doc(gpus=MAX_GPUS, gpus_per_process=MAX_GPUS, stop={"iterations": 10**12}))
    assert spec.gpus == 1024 and spec.num_tasks == 1
    assert spec.stopping == IterationStop(10**12)


def test_name_may_be_63_characters():
    name = "a" + "b" * 62
    assert parse_spec(doc(name=name)).name == name


def test_null_optional_fields_take_their_defaults():
    spec = parse_spec(
        doc(gpus_per_process=None, max_retries=None, deadlines=None, env=None, batch_size=None)
    )
    assert (spec.gpus_per_process, spec.max_retries, spec.deadlines, spec.env) == (1, 0, (), ())


def test_relative_working_dir_resolves_against_the_base_dir(tmp_path):
    assert parse_spec(doc(working_dir="runs/a"), tmp_path).working_dir == str(tmp_path / "runs/a")
    assert parse_spec(doc(working_dir="/abs"), tmp_path).working_dir == "/abs"
    assert parse_spec(doc(), tmp_path).working_dir == str(tmp_path)
    assert parse_spec(doc(working_dir="rel")).working_dir == "rel"


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30m", 1800.0),
        ("90s", 90.0),
        ("2h", 7200.0),
        ("1.5d", 129600.0),
        ("45", 45.0),
        (" 10 m ", 600.0),
        ("0.5h", 1800.0),
        (60, 60.0),
        (2.5, 2.5),
    ],
)
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        None,
        "0",
        "0m",
        0,
        -5,
        "-5m",
        "5 minutes",
        "m",
        "",
        "1e3",
        "3w",
        [30],
        math.inf,
        math.nan,
    ],
)
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError):
        parse_duration(value)


def test_parse_duration_messages():
    with pytest.raises(ValueError, match="a duration, not a boolean"):
        parse_duration(True)
    with pytest.raises(ValueError, match=r"expected seconds or a duration like 30m, got 'soon'"):
        parse_duration("soon")
    with pytest.raises(ValueError, match=r"must be positive, got '0s'"):
        parse_duration("0s")


# --- error paths -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [None, [], ["name", "x"], "name: x", 42])
def test_spec_must_be_a_mapping(data):
    assert problems_of(data) == ["the spec must be a mapping of fields (name, command, gpus, ...)"]


def test_unknown_fields_are_listed_with_the_valid_ones():
    problem = only_problem(doc(gpu=2, Stop=1))
    assert problem == (
        "unknown field(s): Stop, gpu; valid: batch_size, class, command, deadlines, elastic, env, "
        "gpus, gpus_per_process, launcher, max_retries, mlfs, name, ps, stop, suspend_grace, "
        "working_dir"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (..., "name: required"),
        (None, "name: required"),
        (
            "-lead",
            "name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got '-lead'",
        ),
        ("", "name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got ''"),
        (
            "has space",
            "name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got 'has space'",
        ),
        (123, "name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got 123"),
        (
            "a" * 64,
            f"name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got '{'a' * 64}'",
        ),
    ],
)
def test_bad_names(name, message):
    assert only_problem(doc(name=name)) == message


def test_name_with_a_trailing_newline_is_rejected():
    assert only_problem(doc(name="mlp\n")).startswith("name:")


def test_env_name_with_a_trailing_newline_is_rejected():
    assert only_problem(doc(env={"SEED\n": 1})) == "env: invalid variable name 'SEED\\n'"


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (..., "gpus: required"),
        (None, "gpus: required"),
        (0, "gpus: must be between 1 and 1024, got 0"),
        (-2, "gpus: must be between 1 and 1024, got -2"),
        (1025, "gpus: must be between 1 and 1024, got 1025"),
        ("2", "gpus: must be an integer, got '2'"),
        (2.0, "gpus: must be an integer, got 2.0"),
        (True, "gpus: must be an integer, got True"),
    ],
)
def test_bad_gpus(gpus, message):
    assert only_problem(doc(gpus=gpus)) == message


@pytest.mark.parametrize(
    ("gpus", "per_process", "message"),
    [
        (3, 2, "gpus (3) must be a multiple of gpus_per_process (2)"),
        (1, 2, "gpus (1) must be a multiple of gpus_per_process (2)"),
        (2, 0, "gpus_per_process: must be between 1 and 1024, got 0"),
        (2, 2000, "gpus_per_process: must be between 1 and 1024, got 2000"),
    ],
)
def test_bad_gpus_per_process(gpus, per_process, message):
    assert only_problem(doc(gpus=gpus, gpus_per_process=per_process)) == message


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (..., "command: required (a string or a list of arguments)"),
        (None, "command: required (a string or a list of arguments)"),
        ("", "command: must not be empty"),
        ("   ", "command: must not be empty"),
        ([], "command: must not be empty"),
        (["", "x.py"], "command: must not be empty"),
        ([" ", "x.py"], "command: must not be empty"),
        ({"run": "x"}, "command: a string or a list of strings, got dict"),
        (["python", ["x.py"]], "command: a string or a list of strings, got list"),
        (["python", None], "command: a string or a list of strings, got list"),
        (7, "command: a string or a list of strings, got int"),
        ("python 'unclosed", "command: cannot split into words: No closing quotation"),
    ],
)
def test_bad_commands(command, message):
    assert only_problem(doc(command=command)) == message


@pytest.mark.parametrize("value", ["gold", "", None, "BEST-EFFORT", 1])
def test_bad_class(value):
    assert only_problem(doc(**{"class": value})) == (
        f"class: must be one of best-effort, strict-slo, soft-slo; got {value!r}"
    )


def test_bad_class_skips_the_class_specific_deadline_rules():
    problems = problems_of(doc(**{"class": "gold", "deadlines": [{"after": 60}]}))
    assert problems == ["class: must be one of best-effort, strict-slo, soft-slo; got 'gold'"]


@pytest.mark.parametrize(
    ("job_class", "deadlines", "message"),
    [
        (
            "best-effort",
            [{"after": "1h"}],
            "deadlines: a best-effort job has none (use class strict-slo or soft-slo)",
        ),
        ("strict-slo", [], "deadlines: a strict-slo job has exactly one, got 0"),
        (
            "strict-slo",
            [{"after": "1h"}, {"after": "2h"}],
            "deadlines: a strict-slo job has exactly one, got 2",
        ),
        ("soft-slo", [], "deadlines: a soft-slo job needs at least one"),
        (
            "soft-slo",
            [{"after": "1h", "reward": 10}, {"after": "2h", "reward": 20}],
            "deadlines: a later deadline cannot pay a larger reward",
        ),
        (
            "soft-slo",
            [{"after": "2h", "reward": 10}, {"after": "1h", "reward": 5}],
            "deadlines: must be in increasing order of 'after'",
        ),
        (
            "soft-slo",
            [{"after": "1h", "reward": 10}, {"after": 3600, "reward": 5}],
            "deadlines: must be in increasing order of 'after'",
        ),
        ("soft-slo", {"after": "1h"}, "deadlines: must be a list of {after, reward}"),
    ],
)
def test_bad_deadlines(job_class, deadlines, message):
    assert only_problem(doc(**{"class": job_class, "deadlines": deadlines})) == message


OK_DEADLINE = {"after": "3h", "reward": 0}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("1h", "deadlines[0]: must be a mapping with 'after' and optional 'reward'"),
        (
            {"after": "1h", "when": 2},
            "deadlines[0]: must be a mapping with 'after' and optional 'reward'",
        ),
        ({"reward": 2}, "deadlines[0].after: expected seconds or a duration like 30m, got None"),
        ({"after": "0m"}, "deadlines[0].after: must be positive, got '0m'"),
        (
            {"after": "1h", "reward": -1},
            "deadlines[0].reward: must be a finite non-negative number, got -1",
        ),
        (
            {"after": "1h", "reward": True},
            "deadlines[0].reward: must be a finite non-negative number, got True",
        ),
        (
            {"after": "1h", "reward": "10"},
            "deadlines[0].reward: must be a finite non-negative number, got '10'",
        ),
    ],
)
def test_bad_deadline_entries(entry, message):
    data = doc(**{"class": "soft-slo", "deadlines": [entry, OK_DEADLINE]})
    assert only_problem(data) == message


def test_a_soft_slo_job_whose_only_deadline_is_invalid_also_lacks_a_deadline():
    data = doc(**{"class": "soft-slo", "deadlines": [{"after": "never"}]})
    assert problems_of(data) == [
        "deadlines[0].after: expected seconds or a duration like 30m, got 'never'",
        "deadlines: a soft-slo job needs at least one",
    ]


def test_each_bad_deadline_entry_is_reported_with_its_index():
    problems = problems_of(
        doc(**{"class": "soft-slo", "deadlines": [{"after": "x"}, {"after": "1h"}, {"after": -3}]})
    )
    assert problems == [
        "deadlines[0].after: expected seconds or a duration like 30m, got 'x'",
        "deadlines[2].after: must be positive, got -3",
    ]


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        (..., "stop: required, {iterations: N} or {metric, target, goal, max_iterations}"),
        (100, "stop: required, {iterations: N} or {metric, target, goal, max_iterations}"),
        ({"iterations": 0}, "stop.iterations: a positive integer, got 0"),
        ({"iterations": -1}, "stop.iterations: a positive integer, got -1"),
        ({"iterations": 10**12 + 1}, "stop.iterations: a positive integer, got 1000000000001"),
        ({"iterations": "100"}, "stop.iterations: a positive integer, got '100'"),
        ({"iterations": True}, "stop.iterations: a positive integer, got True"),
        (
            {"iterations": 10, "metric": "acc"},
            "stop: either {iterations: N} or {metric, target, goal, max_iterations}; "
            "got fields ['iterations', 'metric']",
        ),
        (
            {"target": 0.9, "max_iterations": 5},
            "stop: either {iterations: N} or {metric, target, goal, max_iterations}; "
            "got fields ['max_iterations', 'target']",
        ),
        (
            {},
            "stop: either {iterations: N} or {metric, target, goal, max_iterations}; got fields []",
        ),
        (
            {"metric": "acc", "target": 0.9},
            "stop.max_iterations: required integer from 1 to 1000000000000, got None",
        ),
        ({"metric": "acc", "max_iterations": 5}, "stop.target: a finite number, got None"),
        (
            {"metric": "acc", "target": True, "max_iterations": 5},
            "stop.target: a finite number, got True",
        ),
        (
            {"metric": 5, "target": 1, "max_iterations": 5},
            "stop.metric: a metric name such as accuracy, got 5",
        ),
        (
            {"metric": "acc", "target": 1, "goal": "up", "max_iterations": 5},
            "stop.goal: 'max' or 'min', got 'up'",
        ),
        (
            {"metric": "acc", "target": 1, "max_iterations": 2.5},
            "stop.max_iterations: required integer from 1 to 1000000000000, got 2.5",
        ),
    ],
)
def test_bad_stop(stop, message):
    assert only_problem(doc(stop=stop)) == message


def test_every_problem_of_a_target_stop_is_reported():
    problems = problems_of(
        doc(stop={"metric": "", "target": "x", "goal": "up", "max_iterations": 0})
    )
    assert problems == [
        "stop.metric: a metric name such as accuracy, got ''",
        "stop.target: a finite number, got 'x'",
        "stop.goal: 'max' or 'min', got 'up'",
        "stop.max_iterations: required integer from 1 to 1000000000000, got 0",
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_retries": -1}, "max_retries: must be between 0 and 100, got -1"),
        ({"max_retries": 101}, "max_retries: must be between 0 and 100, got 101"),
        ({"batch_size": -1}, "batch_size: must be between 0 and 10000000, got -1"),
        ({"batch_size": "64"}, "batch_size: must be an integer, got '64'"),
        ({"env": ["A=1"]}, "env: must be a mapping of variable names to values"),
        ({"env": {"1ABC": "x"}}, "env: invalid variable name '1ABC'"),
        ({"env": {"A-B": "x"}}, "env: invalid variable name 'A-B'"),
        ({"env": {5: "x"}}, "env: invalid variable name 5"),
        ({"env": {"MLSCHED_TASK_ID": "x"}}, "env: MLSCHED_TASK_ID is reserved for mlsched"),
        ({"working_dir": ""}, "working_dir: a path, got ''"),
        ({"working_dir": 5}, "working_dir: a path, got 5"),
    ],
)
def test_bad_optional_fields(fields, message):
    assert only_problem(doc(**fields)) == message


def test_spec_error_lists_all_problems_in_field_order():
    data = {
        "nme": "typo",
        "command": [],
        "gpus": 0,
        "gpus_per_process": 0,
        "class": "gold",
        "deadlines": [{"after": "5 min"}, {"after": "1h", "reward": -1}],
        "stop": {"metric": "acc", "target": "x", "max_iterations": 10},
        "max_retries": 101,
        "batch_size": -1,
        "env": {"1X": 1, "MLSCHED_A": 2},
        "working_dir": "",
    }
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    expected = [
        "unknown field(s): nme; valid: batch_size, class, command, deadlines, elastic, env, "
        "gpus, gpus_per_process, launcher, max_retries, mlfs, name, ps, stop, suspend_grace, "
        "working_dir",
        "name: required",
        "command: must not be empty",
        "gpus: must be between 1 and 1024, got 0",
        "gpus_per_process: must be between 1 and 1024, got 0",
        "class: must be one of best-effort, strict-slo, soft-slo; got 'gold'",
        "deadlines[0].after: expected seconds or a duration like 30m, got '5 min'",
        "deadlines[1].reward: must be a finite non-negative number, got -1",
        "stop.target: a finite number, got 'x'",
        "max_retries: must be between 0 and 100, got 101",
        "batch_size: must be between 0 and 10000000, got -1",
        "env: invalid variable name '1X'",
        "env: MLSCHED_A is reserved for mlsched",
        "working_dir: a path, got ''",
    ]
    assert info.value.problems == expected
    assert str(info.value) == "invalid job spec:\n" + "\n".join(f"  - {p}" for p in expected)
    assert isinstance(info.value, ValueError)


# --- files -----------------------------------------------------------------------------------

EXAMPLE = """\
name: mlp
command: python examples/mlp_classifier.py --lr 0.1   # a string (shell words) or a list
gpus: 2
class: soft-slo
deadlines:
  - {after: 30m, reward: 100}
  - {after: 45m, reward: 50}
stop: {iterations: 3000}
"""


def test_load_spec_file_reads_the_documented_example(tmp_path):
    path = tmp_path / "mlp.yaml"
    path.write_text(EXAMPLE)
    spec = load_spec_file(path)
    assert spec == JobSpec(
        name="mlp",
        command=("python", "examples/mlp_classifier.py", "--lr", "0.1"),
        gpus=2,
        stopping=IterationStop(3000),
        job_class=JobClass.SOFT_SLO,
        deadlines=(Deadline(1800.0, 100.0), Deadline(2700.0, 50.0)),
        working_dir=str(tmp_path.resolve()),
    )


def test_load_spec_file_resolves_relative_working_dirs_against_its_folder(tmp_path):
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "job.yaml").write_text(EXAMPLE + "working_dir: ../code\n")
    assert load_spec_file(str(folder / "job.yaml")).working_dir == str(folder.resolve() / "../code")


def test_load_spec_file_with_malformed_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: mlp\ncommand: [python, x.py\ngpus: 1\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    [problem] = info.value.problems
    assert problem.startswith(f"{path}: malformed YAML: ")


def test_load_spec_file_with_invalid_content_reports_the_problems(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("name: mlp\ncommand: python x.py\ngpus: 0\nstop: {iterations: 5}\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert info.value.problems == ["gpus: must be between 1 and 1024, got 0"]


def test_load_spec_file_of_an_empty_file(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert info.value.problems == [
        "the spec must be a mapping of fields (name, command, gpus, ...)"
    ]


def test_load_spec_file_that_does_not_exist(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    assert info.value.problems == [f"cannot read {path}: No such file or directory"]


# --- validate_spec and stopping_to_dict ------------------------------------------------------


def full_spec() -> JobSpec:
    return JobSpec(
        name="resnet",
        command=("python", "resnet.py"),
        gpus=4,
        stopping=TargetMetricStop("loss", 0.1, MetricGoal.MINIMIZE, 100),
        job_class=JobClass.SOFT_SLO,
        deadlines=(Deadline(600.0, 10.0), Deadline(1200.0, 5.0)),
        gpus_per_process=2,
        working_dir="relative/dir",
        env=(("A", "1"),),
        max_retries=2,
        batch_size=64,
    )


def test_validate_spec_accepts_valid_specs():
    validate_spec(full_spec())
    validate_spec(JobSpec("x", ("run",), 1, IterationStop(1)))
    validate_spec(
        JobSpec("x", ("run",), 1, IterationStop(1), JobClass.STRICT_SLO, (Deadline(0.5, 0.0),))
    )


def test_validate_spec_round_trips_through_parse_spec():
    spec = full_spec()
    document = {
        "name": spec.name,
        "command": list(spec.command),
        "gpus": 4,
        "gpus_per_process": 2,
        "class": "soft-slo",
        "deadlines": [{"after": 600, "reward": 10}, {"after": 1200, "reward": 5}],
        "stop": stopping_to_dict(spec.stopping),
        "max_retries": 2,
        "batch_size": 64,
        "env": {"A": "1"},
        "working_dir": "relative/dir",
    }
    assert parse_spec(document) == spec


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"gpus": 0}, "gpus: must be between 1 and 1024, got 0"),
        ({"gpus": 3}, "gpus (3) must be a multiple of gpus_per_process (2)"),
        (
            {"name": ""},
            "name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got ''",
        ),
        ({"command": ()}, "command: must not be empty"),
        ({"job_class": JobClass.STRICT_SLO}, "deadlines: a strict-slo job has exactly one, got 2"),
        ({"deadlines": ()}, "deadlines: a soft-slo job needs at least one"),
        ({"stopping": IterationStop(0)}, "stop.iterations: a positive integer, got 0"),
        (
            {"stopping": TargetMetricStop("", 1.0, MetricGoal.MAXIMIZE, 1)},
            "stop.metric: a metric name such as accuracy, got ''",
        ),
        ({"env": (("MLSCHED_X", "1"),)}, "env: MLSCHED_X is reserved for mlsched"),
        ({"max_retries": 500}, "max_retries: must be between 0 and 100, got 500"),
    ],
)
def test_validate_spec_rejects_invalid_specs(change, problem):
    with pytest.raises(SpecError) as info:
        validate_spec(replace(full_spec(), **change))
    assert info.value.problems == [problem]


def test_stopping_to_dict():
    assert stopping_to_dict(IterationStop(5)) == {"iterations": 5}
    assert stopping_to_dict(TargetMetricStop("acc", 0.5, MetricGoal.MAXIMIZE, 9)) == {
        "metric": "acc",
        "target": 0.5,
        "goal": "max",
        "max_iterations": 9,
    }


# --- issue 11: control characters, NaN, out-of-range integers -------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"command": "python train.py\0"},
            "command[1]: must not contain a NUL byte (at position 8)",
        ),
        (
            {"command": ["python", "a\x07b"]},
            "command[1]: must not contain a control character '\\x07'",
        ),
        ({"env": {"OPTS": "a\0b"}}, "env.OPTS: must not contain a NUL byte (at position 1)"),
        ({"env": {"OPTS": "a\x1bb"}}, "env.OPTS: must not contain a control character '\\x1b'"),
        ({"working_dir": "/data/\0x"}, "working_dir: must not contain a NUL byte (at position 6)"),
        (
            {"stop": {"metric": "acc\0", "target": 0.9, "max_iterations": 5}},
            "stop.metric: must not contain a NUL byte (at position 3)",
        ),
        (
            {"stop": {"metric": "acc", "target": float("nan"), "max_iterations": 5}},
            "stop.target: a finite number, got nan",
        ),
        (
            {"stop": {"metric": "acc", "target": float("inf"), "max_iterations": 5}},
            "stop.target: a finite number, got inf",
        ),
        (
            {"stop": {"metric": "acc", "target": 0.9, "max_iterations": 2**63}},
            "stop.max_iterations: required integer from 1 to 1000000000000, "
            "got 9223372036854775808",
        ),
    ],
)
def test_control_characters_nan_and_huge_integers_are_named(fields, message):
    assert only_problem(doc(**fields)).startswith(message)


def test_tabs_and_newlines_stay_allowed():
    spec = parse_spec(doc(command=["python", "-c", "import os\n\tprint(1)"], env={"A": "x\ty"}))
    assert spec.command[2] == "import os\n\tprint(1)"


def test_the_cli_reports_a_nan_target_and_a_huge_max_iterations_without_a_traceback(
    tmp_path, capsys
):
    from mlsched.cli import main

    path = tmp_path / "job.yaml"
    path.write_text(
        "name: j\ncommand: python t.py\ngpus: 1\n"
        "stop: {metric: accuracy, target: .nan, max_iterations: 99999999999999999999}\n"
    )
    assert main(["submit", "--controller", "127.0.0.1:1", str(path)]) == 2
    err = capsys.readouterr().err
    assert "stop.target: a finite number, got nan" in err
    assert "stop.max_iterations: required integer from 1 to" in err
