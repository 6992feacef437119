"""The ``launcher`` job-spec field (issue 18): parsing, defaults, the wire."""

from __future__ import annotations

import pytest

from mlsched import serde
from mlsched.jobspec import SpecError, parse_spec, validate_spec
from mlsched.model import Launcher


def doc(**fields):
    return {
        "name": "t",
        "command": "torchrun train.py",
        "gpus": 4,
        "stop": {"iterations": 9},
        **fields,
    }


def test_absent_is_the_agents_launcher_one_process_per_gpu():
    spec = parse_spec(doc())
    assert (spec.launcher, spec.gpus_per_process, spec.num_tasks) == (Launcher.AGENT, 1, 4)


def test_torchrun_defaults_to_one_launcher_holding_every_gpu():
    spec = parse_spec(doc(launcher="torchrun"))
    assert (spec.launcher, spec.gpus_per_process, spec.num_tasks) == (Launcher.TORCHRUN, 4, 1)


def test_torchrun_on_two_nodes_takes_gpus_per_process_as_gpus_per_launcher():
    spec = parse_spec(doc(launcher="torchrun", gpus_per_process=2))
    assert (spec.gpus_per_process, spec.num_tasks) == (2, 2)


def test_unknown_launcher_and_torchrun_with_elastic_are_refused():
    with pytest.raises(SpecError) as info:
        parse_spec(doc(launcher="mpirun"))
    assert info.value.problems == ["launcher: 'mpirun' is not one of agent, torchrun"]
    elastic = {"min_gpus": 1, "max_gpus": 4}
    with pytest.raises(SpecError) as info:
        parse_spec(doc(launcher="torchrun", gpus_per_process=1, batch_size=64, elastic=elastic))
    assert info.value.problems == [
        "launcher: torchrun does not apply to a job with an 'elastic' section"
    ]


def test_the_launcher_crosses_the_wire_and_old_senders_mean_the_agent():
    spec = parse_spec(doc(launcher="torchrun"))
    message = serde.spec_to_proto(spec)
    assert serde.spec_from_proto(message) == spec
    validate_spec(spec)
    message.ClearField("launcher")  # what a controller from before issue 18 sends
    assert serde.spec_from_proto(message).launcher is Launcher.AGENT
    message.launcher = 7
    with pytest.raises(serde.WireError, match="launcher: unknown value 7"):
        serde.spec_from_proto(message)


def test_suspend_grace_takes_seconds_or_a_duration_and_crosses_the_wire():
    assert parse_spec(doc()).suspend_grace_s == 0.0  # the controller's default
    assert parse_spec(doc(suspend_grace=90)).suspend_grace_s == 90.0
    spec = parse_spec(doc(suspend_grace="2m"))
    assert spec.suspend_grace_s == 120.0
    assert serde.spec_from_proto(serde.spec_to_proto(spec)) == spec
    validate_spec(spec)
    with pytest.raises(SpecError) as info:
        parse_spec(doc(suspend_grace="2h"))
    assert info.value.problems == ["suspend_grace: at most 3600 s, got 7200 s"]
    with pytest.raises(SpecError) as info:
        parse_spec(doc(suspend_grace="soon"))
    assert info.value.problems == [
        "suspend_grace: expected seconds or a duration like 30m, got 'soon'"
    ]
