"""Job lifecycle: launching, suspending, cancelling and settling jobs as their tasks end.

Every function expects the caller to hold ``state.lock``.
"""

from __future__ import annotations

import random

from controller.commands import KillCommand, LaunchCommand, LeaseCommand, SuspendCommand, TaskRef
from controller.placement import TaskPlacement
from controller.state import ControllerState, SrTiming
from mlsched.model import Job, JobState, ResumeRecord, Task, TaskState


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
    nodes_in_order = list(dict.fromkeys(p.node_id for p in placement))
    for node_id in nodes_in_order:
        if node_id not in job.node_history:
            job.node_history.append(node_id)
    if job.first_start_time is None:
        job.first_start_time = now
    job.lease_expires_at = now + lease_s
    job.attempt_started_at = now
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
    state.set_job_state(job, JobState.STARTING, f"{verb} attempt {job.attempt} on {where}")
    master = state.nodes[placement[0].node_id].address
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
    state.set_job_state(job, JobState.SUSPENDING, reason)
    for task in tasks:
        state.send(task.node_id, SuspendCommand(ref(task), state.settings.suspend_grace_s, reason))
    settle(state, job)


def cancel(state: ControllerState, job: Job, reason: str) -> None:
    if job.state.queued:
        state.set_job_state(job, JobState.CANCELLED, reason)
        return
    if job.state is not JobState.CANCELLING:
        state.set_job_state(job, JobState.CANCELLING, reason)
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
                state.set_job_state(job, JobState.FAILED, detail)
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
    tasks = state.job_tasks(job.id)
    if job.state is JobState.CANCELLING:
        state.set_job_state(job, JobState.CANCELLED, job.message)
    elif any(t.state is TaskState.COMPLETED and t.rank == 0 for t in tasks):
        state.set_job_state(job, JobState.COMPLETED, "reached its stopping criterion")
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
    state.set_job_state(
        job, JobState.SUSPENDED, f"suspended with checkpoint at step {job.checkpoint_step}"
    )


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
