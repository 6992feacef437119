"""Where the agent keeps its files under the state directory and the checkpoint root."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nodeagent.model import TaskRef

TRAINER_ADDRESS_FILE = "trainer-address"


def is_safe_component(name: str) -> bool:
    """True when ``name`` can be used as one path component (no separators, not ``.``/``..``)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


@dataclass(frozen=True)
class AgentPaths:
    """File layout of one agent.

    ``<state_dir>/tasks/<job>/rank-<r>-attempt-<a>.json``       task attempt record
    ``<state_dir>/tasks/<job>/rank-<r>-attempt-<a>.exit.json``  the shim's exit record
    ``<state_dir>/run/<job>/rank-<r>-attempt-<a>/``              a task's own run directory,
                                                                owned by its uid (its exit
                                                                record, HOME of a pool uid)
    ``<state_dir>/logs/<job>/rank-<r>.log``                     task output, all attempts
    ``<state_dir>/trainer-address``                             the TrainerService target
    ``<checkpoint_root>/<job>``                                 the job's checkpoint directory
    """

    state_dir: Path
    checkpoint_root: Path

    @property
    def tasks_dir(self) -> Path:
        """Directory of the task attempt records."""
        return self.state_dir / "tasks"

    @property
    def logs_dir(self) -> Path:
        """Directory of the task logs."""
        return self.state_dir / "logs"

    @property
    def trainer_address_file(self) -> Path:
        """The file holding the TrainerService target (``MLSCHED_AGENT_ADDR_FILE``)."""
        return self.state_dir / TRAINER_ADDRESS_FILE

    @property
    def lock_file(self) -> Path:
        """Held (flock) by the running agent so that two agents never share a state directory."""
        return self.state_dir / "agent.lock"

    def record_file(self, ref: TaskRef) -> Path:
        """The JSON record of one task attempt."""
        return self.tasks_dir / ref.job_id / f"rank-{ref.rank}-attempt-{ref.attempt}.json"

    def exit_file(self, ref: TaskRef) -> Path:
        """Where the shim of one task attempt writes its exit record (``MLSCHED_EXIT_FILE``)."""
        return self.tasks_dir / ref.job_id / f"rank-{ref.rank}-attempt-{ref.attempt}.exit.json"

    @property
    def run_root(self) -> Path:
        """Parent of the tasks' run directories (searchable, not listable, by tasks)."""
        return self.state_dir / "run"

    def run_dir(self, ref: TaskRef) -> Path:
        """A task attempt's own directory when it runs under its user's uid."""
        return self.run_root / ref.job_id / f"rank-{ref.rank}-attempt-{ref.attempt}"

    def log_file(self, job_id: str, rank: int) -> Path:
        """The log of one rank of a job; every attempt on this node appends to it."""
        return self.logs_dir / job_id / f"rank-{rank}.log"

    def checkpoint_dir(self, job_id: str) -> Path:
        """The job's checkpoint directory (``MLSCHED_CHECKPOINT_DIR``)."""
        return self.checkpoint_root / job_id
