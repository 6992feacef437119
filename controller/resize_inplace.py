"""The ``in-place regroup`` resize mechanism (issue 15, ONES §3.3.2): a GPU-count change on the
node the job already runs on, without restarting the ranks that stay.

The controller records the new ranks' tasks (LAUNCHING, in the current attempt) before it sends
``RegroupTask`` to the node, so that their reports match a known task. The agent starts them and
tells every running rank the new group; rank 0 switches once the new ranks arrived, and ranks at
or above the new world size leave the group and end COMPLETED (``settle`` completes a job only
on rank 0's end). A script that follows regroups (``trainer_shim.regroup.ElasticGroup``)
reports ``regroup_generation`` among its metrics (``JobContext.regrouped``): only such a job is
regrouped (a plain DDP script goes by checkpoint-restart), and the resize is done at rank 0's
first report of the new generation once the leaving ranks are gone. A regroup not done within
the order's lease (the agent refused it, or is too old to know the message) is abandoned: the
new ranks' records are dropped (and kills sent for them), and the job's later resizes of this
attempt go by checkpoint-restart.

Known gaps: a grow after a shrink reuses the leaving rank's number in the same attempt; the
controller acknowledged that rank's end when it applied it, so the agent has forgotten it, but
a re-report of that end arriving after the new record was made would end the new rank's record.
Attained GPU time counts the GPUs the attempt was launched on plus those added.

Every function expects the caller to hold ``state.lock``.
"""

from __future__ import annotations

from dataclasses import replace

from controller import lifecycle
from controller.commands import KillCommand, RegroupCommand
from controller.placement import TaskPlacement
from controller.resize_book import PendingResize, ResizeBook
from controller.state import LIVE_TASK_STATES, ControllerState
from mlsched.model import Job, JobState, Task, TaskState

NAME = "in-place regroup"
GENERATION_METRIC = "regroup_generation"  # trainer_shim.context.JobContext.regrouped sets it


def plan_problem(
    current: tuple[TaskPlacement, ...], target: tuple[TaskPlacement, ...]
) -> str | None:
    """Why ``current`` cannot become ``target`` in place (both in rank order); None when it
    can: one node, another process count, and the ranks that stay keep their GPUs."""
    if not current or len(current) == len(target):
        return "the process count does not change"
    nodes = {p.node_id for p in (*current, *target)}
    if len(nodes) != 1:
        return f"the job would span nodes {sorted(nodes)}"
    staying = min(len(current), len(target))
    if current[:staying] != target[:staying]:
        return "the ranks that stay would change GPUs"
    return None


class InPlaceRegroup:
    """Start or stop ranks on the job's one node; the ranks that stay keep training."""

    name = NAME

    def accepts(self, state, job, current, target, batch) -> bool:  # type: ignore[no-untyped-def]
        if job.state is not JobState.RUNNING or plan_problem(current, target) is not None:
            return False
        if GENERATION_METRIC not in job.metrics:  # the script does not follow regroups
            return False
        if (job.id, job.attempt) in state.resizes.no_regroup:
            return False
        from controller.resize import target_problem  # resize imports this module

        problem, _ = target_problem(state, state.resizes, job.id, target)
        return problem is None

    def start(self, state: ControllerState, book: ResizeBook, pending: PendingResize) -> None:
        job = state.jobs[pending.job_id]
        held = pending.from_ranks = len(state.live_tasks(job.id))
        generation = max(
            int(job.metrics.get(GENERATION_METRIC, 0)), book.generations.get(job.id, 0)
        )
        pending.generation = book.generations[job.id] = generation + 1
        added = [p for p in pending.placement if p.rank >= held]
        # Records first: a report of a rank the controller does not know gets it killed.
        kept = [t for t in state.job_tasks(job.id) if t.attempt != job.attempt or t.rank < held]
        kept += [
            Task(job.id, p.rank, job.attempt, p.node_id, p.gpu_indices, TaskState.LAUNCHING)
            for p in added
        ]
        state.tasks[job.id] = kept
        state.save_tasks(job.id)
        rank0 = next(t for t in state.live_tasks(job.id) if t.rank == 0)
        spec = job.spec
        if job.spec.elastic.enabled:
            from controller.resize import elastic_env  # resize imports this module

            env = elastic_env(job.spec, pending.batch_size)
            spec = replace(job.spec, env=(*job.spec.env, *env.items()))
        state.send(
            rank0.node_id,
            RegroupCommand(
                task=lifecycle.ref(rank0),
                generation=pending.generation,
                world_size=len(pending.placement),
                new_ranks=tuple((p.rank, tuple(p.gpu_indices)) for p in added),
                spec=spec,
                user=job.user,
                batch_size=pending.batch_size,
            ),
        )
        lifecycle.renew(state, job, pending.lease_s)

    def settled(
        self, pending: PendingResize, job: Job, attempt: int, batch: int, elapsed_s: float
    ) -> str | None:
        """Done at rank 0's first report from the new group; given up when the attempt ended
        or no such report came within the order's lease."""
        if attempt != pending.attempt:
            return "the job restarted before it regrouped"
        if int(job.metrics.get(GENERATION_METRIC, 0)) >= pending.generation:
            return ""
        if elapsed_s > pending.lease_s:
            return f"regroup {pending.generation} not reported after {elapsed_s:.0f} s"
        return None


def leaving_ranks_gone(state: ControllerState, pending: PendingResize) -> bool:
    """Whether every rank at or above the target's count has ended (a shrink is over only
    then: a policy's next order must not see the leaving ranks as the job's)."""
    return not any(t.rank >= len(pending.placement) for t in state.live_tasks(pending.job_id))


def abandoned(state: ControllerState, book: ResizeBook, pending: PendingResize) -> None:
    """Drop the records of new ranks that never ran (killing any that did) and send the job's
    later resizes of this attempt to checkpoint-restart."""
    book.no_regroup.add((pending.job_id, pending.attempt))
    job = state.jobs.get(pending.job_id)
    if job is None:
        return
    tasks = state.job_tasks(job.id)
    stale = [
        t
        for t in tasks
        if t.attempt == pending.attempt
        and t.rank >= pending.from_ranks
        and t.state in LIVE_TASK_STATES
    ]
    if not stale or pending.from_ranks >= len(pending.placement):
        return
    for task in stale:
        state.send(task.node_id, KillCommand(lifecycle.ref(task), "the regroup was abandoned"))
    state.tasks[job.id] = [t for t in tasks if t not in stale]
    state.save_tasks(job.id)
