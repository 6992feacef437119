"""Data shared by the simulator's parts: trace jobs in, per-job records and samples out."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Protocol

from mlsched.model import Deadline, JobClass, MlfsSpec

RESOURCES = ("gpu", "cpu", "memory", "bandwidth")  # MLFS §3.3.2's resource types, in order


@dataclass(frozen=True)
class ResourceDemand:
    """What each task of a job loads (MLFS §4.1), for utilisation, overload and bandwidth cost.

    ``gpu``: utilisation of each GPU the task holds (0-1); ``cpu``, ``memory``, ``bandwidth``:
    the task's share of one server's capacity; ``ring_mb``: MB a worker sends to the next in
    rank order per iteration (the all-reduce ring); ``pipeline_mb``: MB sent along each
    model-partition dependency edge per iteration. See ``docs/simulator.md``, *MLFS features*.
    """

    gpu: float
    cpu: float
    memory: float
    bandwidth: float
    ring_mb: float = 0.0
    pipeline_mb: float = 0.0

    def __post_init__(self) -> None:
        for name in ("gpu", "cpu", "memory", "bandwidth", "ring_mb", "pipeline_mb"):
            value = getattr(self, name)
            if not (value >= 0 and value < float("inf")):
                raise ValueError(f"ResourceDemand.{name} must be a finite number >= 0: {value}")
        if self.gpu > 1:
            raise ValueError(f"ResourceDemand.gpu is a utilisation in [0, 1], got {self.gpu}")

    def shares(self, gpus_per_task: int, gpus_per_node: int) -> tuple[float, ...]:
        """One task's load per resource type of ``RESOURCES``, as shares of its server."""
        gpu = self.gpu * gpus_per_task / gpus_per_node if gpus_per_node else 0.0
        return (gpu, self.cpu, self.memory, self.bandwidth)


@dataclass(frozen=True)
class ElasticProfile:
    """An elastic job's measured behaviour (issue 14; ``simulator/elastic.py`` builds it).

    ``speedup[g - 1]``: training speed on ``g`` GPUs (packed onto as few nodes as possible) over
    the speed on the job's requested ``gpus``, at its fixed global batch; ``loss``: (fraction of
    the job's work done, loss) points of a measured curve, fractions increasing from 0 to 1."""

    min_gpus: int
    max_gpus: int
    speedup: tuple[float, ...]
    loss: tuple[tuple[float, float], ...]
    source: str = ""  # where the tables came from, for reports

    def loss_at(self, fraction: float) -> float:
        """The loss after ``fraction`` of the work (linear between measured points)."""
        points = self.loss
        if fraction <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in itertools.pairwise(points):
            if fraction <= x1:
                return y0 + (y1 - y0) * (fraction - x0) / (x1 - x0) if x1 > x0 else y1
        return points[-1][1]


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace. Times in seconds; ``submit_s`` from the trace's origin."""

    id: str
    user: str
    submit_s: float
    duration_s: float  # run time at ``gpus`` GPUs on consolidated (one-node) placement
    gpus: int
    model: str = ""
    iterations: int = 0  # the trace's iteration count (0: unknown)
    job_class: JobClass = JobClass.BEST_EFFORT
    deadlines: tuple[Deadline, ...] = ()  # seconds after submission, with rewards
    performance_based: bool = False  # stops at a target metric rather than an iteration budget
    mlfs: MlfsSpec | None = None  # MLFS features (None: none, the job spec's defaults)
    demand: ResourceDemand | None = None  # per-task load (None: not modelled, no overload)
    elastic: ElasticProfile | None = None  # resizable, with measured speed and loss (issue 14)


class JobModel(Protocol):
    """How a simulated job behaves on a given allocation."""

    def work_s(self, job: TraceJob) -> float:
        """Consolidated-allocation seconds of training until the job stops (its stopping
        criterion: the iteration budget, or the point where its learning curve reaches the
        target for performance-based jobs)."""
        ...

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        """Training progress per second on ``gpus`` GPUs spread over ``nodes`` nodes, relative
        to the requested GPU count on one node (= 1.0)."""
        ...

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        """What a run measures on ``gpus`` GPUs over ``nodes`` nodes with the per-GPU batch of
        the requested allocation (UniSched §III-B1 profiling): (seconds per iteration,
        computation seconds per iteration)."""
        ...

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        """Seconds from a suspension order until the GPUs are free (checkpoint and exit)."""
        ...

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        """Seconds from a resumption until training progresses again (restore)."""
        ...

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        """Validation metric (accuracy) after ``fraction`` of ``work_s``; None if not modelled."""
        ...


@dataclass
class JobRecord:
    """What happened to one job in a simulation."""

    job: TraceJob
    first_start_s: float | None = None
    end_s: float | None = None  # completion time; None if it never finished
    suspensions: int = 0
    gpu_s: float = 0.0  # GPU-seconds held (including overheads)
    final_metric: float | None = None
    nodes_used: int = 0  # most nodes it spanned in one attempt
    accuracy_by_deadline: float | None = None  # at its earliest deadline, else at its end
    stopped: bool = False  # ended by a Stop order (MLF-C) rather than its stopping criterion
    migrations: int = 0
    resumed_elsewhere: int = 0  # resumptions on other nodes than the attempt before
    overload_retreats: int = 0  # sent back to the queue by an overload with no host to move to
    bandwidth_gb: float = 0.0  # sent between servers (MLFS Eq. 1's B_{n_i, n_j})
    resizes: int = 0  # Decision.resize orders carried out
    # (time, work seconds done) whenever progress changed course; linear in between
    progress: list[tuple[float, float]] = field(default_factory=list)

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.job.submit_s

    @property
    def queue_s(self) -> float | None:
        """Time from submission to first start."""
        return None if self.first_start_s is None else self.first_start_s - self.job.submit_s


@dataclass
class SimResult:
    policy: str
    total_gpus: int
    records: list[JobRecord]
    utilization: list[tuple[float, int]] = field(default_factory=list)  # (time, busy GPUs)
    decision_times_s: list[float] = field(default_factory=list)  # policy time per cycle
    makespan_s: float = 0.0
    wall_s: float = 0.0
    refused_launches: int = 0  # launches ignored: job not queued, or placement not allowed
    refused_migrations: int = 0  # migrations ignored: job not active, or placement not allowed
    refused_resizes: int = 0  # resizes ignored: job not active or not elastic, bad placement
