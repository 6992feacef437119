"""Commands the controller sends to node agents (domain form; ``dispatch`` encodes them)."""

from __future__ import annotations

from dataclasses import dataclass

from mlsched.model import JobSpec, Progress, TaskState


@dataclass(frozen=True)
class TaskRef:
    job_id: str
    rank: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.job_id}/{self.rank}/{self.attempt}"


@dataclass(frozen=True)
class LaunchCommand:
    task: TaskRef
    spec: JobSpec
    user: str
    gpu_indices: tuple[int, ...]
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    resume: bool
    ps_workers: int = 0  # a PS job's workers this attempt (ranks below it); 0: not a PS job


@dataclass(frozen=True)
class SuspendCommand:
    task: TaskRef
    grace_s: float
    reason: str


@dataclass(frozen=True)
class KillCommand:
    task: TaskRef
    reason: str


@dataclass(frozen=True)
class LeaseCommand:
    task: TaskRef
    renewed: bool
    expires_at: float


@dataclass(frozen=True)
class StopTrainingCommand:
    task: TaskRef
    reason: str


@dataclass(frozen=True)
class BatchSizeCommand:
    """A new global batch for the task's trainer, applied in place at a step boundary."""

    task: TaskRef
    batch_size: int


@dataclass(frozen=True)
class AckCommand:
    task: TaskRef


@dataclass(frozen=True)
class PriorityCommand:
    """The task's priority in the policy's order (higher: keep it where it runs)."""

    task: TaskRef
    priority: float


@dataclass(frozen=True)
class RegroupCommand:
    """Change the process count of a running attempt in place (agent.proto ``RegroupTask``):
    ``task`` is its rank 0; ``new_ranks`` are (rank, GPU indices) of the ranks it starts."""

    task: TaskRef
    generation: int
    world_size: int
    new_ranks: tuple[tuple[int, tuple[int, ...]], ...]
    spec: JobSpec
    user: str
    batch_size: int = 0  # the new global batch; 0: unchanged


Command = (
    LaunchCommand
    | SuspendCommand
    | KillCommand
    | LeaseCommand
    | StopTrainingCommand
    | BatchSizeCommand
    | AckCommand
    | PriorityCommand
    | RegroupCommand
)


@dataclass(frozen=True)
class TaskReport:
    """A task status as an agent reported it."""

    task: TaskRef
    state: TaskState
    exit_code: int = 0
    message: str = ""
    checkpoint_step: int = 0
    restored_step: int = 0
    restored: bool = False  # restored_step is meaningful
    progress: Progress | None = None  # the attempt's newest progress, as the agent knows it
