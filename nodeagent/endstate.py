"""How a task attempt ended: the exit record and the decision table of docs/task-environment.md."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path

from nodeagent.model import TaskState

OUTCOMES = ("completed", "suspended", "failed")


@dataclass(frozen=True)
class ExitRecord:
    """The JSON the shim writes to ``MLSCHED_EXIT_FILE`` at exit.

    ``outcome`` is ``completed``, ``suspended`` or ``failed``; ``invalid`` marks a record that
    exists but cannot be parsed (``reason`` says why).
    """

    outcome: str
    step: int = 0
    checkpoint_step: int = 0
    reason: str = ""


def read_exit_record(path: Path) -> ExitRecord | None:
    """Read an exit record; None when there is no file."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ExitRecord("invalid", reason=f"cannot read exit record: {exc}")
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        outcome = str(data.get("outcome", ""))
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        return ExitRecord(
            outcome=outcome,
            step=int(data.get("step") or 0),
            checkpoint_step=int(data.get("checkpoint_step") or 0),
            reason=str(data.get("reason") or ""),
        )
    except (ValueError, TypeError) as exc:
        return ExitRecord("invalid", reason=f"invalid exit record: {exc}")


def describe_returncode(returncode: int | None) -> str:
    """``exit code 3``, ``killed by signal 9 (SIGKILL)`` or ``exit status unknown``."""
    if returncode is None:
        return "exit status unknown (agent restarted)"
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = "unknown signal"
    return f"killed by signal {-returncode} ({name})"


@dataclass(frozen=True)
class EndDecision:
    """The final state of a task attempt, the exit code to report and a human-readable message."""

    state: TaskState
    exit_code: int
    message: str


def decide_end(
    returncode: int | None,
    record: ExitRecord | None,
    *,
    suspend_requested: bool,
    kill_requested: bool,
    kill_reason: str = "",
    log_tail: str = "",
) -> EndDecision:
    """Decide how a task attempt ended.

    ``returncode`` is the process exit status as ``subprocess`` reports it (``-N``: signal N), or
    None when unknown (a process adopted after an agent restart is not our child). The table:

    ======================  =====================  ==================  ==========
    exit code               record                 suspend requested   task ends
    ======================  =====================  ==================  ==========
    any                     any                    killed on request   KILLED
    any                     suspended              any                 SUSPENDED
    0                       completed or none      no                  COMPLETED
    non-zero or signal      any but suspended      yes                 SUSPENDED
    non-zero or signal      any but suspended      no                  FAILED
    ======================  =====================  ==================  ==========

    Cases the table leaves open: exit 0 with a ``completed`` record while a suspension was
    requested is COMPLETED (the trainer reached its criterion); exit 0 without a record while a
    suspension was requested is SUSPENDED (a script without the shim that exits cleanly on
    SIGTERM has not finished); exit 0 with a ``failed`` or unparsable record counts like a
    non-zero exit. With an unknown exit status: record ``completed`` is COMPLETED, otherwise the
    rows for a non-zero exit apply (FAILED says "exit status unknown (agent restarted)").

    ``exit_code`` is ``returncode`` (``-N`` for signal N; 0 when unknown). FAILED messages end
    with ``log_tail``.
    """
    code = returncode if returncode is not None else 0
    how = describe_returncode(returncode)
    trainer_says = f"; trainer: {record.reason}" if record and record.reason else ""
    if kill_requested:
        reason = f": {kill_reason}" if kill_reason else ""
        return EndDecision(TaskState.KILLED, code, f"killed on request{reason} ({how})")
    if record is not None and record.outcome == "suspended":
        step = f" at checkpoint step {record.checkpoint_step}" if record.checkpoint_step else ""
        return EndDecision(TaskState.SUSPENDED, code, f"suspended{step} ({how}){trainer_says}")
    completed_record = record is None or record.outcome == "completed"
    if returncode == 0 and completed_record and not suspend_requested:
        return EndDecision(TaskState.COMPLETED, 0, f"completed ({how}){trainer_says}")
    if returncode == 0 and record is not None and record.outcome == "completed":
        return EndDecision(TaskState.COMPLETED, 0, f"completed ({how}){trainer_says}")
    if returncode is None and record is not None and record.outcome == "completed":
        return EndDecision(TaskState.COMPLETED, 0, f"completed ({how}){trainer_says}")
    if suspend_requested:
        return EndDecision(
            TaskState.SUSPENDED,
            code,
            f"suspension requested; {how} without a suspended exit record: "
            f"resumes from the last complete checkpoint{trainer_says}",
        )
    message = f"failed: {how}{trainer_says}"
    if log_tail:
        message += f"\n--- last lines of the log ---\n{log_tail}"
    return EndDecision(TaskState.FAILED, code, message)
