"""Per-attempt task records, JSON files under ``<state_dir>/tasks`` that survive restarts."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from nodeagent.model import ProgressInfo, TaskRef, TaskState, TaskStatusInfo
from nodeagent.paths import AgentPaths

log = logging.getLogger(__name__)

RECORD_VERSION = 1
CREATE_TIME_TOLERANCE_S = 1.0


@dataclass
class TaskRecord:
    """What the agent remembers about one task attempt.

    ``state`` holds a TaskState name. ``final_unacked`` is True once the attempt ended and until
    the controller acknowledges the final status (TaskStatusAck); the record is deleted then.
    ``suspend_started_at``/``kill_started_at`` are unix times so that escalation deadlines survive
    a restart.
    """

    job_id: str
    rank: int
    attempt: int
    token: str
    state: str = TaskState.LAUNCHING.name
    pid: int = 0
    create_time: float = 0.0
    gpu_indices: list[int] = field(default_factory=list)
    node_id: str = ""
    user: str = ""
    launched_at: float = 0.0
    checkpoint_step: int = 0
    restored_step: int = 0
    restored: bool = False
    exit_code: int = 0
    message: str = ""
    suspend_requested: bool = False
    suspend_started_at: float = 0.0
    suspend_grace_s: float = 0.0
    suspend_reason: str = ""
    kill_requested: bool = False
    kill_started_at: float = 0.0
    kill_reason: str = ""
    stop_reason: str = ""
    final_unacked: bool = False
    run_uid: int = -1  # the uid the task runs under; -1: the agent's own (nodeagent/taskuser.py)
    # The newest progress the trainer reported, in memory only (not in the record's file):
    # every status carries it, so a controller that was away learns an attempt's last progress.
    last_progress: ProgressInfo | None = field(default=None, compare=False)

    @property
    def ref(self) -> TaskRef:
        """The task attempt this record describes."""
        return TaskRef(self.job_id, self.rank, self.attempt)

    @property
    def task_state(self) -> TaskState:
        """``state`` as a TaskState."""
        try:
            return TaskState[self.state]
        except KeyError:
            return TaskState.UNSPECIFIED

    def status(self) -> TaskStatusInfo:
        """The status to report for this attempt."""
        return TaskStatusInfo(
            ref=self.ref,
            state=self.task_state,
            exit_code=self.exit_code,
            message=self.message,
            checkpoint_step=self.checkpoint_step,
            restored_step=self.restored_step,
            pid=self.pid,
            restored=self.restored,
            progress=self.last_progress,
        )

    def to_json(self) -> str:
        """Serialise (with a format version)."""
        saved = {f.name: getattr(self, f.name) for f in _SAVED_FIELDS}
        return json.dumps({"version": RECORD_VERSION, **saved}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> TaskRecord:
        """Parse; unknown keys are ignored. Raises ValueError/TypeError/KeyError when invalid."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("record is not a JSON object")
        names = {f.name for f in _SAVED_FIELDS}
        record = cls(**{k: v for k, v in data.items() if k in names})
        record.rank, record.attempt, record.pid = (
            int(record.rank),
            int(record.attempt),
            int(record.pid),
        )
        return record


_SAVED_FIELDS = tuple(f for f in dataclasses.fields(TaskRecord) if f.name != "last_progress")


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a rename, a new file or subdirectory) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Write a file through a temporary file and rename, so readers never see a partial one;
    durable when this returns (the file, the rename and a new parent directory are fsynced)."""
    new_parent = not path.parent.is_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    if new_parent:
        fsync_dir(path.parent.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


class RecordStore:
    """Loads, saves and deletes task records."""

    def __init__(self, paths: AgentPaths) -> None:
        self._paths = paths

    def save(self, record: TaskRecord) -> None:
        """Persist a record atomically (mode 0600: it holds the task token)."""
        write_atomic(self._paths.record_file(record.ref), record.to_json())

    def delete(self, ref: TaskRef) -> None:
        """Forget an attempt: its record and exit record (the log stays)."""
        for path in (self._paths.record_file(ref), self._paths.exit_file(ref)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        run_dir = self._paths.run_dir(ref)
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            run_dir.parent.rmdir()  # only succeeds when empty
        with contextlib.suppress(OSError):
            self._paths.record_file(ref).parent.rmdir()  # only succeeds when empty

    def load_all(self) -> list[TaskRecord]:
        """Every readable record; unreadable ones are logged and renamed to ``*.corrupt``."""
        records = []
        if not self._paths.tasks_dir.is_dir():
            return records
        for path in sorted(self._paths.tasks_dir.glob("*/rank-*-attempt-*.json")):
            if path.name.endswith(".exit.json"):
                continue
            try:
                record = TaskRecord.from_json(path.read_text(encoding="utf-8"))
                if self._paths.record_file(record.ref) != path:
                    raise ValueError(f"record of {record.ref} stored as {path}")
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.error("ignoring unreadable task record %s: %s", path, exc)
                with contextlib.suppress(OSError):
                    path.rename(path.with_name(path.name + ".corrupt"))
                continue
            records.append(record)
        return records


def process_matches(pid: int, create_time: float) -> bool:
    """True when ``pid`` is a live (non-zombie) process started at ``create_time``.

    This is the adoption test after an agent restart: a recycled pid has another create time.
    """
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
