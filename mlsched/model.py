"""Domain types shared by the controller, the CLI and the policies.

Plain dataclasses and enums: protobuf types never leave the edges (see ``mlsched.serde``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class JobClass(enum.Enum):
    """Service class of a job (UniSched §II: best-effort, strict SLO, soft SLO)."""

    BEST_EFFORT = "best-effort"
    STRICT_SLO = "strict-slo"
    SOFT_SLO = "soft-slo"


class Launcher(enum.Enum):
    """Who starts a job's training processes (docs/frameworks.md)."""

    AGENT = "agent"  # one process per gpus_per_process GPUs, started by the node agent
    TORCHRUN = "torchrun"  # the command runs torchrun: one launcher per task, a process per GPU


class MetricGoal(enum.Enum):
    MAXIMIZE = "max"
    MINIMIZE = "min"


class JobState(enum.Enum):
    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)

    @property
    def queued(self) -> bool:
        """Waiting for GPUs: never ran, or suspended and waiting to resume."""
        return self in (JobState.PENDING, JobState.SUSPENDED)

    @property
    def active(self) -> bool:
        """Holding (or about to hold) GPUs."""
        return self in (JobState.STARTING, JobState.RUNNING)


class TaskState(enum.Enum):
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    SUSPENDING = "SUSPENDING"
    SUSPENDED = "SUSPENDED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    LOST = "LOST"

    @property
    def ended(self) -> bool:
        return self in (
            TaskState.SUSPENDED,
            TaskState.COMPLETED,
            TaskState.FAILED,
            TaskState.KILLED,
            TaskState.LOST,
        )


@dataclass(frozen=True)
class Deadline:
    """Finishing within ``seconds_after_submit`` earns ``reward`` (UniSched §III-C2)."""

    seconds_after_submit: float
    reward: float


@dataclass(frozen=True)
class IterationStop:
    iterations: int


@dataclass(frozen=True)
class TargetMetricStop:
    metric: str
    target: float
    goal: MetricGoal
    max_iterations: int


StoppingCriterion = IterationStop | TargetMetricStop


class StopOption(enum.Enum):
    """MLF-C's stopping options a user picks (MLFS §3.5)."""

    ITERATIONS = "iterations"  # (i) run the iterations asked for
    OPT_STOP = "opt-stop"  # (ii) stop at (or near) the predicted best accuracy
    REQUIRED = "required-accuracy"  # (iii) stop once the required accuracy is reached


@dataclass(frozen=True)
class MlfsSpec:
    """What an MLFS job may declare (MLFS §3.1, §3.3.1, §3.5); defaults fit any job.

    ``partitions``: S_k / S^J of each model partition (task), summing to 1; empty means a plain
    data-parallel job, one partition per worker. ``dependencies``: (parent, child) edges
    between partition indices (a DAG). ``system_may_switch``: under overload MLF-C may move
    the job to a cheaper option ((i) -> (ii) -> (iii)).
    """

    urgency: float = 1.0  # L^J
    partitions: tuple[float, ...] = ()
    dependencies: tuple[tuple[int, int], ...] = ()
    stop_option: StopOption = StopOption.ITERATIONS
    system_may_switch: bool = False
    required_accuracy: float | None = None  # a^r_J, for option (iii) and the metrics


class BatchRule(enum.Enum):
    """How an elastic job's batch size follows its GPU count (issue 14)."""

    FIXED_GLOBAL = "fixed-global"  # the global batch stays; each GPU gets global / gpus
    FIXED_PER_GPU = "fixed-per-gpu"  # each GPU keeps batch_size / gpus; the global batch scales
    SCHEDULER = "scheduler"  # the scheduler picks the global batch, up to max_batch_size


@dataclass(frozen=True)
class ElasticSpec:
    """How far a job stretches: between ``min_gpus`` and ``max_gpus`` (its ``gpus`` is where it
    starts). ``min_gpus == 0`` means a rigid job. ``linear_lr``: the script scales its learning
    rate by the global batch over ``JobSpec.batch_size`` (Goyal et al.'s linear scaling rule)."""

    min_gpus: int = 0
    max_gpus: int = 0
    batch: BatchRule = BatchRule.FIXED_GLOBAL
    max_batch_size: int = 0  # SCHEDULER only: the largest global batch it may pick
    linear_lr: bool = False

    @property
    def enabled(self) -> bool:
        return self.min_gpus > 0

    def batch_size(self, base: int, base_gpus: int, gpus: int) -> int:
        """The global batch on ``gpus`` GPUs when ``base`` is the batch on ``base_gpus``
        (a SCHEDULER job's batch is what the scheduler chose; this gives its starting one)."""
        if self.batch is BatchRule.FIXED_PER_GPU and base_gpus > 0:
            return base // base_gpus * gpus
        return base

    def lr_scale(self, base: int, batch: int) -> float:
        """Learning-rate factor for a global batch of ``batch`` against the spec's ``base``."""
        return batch / base if self.linear_lr and base > 0 else 1.0


