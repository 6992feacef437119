"""The exit record the agent reads when a task ends (docs/task-environment.md)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["OUTCOMES", "ExitRecord", "write_exit_record"]

OUTCOMES = ("completed", "suspended", "failed")


@dataclass(frozen=True)
class ExitRecord:
    """How a task ended: its outcome, last reported step, last checkpoint step and why."""

    outcome: str
    step: int
    checkpoint_step: int
    reason: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")


def write_exit_record(path: str | os.PathLike[str], record: ExitRecord) -> None:
    """Write `record` as JSON atomically: a temporary file in the same directory, then rename."""
    target = Path(path)
    tmp = target.with_name(f"{target.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(asdict(record), f)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
