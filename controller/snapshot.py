"""Building the policy's :class:`ClusterSnapshot` from the controller state.

MLFS' inputs come from the node agents' load reports (``Node.load``, the latest one): a node's
``utilization`` per resource type and ``gpu_utilization`` per GPU are the agent's shares of its
capacities; a job's ``resource_usage`` is the sum, per resource type, of the demands its agents
reported for the live tasks of its current attempt (for a job on several nodes, shares of
different nodes added up). Both are empty while nothing was reported. ``migration_requested``
is set while a node agent's request to move the job is pending. GPUs reserved for a migration
(``lifecycle.reserved_gpus``) are not free.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller import lifecycle
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView, NodeView
from controller.state import ControllerState
from mlsched.model import IterationStop, Job, JobState, Task


def estimated_remaining_s(job: Job) -> float | None:
    """Iterations left times the last reported iteration time; None before any report."""
    if job.iteration_time_s <= 0:
        return None
    stop = job.spec.stopping
    budget = stop.iterations if isinstance(stop, IterationStop) else stop.max_iterations
    return max(0, budget - job.iteration) * job.iteration_time_s


def mean_sr_overhead_s(job: Job) -> float | None:
    """The mean measured suspend + resume overhead; None before one was measured."""
    if not job.sr_overheads_s:
        return None
    return sum(job.sr_overheads_s) / len(job.sr_overheads_s)


def reported_demands(state: ControllerState, tasks: list[Task]) -> list[Mapping[str, float]]:
    """The demand per resource type each of these tasks' agents last reported for it, for the
    tasks with a report."""
    wanted = {(t.job_id, t.rank, t.attempt) for t in tasks}
    demands: list[Mapping[str, float]] = []
    for node_id in dict.fromkeys(t.node_id for t in tasks):
        node = state.nodes.get(node_id)
        if node is None or node.load is None:
            continue
        for reported in node.load.tasks:
            if (reported.job_id, reported.rank, reported.attempt) in wanted:
                demands.append(reported.demand)
    return demands


def resource_usage(state: ControllerState, tasks: list[Task]) -> dict[str, float]:
    """The summed demand the agents reported for these tasks (empty: none reported)."""
    usage: dict[str, float] = {}
    for demand in reported_demands(state, tasks):
        for resource, share in demand.items():
            usage[resource] = usage.get(resource, 0.0) + share
    return usage


def job_view(state: ControllerState, job: Job) -> JobView:
    placement: tuple[TaskPlacement, ...] = ()
    attained = job.attained_gpu_s
    tasks: list[Task] = []
    if job.state.active or job.state in (JobState.SUSPENDING, JobState.CANCELLING):
        tasks = state.live_tasks(job.id)
        placement = tuple(TaskPlacement(t.rank, t.node_id, t.gpu_indices) for t in tasks)
        if job.attempt_started_at is not None:
            held = state.attempt_gpus(job.id)  # fewer than spec.gpus in a profiling run
            attained += (state.clock.now() - job.attempt_started_at) * held
    return JobView(
        id=job.id,
        user=job.user,
        spec=job.spec,
        state=job.state,
        submit_time=job.submit_time,
        queued_since=job.queued_since,
        attempt=job.attempt,
        suspensions=job.suspensions,
        iteration=job.iteration,
        metrics=dict(job.metrics),
        lease_expires_at=job.lease_expires_at,
        placement=placement,
        running_since=job.attempt_started_at if placement else None,
        training_since=job.training_started_at if placement else None,
        attained_gpu_s=attained,
        estimated_remaining_s=estimated_remaining_s(job),
        speed_samples=tuple(job.speed_samples),
        metric_history=tuple(job.metric_history),
        sr_overhead_s=mean_sr_overhead_s(job),
        losses=tuple(job.losses),
        migration_requested=job.migration_requested_at is not None and job.state.active,
        resource_usage=resource_usage(state, tasks),
        overload_retreat=job.overload_retreat if job.state.queued else None,
    )


def build_snapshot(state: ControllerState) -> ClusterSnapshot:
    """Caller holds ``state.lock``."""
    busy = state.busy_gpus()
    for node_id, gpus in lifecycle.reserved_gpus(state).items():
        busy.setdefault(node_id, set()).update(gpus)
    nodes = tuple(
        NodeView(
            id=n.id,
            gpu_indices=tuple(g.index for g in n.gpus),
            free_gpu_indices=()
            if not n.accepts_new_tasks
            else tuple(g.index for g in n.gpus if g.index not in busy.get(n.id, ())),
            utilization=dict(n.load.utilization) if n.load is not None else {},
            gpu_utilization=dict(n.load.gpu_utilization) if n.load is not None else {},
            cpus=float(n.cpu_count),
            memory_gb=n.memory_total_bytes / 2**30,
        )
        for n in state.schedulable_nodes()
    )
    views = [job_view(state, j) for j in state.jobs.values() if not j.state.terminal]
    fenced = state.fences.jobs()  # a LOST task may still run: no new attempt yet
    return ClusterSnapshot(
        now=state.clock.now(),
        nodes=nodes,
        queued=tuple(
            sorted(
                (v for v in views if v.state.queued and v.id not in fenced),
                key=lambda v: (v.queued_since, v.submit_time, v.id),
            )
        ),
        active=tuple(v for v in views if v.state.active),
        busy=tuple(v for v in views if v.state in (JobState.SUSPENDING, JobState.CANCELLING)),
        default_lease_s=state.settings.lease_s,
    )
