"""``--json`` means one thing on every command (issue 18 #6): a flag whose stdout is the JSON
alone; a file is ``--json-out PATH``, and the old ``--json PATH`` says so."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

import pytest

import mlsched.cli
from mlsched import exitcodes
from mlsched.cli import build_parser, main
from mlsched.jobspec import IterationStop, JobSpec
from mlsched.jsonflag import old_json_path
from mlsched.model import Event, Job, JobState


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser (the role commands' real ones), by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("no commands")


def test_every_json_option_is_a_flag_and_every_file_is_json_out() -> None:
    with_json = {}
    for name, parser in commands(build_parser()).items():
        for action in parser._actions:
            if "--json" in action.option_strings:
                with_json[name] = action.nargs
            if "--json-out" in action.option_strings:
                assert action.nargs is None and action.metavar == "PATH", name
    assert set(with_json.values()) == {0}, with_json
    assert {"simulate", "chic-simulate", "jobs", "describe", "submit", "demo"} <= set(with_json)


def test_the_old_path_is_the_unrecognised_argument_right_after_json() -> None:
    argv = ["simulate", "--trace", "t.csv", "--json", "out.json", "--quiet"]
    assert old_json_path(argv, ["out.json"]) == "out.json"
    assert old_json_path(argv, []) is None
    assert old_json_path(["simulate", "x", "--json"], ["x"]) is None


def test_commands_without_json_out_keep_argparse_s_answers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["jobs", "--json", "out.json"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: out.json" in err and "--json-out" not in err
    parsed = mlsched.cli.jsonflag.parse_args(
        build_parser("describe"), ["describe", "--json", "j-1"]
    )
    assert (parsed.job, parsed.json) == ("j-1", True)  # a positional after --json is fine


class FakeClient:
    """Just enough of mlsched.client.Client for ``submit --wait``: the job runs, then ends."""

    def __init__(self) -> None:
        spec = JobSpec("hello", ("python", "hello.py"), 1, IterationStop(10))
        self.job = Job("j-1", "alice", spec, JobState.PENDING, submit_time=1.0, queued_since=1.0)

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def submit(self, spec: JobSpec) -> Job:
        return self.job

    def get(self, job_id: str) -> tuple[Job, list[Any]]:
        return self.job, []

    def events(self, job_id: str = "", follow: bool = False) -> Any:
        for state in (JobState.RUNNING, JobState.COMPLETED):
            self.job = replace(self.job, state=state)
            yield Event(1, 2.0, "job_state", f"{state.value}", job_id=job_id)


def test_submit_wait_json_prints_only_the_final_job(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(mlsched.cli, "_client", lambda args: FakeClient())
    code = main(["submit", "--wait", "--json", "--", "python", "hello.py"])
    out, err = capsys.readouterr()
    assert code == exitcodes.OK
    assert json.loads(out)["state"] == "COMPLETED"  # stdout is the JSON alone
    assert err.splitlines() == ["submitted j-1 (python)", "j-1: RUNNING", "j-1: COMPLETED"]


def test_logs_follow_with_json_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "j-1", "--follow", "--json"]) == exitcodes.INVALID
    assert "--json does not go with --follow" in capsys.readouterr().err