@dataclass(frozen=True)
class RoleResources:
    """What one task of a parameter-server job's role holds (issue 16): GPUs, cores, GB."""

    gpus: float = 0.0
    cpus: float = 0.0
    memory_gb: float = 0.0

    def vector(self) -> tuple[float, float, float]:
        """(GPUs, CPU cores, GB memory), the order of ``simulator.ps.Resources``."""
        return (self.gpus, self.cpus, self.memory_gb)


@dataclass(frozen=True)
class PsSpec:
    """A parameter-server job (Chic, issue 16): the scheduler picks ``min..max`` workers (on
    GPUs) and servers (CPU processes) per attempt; ``mlsched.spec_ps`` has the YAML form."""

    min_workers: int = 0  # 0: not a PS job
    max_workers: int = 0
    min_servers: int = 0
    max_servers: int = 0
    worker: RoleResources = RoleResources()
    server: RoleResources = RoleResources()

    @property
    def enabled(self) -> bool:
        return self.min_workers > 0


@dataclass(frozen=True)
class JobSpec:
    """A validated job specification (see ``mlsched.jobspec`` for the YAML form)."""

    name: str
    command: tuple[str, ...]
    gpus: int
    stopping: StoppingCriterion
    job_class: JobClass = JobClass.BEST_EFFORT
    deadlines: tuple[Deadline, ...] = ()
    gpus_per_process: int = 1
    working_dir: str = ""
    env: tuple[tuple[str, str], ...] = ()
    max_retries: int = 0
    batch_size: int = 0
    mlfs: MlfsSpec = MlfsSpec()
    elastic: ElasticSpec = ElasticSpec()
    ps: PsSpec = PsSpec()
    launcher: Launcher = Launcher.AGENT
    suspend_grace_s: float = 0.0  # 0: the controller's --suspend-grace

    @property
    def num_tasks(self) -> int:
        return self.gpus // self.gpus_per_process


@dataclass
class Task:
    """One process of a job in its current attempt."""

    job_id: str
    rank: int
    attempt: int
    node_id: str
    gpu_indices: tuple[int, ...]
    state: TaskState
    exit_code: int | None = None
    message: str = ""
    checkpoint_step: int = 0
    restored_step: int | None = None  # None until the trainer reports what it restored


@dataclass
class ResumeRecord:
    """One suspension and the resumption that followed it."""

    suspended_at: float
    checkpoint_step: int
    from_nodes: tuple[str, ...]
    resumed_at: float | None = None
    restored_step: int | None = None
    to_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SpeedSample:
    """Measured time per iteration of a job on one allocation shape (UniSched §III-B1).

    ``compute_time_s`` is the per-iteration computation alone (T_comp of Eq. 2) when the trainer
    reports it, else 0. ``count`` is how many reports the means are taken over.
    """

    gpus: int
    nodes: int
    iteration_time_s: float
    compute_time_s: float = 0.0
    count: int = 1


@dataclass(frozen=True)
class JobEstimate:
    """What the policy predicted and chose for a job in its last cycle (``mlsched describe``)."""

    phase: str  # "profiling", "slo" or "best-effort"
    iterations: int  # predicted total iterations (N_iter of Eq. 1)
    iteration_time_s: float  # predicted T_iter at the chosen (or requested) allocation
    remaining_s: float  # predicted remaining duration, T_sr included (Eq. 1)
    reward: float
    allocation: str = ""  # e.g. "cells 0/1/1/0 (6 GPUs on 2 nodes)"; "" while queued
    time: float = 0.0  # when the estimate was made


