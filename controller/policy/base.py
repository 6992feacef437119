"""The policy interface shared by the live controller and the simulator.

A policy gets a :class:`ClusterSnapshot` (plain frozen data, no I/O handles) and returns a
:class:`Decision`. It must not keep hidden state that changes its answer for the same snapshot
other than what it documents (e.g. a learned model), must not read the clock (``snapshot.now``
is the time) and never knows whether the cluster is real or simulated.

Lease semantics (UniSched §III-C1, Gavel, Chronus): every active job holds a lease. A job whose
lease has expired (``lease_expires_at <= now``) must appear in ``renew`` or ``suspend``; if a
policy names it in neither, the controller expires the lease and suspends the job. Preemption
happens at lease boundaries, so between boundaries the simulator skips cycles in which no GPU
is free.

``ClusterSnapshot.queued`` is in queue order: by ``queued_since`` (submission, or the time a
suspended job rejoined the queue), exact ties in the order the jobs joined.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from controller.placement import TaskPlacement
from mlsched.model import (
    JobClass,
    JobEstimate,
    JobSpec,
    JobState,
    OverloadRetreat,
    SpeedSample,
)


@dataclass(frozen=True)
class JobTruth:
    """A job's true future, known at submission only in a simulation: the iteration it stops
    at, its iteration time on each allocation shape ``(gpus, nodes)``, and its suspend plus
    resume overhead."""

    iterations: int
    iteration_time_s: Mapping[tuple[int, int], float]
    sr_overhead_s: float

    def iteration_time(self, gpus: int, nodes: int) -> float | None:
        """T_iter on ``gpus`` GPUs over ``nodes`` nodes (the widest known spread past the
        table); None for a GPU count the table does not hold."""
        exact = self.iteration_time_s.get((gpus, nodes))
        if exact is not None:
            return exact
        spread = [t for (g, n), t in self.iteration_time_s.items() if g == gpus and n < nodes]
        return max(spread) if spread else None


@dataclass(frozen=True)
class JobView:
    """What a policy may know about a job."""

    id: str
    user: str
    spec: JobSpec
    state: JobState
    submit_time: float
    queued_since: float  # when it last joined the queue (submission or suspension)
    attempt: int
    suspensions: int
    iteration: int = 0
    metrics: Mapping[str, float] = field(default_factory=dict)
    lease_expires_at: float | None = None
    placement: tuple[TaskPlacement, ...] = ()  # empty unless active
    running_since: float | None = None  # start of the current attempt
    # When the current attempt began to train: live, its first progress report; in the
    # simulator, the end of its resume overhead (may lie ahead). None: not yet, or not active.
    training_since: float | None = None
    attained_gpu_s: float = 0.0  # GPU-seconds of service received so far (Tiresias' 2D-LAS)
    estimated_remaining_s: float | None = None  # at the current allocation; None: unknown
    model: str = ""  # model name when known (traces), for placement-aware speed models
    # Observations for estimators (UniSched §III-B): iteration times per allocation shape,
    # the stopping metric's history as (iteration, value), the mean measured suspend + resume
    # overhead (None until one was measured).
    speed_samples: tuple[SpeedSample, ...] = ()
    metric_history: tuple[tuple[int, float], ...] = ()
    sr_overhead_s: float | None = None
    # MLFS (§3.3): first, previous and latest loss; a node agent's pending request to move the
    # job off an overloaded server; the job's share of its server's capacity per resource
    # ("gpu", "cpu", "memory", "bandwidth"), summed over its tasks there (empty: unknown).
    losses: tuple[float, ...] = ()
    migration_requested: bool = False
    resource_usage: Mapping[str, float] = field(default_factory=dict)
    # A queued job an overload request sent back with no other host: the nodes it left, its
    # load there, when (None: not such a job; :mod:`controller.policy.retreat`).
    overload_retreat: OverloadRetreat | None = None
    # What only a simulator knows (None live): for policies that declare ``needs_job_truth``
    # (the ``oracle`` bound of UniSched, issue 9).
    truth: JobTruth | None = None

    @property
    def gpus(self) -> int:
        return self.spec.gpus

    @property
    def job_class(self) -> JobClass:
        return self.spec.job_class


@dataclass(frozen=True)
class NodeView:
    """A schedulable node. ``utilization``: measured share (0-1) of each resource ("gpu",
    "cpu", "memory", "bandwidth"); ``gpu_utilization``: per GPU index (both empty: unknown)."""

    id: str
    gpu_indices: tuple[int, ...]
    free_gpu_indices: tuple[int, ...]
    utilization: Mapping[str, float] = field(default_factory=dict)
    gpu_utilization: Mapping[int, float] = field(default_factory=dict)
    cpus: float = 0.0  # CPU cores (0: unknown), for PS jobs' role vectors (issue 16)
    memory_gb: float = 0.0  # GB of memory (0: unknown)


@dataclass(frozen=True)
class ClusterSnapshot:
    now: float
    nodes: tuple[NodeView, ...]
    queued: tuple[JobView, ...]  # PENDING or SUSPENDED, in queue order (module docstring)
    active: tuple[JobView, ...]  # STARTING or RUNNING: holding GPUs and a lease
    busy: tuple[JobView, ...] = ()  # SUSPENDING or CANCELLING: GPUs not yet released
    default_lease_s: float = 300.0

    @classmethod
    def of(
        cls,
        now: float,
        gpus_per_node: Mapping[str, int],
        active: Iterable[JobView] = (),
        queued: Iterable[JobView] = (),
        busy: Iterable[JobView] = (),
        default_lease_s: float = 300.0,
    ) -> ClusterSnapshot:
        """A snapshot of nodes with GPUs ``0..n-1``, free unless an active or busy job holds
        them; queued jobs are put in queue order. For policy authors and their tests."""
        active, busy = tuple(active), tuple(busy)
        held: dict[str, set[int]] = {}
        for job in active + busy:
            for p in job.placement:
                held.setdefault(p.node_id, set()).update(p.gpu_indices)
        nodes = tuple(
            NodeView(n, tuple(range(c)), tuple(i for i in range(c) if i not in held.get(n, ())))
            for n, c in gpus_per_node.items()
        )
        ordered = tuple(sorted(queued, key=lambda j: (j.queued_since, j.submit_time, j.id)))
        return cls(
            now=now,
            nodes=nodes,
            queued=ordered,
            active=active,
            busy=busy,
            default_lease_s=default_lease_s,
        )

    def free_gpus(self) -> dict[str, tuple[int, ...]]:
        return {n.id: n.free_gpu_indices for n in self.nodes}

    def expired(self) -> tuple[JobView, ...]:
        """The active jobs whose lease has expired (found once per snapshot)."""
        return self._expired

    # A memo of what the fields determine; the dataclass is frozen and its fields immutable,
    # so it is made at most once per snapshot (``replace`` makes a new snapshot, memo-free).
    @cached_property
    def _expired(self) -> tuple[JobView, ...]:
        now = self.now
        return tuple(
            j for j in self.active if j.lease_expires_at is not None and j.lease_expires_at <= now
        )


@dataclass(frozen=True)
class Launch:
    """Start (or resume from its checkpoint) a queued job on these GPUs for one lease.

    The placement normally holds ``spec.gpus`` GPUs; it may hold fewer (whole processes of
    ``gpus_per_process``) for a profiling run (UniSched §III-B: at most 2 GPUs).
    """

    job_id: str
    placement: tuple[TaskPlacement, ...]
    lease_s: float


@dataclass(frozen=True)
class Renew:
    job_id: str
    lease_s: float


@dataclass(frozen=True)
class Suspend:
    """Checkpoint and release the GPUs; the job goes back to the queue."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class Migrate:
    """Move an active job: checkpoint, release its GPUs and resume on ``placement`` (MLFS
    §3.3.3: a task moved off an overloaded server goes straight to its new host)."""

    job_id: str
    placement: tuple[TaskPlacement, ...]
    lease_s: float
    reason: str


