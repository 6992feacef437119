"""The task end decision table of docs/task-environment.md, row by row, and the exit record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodeagent.endstate import ExitRecord, decide_end, describe_returncode, read_exit_record
from nodeagent.model import TaskState

COMPLETED = ExitRecord("completed", 10, 10)
SUSPENDED = ExitRecord("suspended", 10, 10)
FAILED = ExitRecord("failed", 10, 5, "nan loss")

# (exit code, record, suspend requested, kill requested) -> state
ROWS = [
    # row 1: 0, completed or none, no suspend -> COMPLETED
    (0, COMPLETED, False, False, TaskState.COMPLETED),
    (0, None, False, False, TaskState.COMPLETED),
    # row 2: any, suspended, any -> SUSPENDED
    (0, SUSPENDED, False, False, TaskState.SUSPENDED),
    (0, SUSPENDED, True, False, TaskState.SUSPENDED),
    (1, SUSPENDED, False, False, TaskState.SUSPENDED),
    (-9, SUSPENDED, True, False, TaskState.SUSPENDED),
    # row 3: non-zero or signal, not suspended, suspend requested -> SUSPENDED
    (1, None, True, False, TaskState.SUSPENDED),
    (-15, COMPLETED, True, False, TaskState.SUSPENDED),
    (-9, FAILED, True, False, TaskState.SUSPENDED),
    # row 4: non-zero or signal, not suspended, no suspend -> FAILED
    (3, None, False, False, TaskState.FAILED),
    (-11, None, False, False, TaskState.FAILED),
    (1, COMPLETED, False, False, TaskState.FAILED),
    (1, FAILED, False, False, TaskState.FAILED),
    # row 5: killed on request -> KILLED, whatever else
    (0, COMPLETED, False, True, TaskState.KILLED),
    (-15, None, False, True, TaskState.KILLED),
    (-9, SUSPENDED, True, True, TaskState.KILLED),
    # cases the table leaves open (documented in decide_end)
    (0, COMPLETED, True, False, TaskState.COMPLETED),
    (0, None, True, False, TaskState.SUSPENDED),
    (0, FAILED, False, False, TaskState.FAILED),
    (0, FAILED, True, False, TaskState.SUSPENDED),
    # unknown exit status (adopted after an agent restart)
    (None, COMPLETED, False, False, TaskState.COMPLETED),
    (None, SUSPENDED, False, False, TaskState.SUSPENDED),
    (None, None, False, False, TaskState.FAILED),
    (None, FAILED, False, False, TaskState.FAILED),
    (None, None, True, False, TaskState.SUSPENDED),
    (None, None, False, True, TaskState.KILLED),
]


@pytest.mark.parametrize(("code", "record", "suspend", "kill", "expected"), ROWS)
def test_decision_table(
    code: int | None,
    record: ExitRecord | None,
    suspend: bool,
    kill: bool,
    expected: TaskState,
) -> None:
    decision = decide_end(code, record, suspend_requested=suspend, kill_requested=kill)
    assert decision.state is expected


def test_failed_message_has_code_reason_and_log_tail() -> None:
    decision = decide_end(
        3, FAILED, suspend_requested=False, kill_requested=False, log_tail="Traceback\nBoom"
    )
    assert decision.exit_code == 3
    assert "exit code 3" in decision.message
    assert "nan loss" in decision.message
    assert decision.message.endswith("Traceback\nBoom")


def test_signal_and_unknown_exit_messages() -> None:
    decision = decide_end(-9, None, suspend_requested=False, kill_requested=False)
    assert decision.exit_code == -9
    assert "killed by signal 9 (SIGKILL)" in decision.message
    unknown = decide_end(None, None, suspend_requested=False, kill_requested=False)
    assert unknown.exit_code == 0
    assert "exit status unknown (agent restarted)" in unknown.message
    assert describe_returncode(0) == "exit code 0"


def test_killed_message_has_the_reason() -> None:
    decision = decide_end(-15, None, suspend_requested=False, kill_requested=True, kill_reason="x")
    assert decision.message.startswith("killed on request: x")


def test_read_exit_record(tmp_path: Path) -> None:
    path = tmp_path / "exit.json"
    assert read_exit_record(path) is None
    path.write_text(json.dumps({"outcome": "suspended", "step": 12, "checkpoint_step": 10}))
    assert read_exit_record(path) == ExitRecord("suspended", 12, 10, "")
    path.write_text("{not json")
    record = read_exit_record(path)
    assert record is not None and record.outcome == "invalid"
    path.write_text(json.dumps({"outcome": "exploded"}))
    record = read_exit_record(path)
    assert record is not None and record.outcome == "invalid" and "exploded" in record.reason
    # an invalid record counts as "not completed": exit 0 with it is a failure
    decision = decide_end(0, record, suspend_requested=False, kill_requested=False)
    assert decision.state is TaskState.FAILED
