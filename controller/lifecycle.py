"""Job lifecycle: launching, suspending, migrating, cancelling and settling jobs as their
tasks end.

Migration (MLFS §3.3.3, a policy's ``Migrate``): the job is suspended as for a ``Suspend``
(checkpoint, exit) with its target placement stored on the job (``Job.migration_target``,
persisted). The target's GPUs stay reserved from the order on: :func:`reserved_gpus` counts them
as taken for every other launch, migration and the policy's snapshot. When the job reaches
SUSPENDED it is launched on the target at once, resuming from the checkpoint, with the order's
lease; if the target is gone by then (node dead or disconnected, GPUs taken) the job simply
stays in the queue. A controller restart keeps the target: a job found SUSPENDED with a target
is resumed there (or queued) at the next cycle (:func:`resume_pending_migrations`).

A node agent's migration request (``Job.migration_requested_at``) is cleared when the job leaves
STARTING/RUNNING or starts a new attempt (it moved, or ran again from the queue).

Every function expects the caller to hold ``state.lock``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from controller.commands import KillCommand, LaunchCommand, LeaseCommand, SuspendCommand, TaskRef
from controller.placement import TaskPlacement
from controller.ps_placement import ps_workers
from controller.state import LIVE_TASK_STATES, ControllerState, SrTiming
from controller.stops import COMPLETED_MESSAGE, completion_message
from mlsched.model import Job, JobState, MigrationTarget, ResumeRecord, Task, TaskState


def ref(task: Task) -> TaskRef:
    return TaskRef(task.job_id, task.rank, task.attempt)


def launch(
    state: ControllerState, job: Job, placement: tuple[TaskPlacement, ...], lease_s: float
) -> None:
    """Start a queued job (fresh or resuming from its checkpoint) on ``placement``: one task
    per entry, in rank order. Fewer processes than ``spec.num_tasks`` make a profiling run;
    WORLD_SIZE and the local ranks follow the placement, not the spec."""
    now = state.clock.now()
    resume = job.attempt > 0
    job.attempt += 1
    job.migration_requested_at = None  # a new attempt: whatever was asked of the old is moot
    job.overload_retreat = None  # it runs again: the nodes it left are no longer kept from it
    nodes_in_order = list(dict.fromkeys(p.node_id for p in placement))
    for node_id in nodes_in_order:
        if node_id not in job.node_history:
            job.node_history.append(node_id)
    if job.first_start_time is None:
        job.first_start_time = now
    job.lease_expires_at = now + lease_s
    job.attempt_started_at = now
    job.training_started_at = None  # set by the attempt's first progress report
    job.restored_step = 0
    job.master_port = _pick_master_port(state, job, placement[0].node_id)
    if job.resumes and job.resumes[-1].resumed_at is None:
        job.resumes[-1].resumed_at = now
        job.resumes[-1].to_nodes = tuple(nodes_in_order)
    timing = state.sr_timings.get(job.id)
    if timing is not None and timing.suspension_s is not None:
        timing.launched_at, timing.attempt = now, job.attempt  # ends at its first progress
    else:
        state.sr_timings.pop(job.id, None)
    tasks = [
        Task(job.id, p.rank, job.attempt, p.node_id, p.gpu_indices, TaskState.LAUNCHING)
        for p in placement
    ]
    state.tasks[job.id] = tasks
    state.save_tasks(job.id)
    verb = "resuming" if resume else "launching"
    where = ", ".join(f"{p.node_id}:{list(p.gpu_indices)}" for p in placement)
    held = sum(len(p.gpu_indices) for p in placement)
    if held < job.spec.gpus:
        where += f" ({held} of {job.spec.gpus} GPUs)"
    _set_state(state, job, JobState.STARTING, f"{verb} attempt {job.attempt} on {where}")
    master = state.nodes[placement[0].node_id].address
    workers = ps_workers(job.spec, placement)
    for task, p in zip(tasks, placement, strict=True):
        local = [q for q in placement if q.node_id == p.node_id]
        state.send(
            p.node_id,
            LaunchCommand(
                task=ref(task),
                spec=job.spec,
                user=job.user,
                gpu_indices=p.gpu_indices,
                world_size=len(placement),
                local_rank=local.index(p),
                local_world_size=len(local),
                master_addr=master,
                master_port=job.master_port,
                resume=resume,
                ps_workers=workers,
            ),
        )


def renew(state: ControllerState, job: Job, lease_s: float) -> None:
    job.lease_expires_at = state.clock.now() + lease_s
    state.save_job(job)
    for task in state.live_tasks(job.id):
        state.send(task.node_id, LeaseCommand(ref(task), True, job.lease_expires_at))


def suspend(state: ControllerState, job: Job, reason: str) -> None:
    """Ask every live task to checkpoint and exit; the job settles as SUSPENDED."""
    tasks = state.live_tasks(job.id)
    for task in tasks:
        if task.state is not TaskState.SUSPENDING:
            task.state = TaskState.SUSPENDING
    state.save_tasks(job.id)
    state.sr_timings[job.id] = SrTiming(ordered_at=state.clock.now())
    _set_state(state, job, JobState.SUSPENDING, reason)
    for task in tasks:
        state.send(task.node_id, SuspendCommand(ref(task), suspend_grace_s(state, job), reason))
    settle(state, job)


def suspend_grace_s(state: ControllerState, job: Job) -> float:
    """How long a suspension of ``job`` waits for its checkpoint: the spec's, else the default."""
    return job.spec.suspend_grace_s or state.settings.suspend_grace_s


