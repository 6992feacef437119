"""docs/spec-reference.md: generated from the parser's field tables, current, and complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlsched import spec_reference
from mlsched.jobspec import SpecError, parse_spec

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "spec-reference.md"
BASE = {"name": "x", "command": "python x.py", "gpus": 2, "stop": {"iterations": 10}}


def _problems(**fields) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec({**BASE, **fields})
    return info.value.problems


def _valid_list(problems: list[str], section: str) -> set[str]:
    """The field names an ``unknown field(s): ...; valid: a, b`` problem of ``section`` lists."""
    for problem in problems:
        match = re.match(rf"{re.escape(section)}: unknown field\(s\): .*; valid: (.*)$", problem)
        if match:
            return set(match.group(1).split(", "))
    raise AssertionError(f"no unknown-field problem for {section}: {problems}")


def accepted_fields() -> dict[str, set[str]]:
    """Each section's fields as the parser states them when given an unknown one."""
    bogus = {"zz_unknown": 1}
    ps_with = {"workers": bogus, "worker": bogus}
    top = _problems(**bogus)
    stop = " ".join(_problems(stop=bogus))
    deadline = " ".join(_problems(**{"class": "soft-slo", "deadlines": [bogus]}))
    ps = _problems(ps={**ps_with, **bogus})
    return {
        "Top level": _top_fields(top),
        "`stop`": set(re.findall(r"[a-z_]+", "".join(re.findall(r"\{([^}]*)\}", stop)))) - {"N"},
        "`deadlines[]`": set(re.findall(r"'([a-z_]+)'", deadline)),
        "`mlfs`": _valid_list(_problems(mlfs=bogus), "mlfs"),
        "`elastic`": _valid_list(_problems(elastic=bogus), "elastic"),
        "`ps`": _valid_list(ps, "ps"),
        "`ps.workers`, `ps.servers`": _valid_list(ps, "ps.workers"),
        "`ps.worker`, `ps.server`": _valid_list(ps, "ps.worker"),
    }


def _top_fields(problems: list[str]) -> set[str]:
    for problem in problems:
        if problem.startswith("unknown field(s): "):
            return set(problem.split("; valid: ", 1)[1].split(", "))
    raise AssertionError(f"no unknown-field problem at the top level: {problems}")


def test_reference_is_current():
    expected = spec_reference.render()
    current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    assert current == expected, (
        f"{REFERENCE} is stale: regenerate it with `{spec_reference.COMMAND}` "
        "(from the repository root) and commit it"
    )


def test_every_accepted_field_is_in_the_reference():
    text = REFERENCE.read_text(encoding="utf-8")
    tables = dict(re.findall(r"^## (.+)\n\n.*\n\n((?:\|.*\n)+)", text, flags=re.MULTILINE))
    for section, fields in accepted_fields().items():
        assert fields, section
        assert section in tables, f"no table for {section} in {REFERENCE}"
        listed = set(re.findall(r"^\| `([a-z_]+)` \|", tables[section], flags=re.MULTILINE))
        assert fields == listed, f"{section}: parser accepts {sorted(fields)}, doc {sorted(listed)}"


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "spec-reference.md"
    stale.write_text("old\n", encoding="utf-8")
    assert spec_reference.main(["--check", "--output", str(stale)]) == 1
    assert spec_reference.COMMAND in capsys.readouterr().err
    assert spec_reference.main(["--output", str(stale)]) == 0
    assert spec_reference.main(["--check", "--output", str(stale)]) == 0
