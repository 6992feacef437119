"""Plain data types used inside the agent (protobuf stays at the edges: convert.py)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

# Shared with the controller (mlsched.model), re-exported for the agent's modules.
from mlsched.model import GpuInfo as GpuInfo
from mlsched.model import GpuMetrics as GpuMetrics
from mlsched.model import Launcher as Launcher
from mlsched.model import NodeMetrics as NodeMetrics


class TaskState(enum.IntEnum):
    """Lifecycle of one task attempt; the values equal ``mlsched.v1.TaskState``."""

    UNSPECIFIED = 0
    LAUNCHING = 1
    RUNNING = 2
    SUSPENDING = 3
    SUSPENDED = 4
    COMPLETED = 5
    FAILED = 6
    KILLED = 7
    LOST = 8

    @property
    def is_final(self) -> bool:
        """True for the states a task attempt ends in."""
        return self in _FINAL_STATES


_FINAL_STATES = frozenset(
    {TaskState.SUSPENDED, TaskState.COMPLETED, TaskState.FAILED, TaskState.KILLED, TaskState.LOST}
)


@dataclass(frozen=True, order=True)
class TaskRef:
    """One attempt of one task (one process of a job)."""

    job_id: str
    rank: int
    attempt: int

    @property
    def task_id(self) -> str:
        """The ``<job_id>/<rank>/<attempt>`` form used in ``MLSCHED_TASK_ID``."""
        return f"{self.job_id}/{self.rank}/{self.attempt}"

    @classmethod
    def parse(cls, task_id: str) -> TaskRef:
        """Parse ``<job_id>/<rank>/<attempt>``; raises ValueError when malformed."""
        parts = task_id.split("/")
        if len(parts) != 3 or not parts[0]:
            raise ValueError(f"malformed task id {task_id!r}")
        return cls(parts[0], int(parts[1]), int(parts[2]))

    def __str__(self) -> str:
        return self.task_id


@dataclass(frozen=True)
class TargetMetric:
    """Target-metric stopping criterion; ``goal`` is ``"max"`` or ``"min"``."""

    metric: str
    value: float
    goal: str


@dataclass(frozen=True)
class LaunchRequest:
    """Everything the agent needs to start one task attempt."""

    ref: TaskRef
    command: tuple[str, ...]
    working_dir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    gpu_indices: tuple[int, ...] = ()
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str = ""
    master_port: int = 0
    resume: bool = False
    user: str = ""
    batch_size: int = 0
    max_iterations: int | None = None
    target: TargetMetric | None = None
    ps_workers: int = 0  # a PS job's workers this attempt (nodeagent.ps_role); 0: not one
    launcher: Launcher = Launcher.AGENT  # TORCHRUN: the command is one torchrun per task


@dataclass(frozen=True)
class TaskStatusInfo:
    """What the agent reports about a task attempt."""

    ref: TaskRef
    state: TaskState
    exit_code: int = 0
    message: str = ""
    checkpoint_step: int = 0
    restored_step: int = 0
    pid: int = 0
    restored: bool = False  # the trainer reported Restored: restored_step is meaningful
    progress: ProgressInfo | None = None  # the newest progress of this attempt (None: none)


@dataclass(frozen=True)
class ProgressInfo:
    """A progress report from a trainer."""

    iteration: int = 0
    loss: float = 0.0
    metrics: Mapping[str, float] = field(default_factory=dict)
    iteration_time_s: float = 0.0
    batch_size: int = 0
    time: float = 0.0
    compute_time_s: float = 0.0  # per-iteration computation alone; 0 when not measured


@dataclass(frozen=True)
class TaskMetrics:
    """One sample of one task's process tree."""

    ref: TaskRef
    cpu_percent: float
    memory_rss_bytes: int
    gpu_memory_bytes: int = 0
    net_bytes_per_s: float = 0.0  # TCP bytes sent + received (metrics.TaskMetricsSampler)
    net_measured: bool = False  # net_bytes_per_s was measured (False: the equal split applies)


@dataclass(frozen=True)
class RunningTask:
    """A running task attempt as the load measurement needs it (``overload.py``)."""

    ref: TaskRef
    pid: int
    gpu_indices: tuple[int, ...]
    launched_at: float  # unix time; the fallback priority (older: lower), priorities.py
    movable: bool = True  # False once asked to suspend, stop or die


@dataclass(frozen=True)
class SuspendCommand:
    """Ask the trainer to checkpoint at the next step and exit."""

    reason: str = ""


@dataclass(frozen=True)
class StopCommand:
    """Ask the trainer to finish now; the job counts as completed."""

    reason: str = ""


@dataclass(frozen=True)
class BatchSizeCommand:
    """Ask the trainer to switch to a new global batch size."""

    batch_size: int


@dataclass(frozen=True)
class LeaseCommand:
    """Tell the trainer when its lease expires."""

    expires_at: float
    renewed: bool


@dataclass(frozen=True)
class RegroupCommand:
    """Re-form the job's process group in place (trainer_shim/regroup.py)."""

    generation: int
    world_size: int
    master_addr: str
    master_port: int
    batch_size: int = 0


@dataclass(frozen=True)
class RegroupRequest:
    """Change a running attempt's process count on this node in place (nodeagent/regroup.py).

    ``launches``: the new ranks, from the old world size up; their master port is 0 when
    ``master_port`` is (the agent then picks one for the whole group).
    """

    job_id: str
    attempt: int
    generation: int
    world_size: int
    launches: tuple[LaunchRequest, ...] = ()
    master_port: int = 0
    batch_size: int = 0


TrainerCommand = SuspendCommand | StopCommand | BatchSizeCommand | LeaseCommand | RegroupCommand


@dataclass(frozen=True)
class LogsResult:
    """The answer to a log fetch."""

    content: str = ""
    truncated: bool = False
    error: str = ""


@dataclass(frozen=True)
class Registration:
    """What the agent tells the controller when it (re)registers."""

    node_id: str
    address: str
    hostname: str
    gpus: tuple[GpuInfo, ...]
    cpu_count: int
    memory_total_bytes: int
    tasks: tuple[TaskStatusInfo, ...]
    agent_version: str
    self_fence_margin_s: float = 0.0  # nodeagent.selffence.self_fence_margin_s; 0: not said