def cancel(state: ControllerState, job: Job, reason: str) -> None:
    if job.state.queued:
        _set_state(state, job, JobState.CANCELLED, reason)
        return
    if job.state is not JobState.CANCELLING:
        _set_state(state, job, JobState.CANCELLING, reason)
    kill_live_tasks(state, job, reason)
    settle(state, job)


def kill_live_tasks(state: ControllerState, job: Job, reason: str) -> None:
    for task in state.live_tasks(job.id):
        state.send(task.node_id, KillCommand(ref(task), reason))


def task_ended(
    state: ControllerState, task: Task, new_state: TaskState, exit_code: int, message: str
) -> None:
    """Record the end of a task of the job's current attempt and react as a gang."""
    job = state.jobs[task.job_id]
    task.state, task.exit_code, task.message = new_state, exit_code, message
    state.save_tasks(job.id)
    where = f"rank {task.rank} on {task.node_id}"
    state.emit("task_ended", f"{where}: {new_state.value} {message}".strip(), job.id, task.node_id)
    if job.state.terminal:
        return
    if job.state.active:
        if new_state is TaskState.FAILED:
            job.failures += 1
            detail = f"{where} failed (exit {exit_code}): {message}"
            if job.failures > job.spec.max_retries:
                _set_state(state, job, JobState.FAILED, detail)
                kill_live_tasks(state, job, "another task of the job failed")
                return
            suspend(state, job, f"retry {job.failures}/{job.spec.max_retries} after {detail}")
            return
        if new_state in (TaskState.SUSPENDED, TaskState.LOST, TaskState.KILLED):
            suspend(state, job, f"{where} {new_state.value.lower()}: {message}")
            return
    settle(state, job)


def settle(state: ControllerState, job: Job) -> None:
    """Once no task of the job is live, move the job to where it belongs."""
    if job.state.terminal or state.live_tasks(job.id):
        return
    if job.attempt_started_at is not None:
        held = state.attempt_gpus(job.id)  # fewer than spec.gpus in a profiling run
        job.attained_gpu_s += (state.clock.now() - job.attempt_started_at) * held
        job.attempt_started_at = None
    job.training_started_at = None
    tasks = state.job_tasks(job.id)
    if job.state is JobState.CANCELLING:
        _set_state(state, job, JobState.CANCELLED, job.message)
    elif any(t.state is TaskState.COMPLETED and t.rank == 0 for t in tasks):
        _set_state(state, job, JobState.COMPLETED, completion_message(tasks))
    elif job.state in (JobState.STARTING, JobState.RUNNING, JobState.SUSPENDING):
        _requeue(state, job, tasks)