@dataclass
class Job:
    id: str
    user: str
    spec: JobSpec
    state: JobState
    submit_time: float
    queued_since: float
    first_start_time: float | None = None
    end_time: float | None = None
    attempt: int = 0
    suspensions: int = 0
    failures: int = 0
    node_history: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    iteration: int = 0
    checkpoint_step: int = 0
    restored_step: int = 0
    lease_expires_at: float | None = None
    master_port: int = 0
    attempt_started_at: float | None = None
    training_started_at: float | None = None  # first progress report of the current attempt
    attained_gpu_s: float = 0.0  # GPU-seconds of finished attempts
    iteration_time_s: float = 0.0  # last reported by rank 0
    message: str = ""
    resumes: list[ResumeRecord] = field(default_factory=list)
    speed_samples: list[SpeedSample] = field(default_factory=list)
    metric_history: list[tuple[int, float]] = field(default_factory=list)  # stopping metric
    sr_overheads_s: list[float] = field(default_factory=list)  # measured suspend + resume
    estimate: JobEstimate | None = None
    # MLFS: first, previous and latest reported loss (Eq. 2's loss reductions), and when a
    # node agent asked to move the job off an overloaded server (None: no request pending).
    losses: tuple[float, ...] = ()
    migration_requested_at: float | None = None
    # Where a migrating job resumes (set from the Migrate order until that launch).
    migration_target: MigrationTarget | None = None
    # Why a user asked the job to finish now (``mlsched stop``); sticky until it ends.
    stop_requested: str = ""
    # Sent back to the queue from overloaded servers with no other host (MLFS §3.3.2-3):
    # kept off the nodes it left while they cannot take it (controller/policy/retreat.py).
    overload_retreat: OverloadRetreat | None = None


@dataclass(frozen=True)
class OverloadRetreat:
    """A job an overload request sent back to the queue because no other server could take it
    (MLFS §3.3.3): the nodes it left, its measured load per task on each (node -> resource
    type -> share of that node's capacity; a node missing or empty: not measured), and when."""

    nodes: tuple[str, ...]
    demand: Mapping[str, Mapping[str, float]]
    at: float


@dataclass(frozen=True)
class MigrationTarget:
    """The placement a job being migrated resumes on (MLFS §3.3.3): ordered with the
    suspension, its GPUs stay reserved until the job has checkpointed and is launched there.
    ``placement`` holds ``(rank, node id, GPU indices)`` per task."""

    placement: tuple[tuple[int, str, tuple[int, ...]], ...]
    lease_s: float
    reason: str
    from_nodes: tuple[str, ...] = ()
    ordered_at: float = 0.0


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    virtual: bool
    memory_total_bytes: int = 0


@dataclass(frozen=True)
class GpuMetrics:
    index: int
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    virtual: bool


@dataclass(frozen=True)
class NodeMetrics:
    time: float
    cpu_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    gpus: tuple[GpuMetrics, ...] = ()
    state_disk_free_bytes: int = 0
    state_disk_full: bool = False  # the agent's state disk is under its reserve: no new tasks


@dataclass(frozen=True)
class TaskMetrics:
    job_id: str
    rank: int
    attempt: int
    cpu_percent: float
    memory_rss_bytes: int
    gpu_memory_bytes: int
    net_bytes_per_s: float


@dataclass
class Node:
    id: str
    address: str
    hostname: str
    gpus: tuple[GpuInfo, ...]
    cpu_count: int
    memory_total_bytes: int
    alive: bool
    last_seen: float
    metrics: NodeMetrics | None = None
    load: NodeLoad | None = None  # the agent's latest load report (not persisted)

    @property
    def accepts_new_tasks(self) -> bool:
        """False while the agent reports its state disk full (under its reserve): no new tasks
        go there, its running ones go on (issue 11: a full disk degrades service)."""
        return self.metrics is None or not self.metrics.state_disk_full


@dataclass(frozen=True)
class TaskUsage:
    """One task's demand as its agent measured it: shares (0-1) of that node's capacities
    per resource type ("gpu", "cpu", "memory", "bandwidth"), and its busiest GPU."""

    job_id: str
    rank: int
    attempt: int
    demand: dict[str, float]
    gpu_index: int = 0
    gpu_utilization: float = 0.0


@dataclass(frozen=True)
class NodeLoad:
    """A node's load (MLFS §3.3.2) as shares (0-1) of what its agent counts as capacity."""

    utilization: dict[str, float]
    gpu_utilization: dict[int, float]
    tasks: tuple[TaskUsage, ...] = ()
    cpu_cores: float = 0.0
    memory_bytes: int = 0
    bandwidth_bytes_per_s: float = 0.0


@dataclass(frozen=True)
class MigrationRequest:
    """A node agent asks to move a task off its overloaded server (MLFS §3.3.3)."""

    job_id: str
    rank: int
    attempt: int
    server_utilization: dict[str, float]
    demand: dict[str, float]
    reason: str = ""


@dataclass(frozen=True)
class Progress:
    iteration: int
    loss: float
    metrics: dict[str, float]
    iteration_time_s: float
    batch_size: int
    time: float
    compute_time_s: float = 0.0  # per-iteration computation alone (T_comp); 0: not reported


@dataclass(frozen=True)
class Event:
    seq: int
    time: float
    kind: str
    message: str
    job_id: str = ""
    node_id: str = ""