@dataclass(frozen=True)
class Stop:
    """End an active job now, COMPLETED, through the trainer (MLF-C early stop, §3.5)."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class Resize:
    """Change the GPUs of an active elastic job (issue 14): ``placement`` holds between
    ``spec.elastic.min_gpus`` and ``max_gpus`` GPUs (it may keep some of the job's own);
    ``batch_size`` is the new global batch (0: as the job's batch rule says). Carried out as a
    checkpoint and a resume on the new placement, with a fresh lease of ``lease_s``."""

    job_id: str
    placement: tuple[TaskPlacement, ...]
    lease_s: float
    batch_size: int = 0
    reason: str = ""


@dataclass(frozen=True)
class Decision:
    """A cycle's orders. ``estimates`` (optional) are the policy's predictions per job id, kept
    on the job for ``mlsched describe``; they change nothing by themselves.

    ``priorities`` (optional): per job id, its priority in the policy's own order (higher: more
    important to keep where it runs), for jobs that hold GPUs after this decision. The
    controller sends each to the job's node agents when it changes; an agent's overload choice
    reads it (MLFS §3.3.3, ``docs/overload.md``). MLF-H, MLF-RL and MLFS give Eq. 6's; other
    policies get the policy-neutral rule of :mod:`controller.policy.ranks`. A job left out
    keeps the priority its agents last received.
    """

    launch: tuple[Launch, ...] = ()
    renew: tuple[Renew, ...] = ()
    suspend: tuple[Suspend, ...] = ()
    estimates: Mapping[str, JobEstimate] = field(default_factory=dict)
    migrate: tuple[Migrate, ...] = ()
    stop: tuple[Stop, ...] = ()
    resize: tuple[Resize, ...] = ()
    priorities: Mapping[str, float] = field(default_factory=dict)


class Policy(Protocol):
    name: str

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        """Choose launches, renewals and suspensions for this scheduling cycle."""
        ...


def needs_job_truth(policy: object) -> bool:
    """Whether a policy needs :attr:`JobView.truth`, which only a simulator can fill (a
    policy says so with a true ``needs_job_truth`` attribute)."""
    return bool(getattr(policy, "needs_job_truth", False))