def _requeue(state: ControllerState, job: Job, tasks: list[Task]) -> None:
    now = state.clock.now()
    timing = state.sr_timings.get(job.id)
    if job.state is JobState.SUSPENDING and timing is not None:
        timing.suspension_s = now - timing.ordered_at
    else:  # ended without a suspend order: nothing to time
        state.sr_timings.pop(job.id, None)
    job.suspensions += 1
    job.lease_expires_at = None
    job.queued_since = now
    job.resumes.append(
        ResumeRecord(
            suspended_at=now,
            checkpoint_step=job.checkpoint_step,
            from_nodes=tuple(dict.fromkeys(t.node_id for t in tasks)),
        )
    )
    _set_state(
        state, job, JobState.SUSPENDED, f"suspended with checkpoint at step {job.checkpoint_step}"
    )
    if job.stop_requested:
        finish_stopped(state, job)
    elif job.migration_target is not None:
        resume_migration(state, job)


def finish_stopped(state: ControllerState, job: Job) -> None:
    """A SUSPENDED job a user stopped (``mlsched stop``) ends now: COMPLETED with its last
    checkpoint as the final model, or CANCELLED when it never saved one."""
    if job.checkpoint_step > 0:
        detail = f"{job.stop_requested}; final model: checkpoint at step {job.checkpoint_step}"
        _set_state(state, job, JobState.COMPLETED, f"{COMPLETED_MESSAGE}: {detail}")
    else:
        _set_state(state, job, JobState.CANCELLED, f"{job.stop_requested} before any checkpoint")


def _set_state(state: ControllerState, job: Job, new: JobState, message: str = "") -> None:
    """``state.set_job_state``, dropping what a job leaving STARTING/RUNNING no longer needs:
    a pending migration request, and the migration target once it cannot be resumed on."""
    if not new.active:
        job.migration_requested_at = None
    if new.terminal or new is JobState.CANCELLING:
        job.migration_target = None
    state.set_job_state(job, new, message)


# --- migration (MLFS §3.3.3) -----------------------------------------------------------------


def describe(placement: Sequence[TaskPlacement]) -> str:
    return ", ".join(f"{p.node_id}:{list(p.gpu_indices)}" for p in placement)


def target_placement(target: MigrationTarget) -> tuple[TaskPlacement, ...]:
    return tuple(TaskPlacement(rank, node, tuple(gpus)) for rank, node, gpus in target.placement)


def reserved_gpus(state: ControllerState, except_job: str = "") -> dict[str, set[int]]:
    """GPUs reserved for jobs being migrated, per node (``except_job``'s left out)."""
    reserved: dict[str, set[int]] = {}
    for job in state.jobs.values():
        if job.migration_target is None or job.id == except_job or job.state.terminal:
            continue
        for p in target_placement(job.migration_target):
            reserved.setdefault(p.node_id, set()).update(p.gpu_indices)
    return reserved


def unavailable(
    state: ControllerState, placement: Sequence[TaskPlacement], job_id: str
) -> str | None:
    """Why ``placement`` cannot be given to ``job_id`` now (None: it can): a node not
    connected, a GPU it does not have, one held by another job's live task or reserved for
    another job's migration. The job's own live tasks and reservation do not count."""
    schedulable = {n.id: {g.index for g in n.gpus} for n in state.schedulable_nodes()}
    taken: dict[str, set[int]] = {}
    for other, tasks in state.tasks.items():
        if other == job_id:
            continue
        for task in tasks:
            if task.state in LIVE_TASK_STATES:
                taken.setdefault(task.node_id, set()).update(task.gpu_indices)
    reserved = reserved_gpus(state, except_job=job_id)
    for p in placement:
        gpus = set(p.gpu_indices)
        if p.node_id not in schedulable:
            return f"node {p.node_id} is not connected"
        if not state.nodes[p.node_id].accepts_new_tasks:
            return f"node {p.node_id}'s state disk is full"
        if not gpus <= schedulable[p.node_id]:
            return f"{p.node_id} has no GPU {sorted(gpus - schedulable[p.node_id])}"
        if gpus & taken.get(p.node_id, set()):
            return f"{p.node_id}:{sorted(gpus & taken[p.node_id])} held by another job"
        if gpus & reserved.get(p.node_id, set()):
            return f"{p.node_id}:{sorted(gpus & reserved[p.node_id])} reserved for another job"
    return None


