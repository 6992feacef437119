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
