"""Building the policy's :class:`ClusterSnapshot` from the controller state."""

from __future__ import annotations

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView, NodeView
from controller.state import ControllerState
from mlsched.model import IterationStop, Job, JobState


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


def job_view(state: ControllerState, job: Job) -> JobView:
    placement: tuple[TaskPlacement, ...] = ()
    attained = job.attained_gpu_s
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
        attained_gpu_s=attained,
        estimated_remaining_s=estimated_remaining_s(job),
        speed_samples=tuple(job.speed_samples),
        metric_history=tuple(job.metric_history),
        sr_overhead_s=mean_sr_overhead_s(job),
    )


def build_snapshot(state: ControllerState) -> ClusterSnapshot:
    """Caller holds ``state.lock``."""
    busy = state.busy_gpus()
    nodes = tuple(
        NodeView(
            id=n.id,
            gpu_indices=tuple(g.index for g in n.gpus),
            free_gpu_indices=tuple(g.index for g in n.gpus if g.index not in busy.get(n.id, ())),
        )
        for n in state.schedulable_nodes()
    )
    views = [job_view(state, j) for j in state.jobs.values() if not j.state.terminal]
    return ClusterSnapshot(
        now=state.clock.now(),
        nodes=nodes,
        queued=tuple(
            sorted(
                (v for v in views if v.state.queued),
                key=lambda v: (v.queued_since, v.submit_time, v.id),
            )
        ),
        active=tuple(v for v in views if v.state.active),
        busy=tuple(v for v in views if v.state in (JobState.SUSPENDING, JobState.CANCELLING)),
        default_lease_s=state.settings.lease_s,
    )