def migrate(
    state: ControllerState,
    job: Job,
    placement: tuple[TaskPlacement, ...],
    lease_s: float,
    reason: str,
) -> None:
    """Checkpoint an active job and resume it on ``placement`` (module docstring). The caller
    has checked the placement (``scheduler.placement_problem`` and :func:`unavailable`)."""
    now = state.clock.now()
    from_nodes = tuple(dict.fromkeys(t.node_id for t in state.live_tasks(job.id)))
    job.migration_target = MigrationTarget(
        placement=tuple((p.rank, p.node_id, tuple(p.gpu_indices)) for p in placement),
        lease_s=lease_s,
        reason=reason,
        from_nodes=from_nodes,
        ordered_at=now,
    )
    job.migration_requested_at = None
    state.save_job(job)
    where = describe(placement)
    state.emit(
        "migration_ordered",
        f"from {', '.join(from_nodes) or 'nowhere'} to {where}: {reason}",
        job_id=job.id,
    )
    suspend(state, job, f"migrating to {where}: {reason}")


def resume_migration(state: ControllerState, job: Job) -> bool:
    """Launch a SUSPENDED job on its migration target; True when launched. A target that is
    gone leaves the job in the queue (the target is dropped either way)."""
    target = job.migration_target
    if target is None or job.state is not JobState.SUSPENDED:
        return False
    job.migration_target = None
    placement = target_placement(target)
    problem = unavailable(state, placement, job.id)
    if problem is not None:
        state.save_job(job)
        state.emit(
            "migration_abandoned",
            f"target {describe(placement)} is gone ({problem}); the job waits in the queue",
            job_id=job.id,
        )
        return False
    launch(state, job, placement, target.lease_s)
    to_nodes = tuple(dict.fromkeys(p.node_id for p in placement))
    state.emit(
        "job_migrated",
        f"{', '.join(target.from_nodes) or '?'} -> {', '.join(to_nodes)}: {target.reason}",
        job_id=job.id,
    )
    return True


def resume_pending_migrations(state: ControllerState) -> None:
    """Settle migration targets a restart (or a lost race) left behind: a SUSPENDED job is
    resumed on its target or left queued; a target on a job neither suspending nor suspended
    is dropped."""
    for job in list(state.jobs.values()):
        if job.migration_target is None or job.state is JobState.SUSPENDING:
            continue
        if job.state is JobState.SUSPENDED:
            resume_migration(state, job)
        else:
            job.migration_target = None
            state.save_job(job)


def _pick_master_port(state: ControllerState, job: Job, master_node: str) -> int:
    """A rendezvous port not used by another live job whose rank 0 is on the same node."""
    in_use = {
        other.master_port
        for other in state.jobs.values()
        if other.id != job.id
        and other.state
        in (JobState.STARTING, JobState.RUNNING, JobState.SUSPENDING, JobState.CANCELLING)
        and state.job_tasks(other.id)
        and state.job_tasks(other.id)[0].node_id == master_node
    }
    low, high = state.settings.master_port_range
    candidates = [port for port in range(low, high + 1) if port not in in_use]
    if not candidates:
        raise RuntimeError(f"every rendezvous port in {low}-{high} is in use on {master_node}")
    return random.Random(f"{job.id}/{job.attempt}").choice(candidates)
