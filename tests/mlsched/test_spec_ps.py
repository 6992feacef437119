"""The ``ps`` job-spec section (issue 16): every problem names its field."""

from __future__ import annotations

from mlsched.spec_ps import PsSpec, RoleResources, parse_ps, ps_to_dict

GOOD = {
    "workers": {"min": 1, "max": 8},
    "servers": {"min": 1, "max": 4},
    "worker": {"gpus": 1, "cpus": 2, "memory_gb": 8},
    "server": {"cpus": 3, "memory_gb": 9},
}


def test_a_valid_section_round_trips():
    problems: list[str] = []
    spec = parse_ps(GOOD, problems)
    assert problems == []
    assert spec == PsSpec(1, 8, 1, 4, RoleResources(1, 2, 8), RoleResources(0, 3, 9))
    assert spec.enabled and spec.server.vector() == (0.0, 3.0, 9.0)
    assert parse_ps(ps_to_dict(spec), problems) == spec and problems == []


def test_absent_is_not_a_ps_job():
    problems: list[str] = []
    assert not parse_ps(None, problems).enabled and problems == []


def test_each_problem_names_its_field():
    bad = {
        "workers": {"min": 4, "max": 2},
        "servers": {"min": 0, "max": 2},
        "worker": {"gpus": 0, "cpus": 0},
        "server": {"cpus": -1},
        "color": "red",
    }
    problems: list[str] = []
    assert parse_ps(bad, problems) == PsSpec()
    text = "\n".join(problems)
    for field in (
        "unknown field(s): color",
        "ps.workers.min (4)",
        "ps.servers.min: an integer",
        "ps.worker: needs gpus or cpus",
        "ps.server.cpus: a number >= 0",
    ):
        assert field in text
    problems = []
    parse_ps({"workers": {"min": 1, "max": 1}}, problems)
    assert "ps.servers: required" in problems and "ps.worker: required" in problems


def _job(**fields):
    doc = {"name": "ps", "command": "python x.py", "gpus": 2, "stop": {"iterations": 10}}
    doc["ps"] = GOOD
    doc.update(fields)
    return doc


def test_a_job_spec_carries_its_ps_section_over_the_wire_and_into_the_store():
    from controller.store.codec import spec_from_dict, spec_to_dict
    from mlsched import serde
    from mlsched.jobspec import parse_spec, validate_spec

    spec = parse_spec(_job())
    assert spec.ps == PsSpec(1, 8, 1, 4, RoleResources(1, 2, 8), RoleResources(0, 3, 9))
    validate_spec(spec)
    assert serde.spec_from_proto(serde.spec_to_proto(spec)) == spec
    assert spec_from_dict(spec_to_dict(spec)) == spec
    plain = parse_spec(_job(ps=None))
    assert not plain.ps.enabled
    assert not serde.spec_to_proto(plain).HasField("ps")


def test_a_ps_job_spec_names_what_does_not_fit_its_roles():
    import pytest

    from mlsched.jobspec import SpecError, parse_spec

    section = {**GOOD, "server": {"gpus": 1, "cpus": 3}}
    with pytest.raises(SpecError) as caught:
        parse_spec(_job(gpus=10, gpus_per_process=2, ps=section, elastic={"min_gpus": 2}))
    problems = caught.value.problems
    assert "ps.worker.gpus (1) must equal gpus_per_process (2)" in problems
    assert "ps.server.gpus: a PS runs on CPUs only, got 1" in problems
    assert "gpus (10) must lie within ps.workers' GPUs (2..16)" not in problems  # 10 fits
    assert "elastic and ps exclude each other (a PS job's workers are chosen by ps)" in problems
    with pytest.raises(SpecError) as caught:
        parse_spec(_job(gpus=9))
    assert caught.value.problems == ["gpus (9) must lie within ps.workers' GPUs (1..8)"]
