"""Carrying out a policy's ``Resize`` of an elastic job on the live cluster (issue 14).

:func:`order` checks the order, picks the first mechanism of ``MECHANISMS`` that accepts it
and starts it; every mechanism leaves a :class:`~controller.resize_book.PendingResize` that
:func:`note_progress` closes when the job trains again in its new shape, recording the cost
(order to the first progress report in that shape, as t_sr is measured) in a ``job_resized``
event. Mechanisms, in order:

- ``in-place batch``: same GPUs, another global batch (ONES §3.3.1): ``SetBatchSize`` to every
  live task, applied by the shim at a step boundary; the lease is renewed.
- ``suspend/resume``: other GPUs: the job checkpoints and exits, and once it is SUSPENDED and
  every target GPU is free it is launched there (:func:`resume_ready`, run before every
  policy call), resuming from the checkpoint. Target GPUs another job is still giving up are
  waited for; they are reserved meanwhile. A target that is gone (node lost, GPU taken by a
  job that keeps it) abandons the resize: the job waits in the queue.

- ``in-place regroup``: another process count on the job's one node, the ranks that stay
  keeping their GPUs: ``RegroupTask`` to the agent, the ranks that stay train on
  (``controller/resize_inplace.py``); abandoned to checkpoint-restart when it does not happen.

A mechanism is an object with ``name``, ``accepts(state, job, current,
target, batch)``, ``start(state, book, pending)`` and ``settled(pending, job, attempt, batch,
elapsed_s)`` (:class:`Mechanism`; ``docs/elastic.md``).

An elastic job's attempt is launched (:func:`launch`) with its global batch for the GPUs it
gets, the spec's batch and its learning-rate rule in its environment
(``MLSCHED_ELASTIC_BATCH_SIZE``, ``MLSCHED_BASE_BATCH_SIZE``, ``MLSCHED_LR_SCALING``).

Every function expects the caller to hold ``state.lock``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from controller import lifecycle
from controller.commands import BatchSizeCommand, Command, LaunchCommand
from controller.placement import TaskPlacement
from controller.policy.base import Resize
from controller.resize_book import PendingResize, ResizeBook
from controller.resize_inplace import InPlaceRegroup, abandoned, leaving_ranks_gone
from controller.state import LIVE_TASK_STATES, ControllerState
from mlsched.model import BatchRule, Job, JobSpec, JobState

log = logging.getLogger(__name__)


class Mechanism(Protocol):
    name: str

    def accepts(
        self,
        state: ControllerState,
        job: Job,
        current: tuple[TaskPlacement, ...],
        target: tuple[TaskPlacement, ...],
        batch: int,
    ) -> bool: ...

    def start(self, state: ControllerState, book: ResizeBook, pending: PendingResize) -> None: ...

    def settled(
        self, pending: PendingResize, job: Job, attempt: int, batch: int, elapsed_s: float
    ) -> str | None:
        """After a progress report of rank 0 of ``attempt`` at global ``batch``, ``elapsed_s``
        after the order: "" once the job trains in its new shape, a reason when the resize
        cannot finish any more, None while it is under way."""
        ...


class InPlaceBatch:
    """Same GPUs, another batch: the shim switches at a step boundary."""

    name = "in-place batch"

    def accepts(self, state, job, current, target, batch) -> bool:  # type: ignore[no-untyped-def]
        return current == target

    def start(self, state: ControllerState, book: ResizeBook, pending: PendingResize) -> None:
        job = state.jobs[pending.job_id]
        for task in state.live_tasks(job.id):
            state.send(task.node_id, BatchSizeCommand(lifecycle.ref(task), pending.batch_size))
        lifecycle.renew(state, job, pending.lease_s)

    def settled(
        self, pending: PendingResize, job: Job, attempt: int, batch: int, elapsed_s: float
    ) -> str | None:
        """Done at the first report at the new batch; a script that still reports the old
        one a lease after the order does not follow batch changes: given up."""
        if attempt != pending.attempt:
            return "the job restarted before it changed its batch"
        if batch == pending.batch_size:
            return ""
        if elapsed_s > pending.lease_s:
            return f"the job still reports batch {batch} after {elapsed_s:.0f} s"
        return None


class SuspendResume:
    """Checkpoint, exit, and resume on the target once its GPUs are free."""

    name = "suspend/resume"

    def accepts(self, state, job, current, target, batch) -> bool:  # type: ignore[no-untyped-def]
        return True

    def start(self, state: ControllerState, book: ResizeBook, pending: PendingResize) -> None:
        job = state.jobs[pending.job_id]
        lifecycle.suspend(
            state, job, f"resizing to {pending.to_gpus} GPUs on {_where(pending.placement)}"
        )

    def settled(
        self, pending: PendingResize, job: Job, attempt: int, batch: int, elapsed_s: float
    ) -> str | None:
        """Done at the first report of the attempt launched on the target (``resume_ready``
        drops a resize whose job was launched elsewhere)."""
        relaunched = pending.relaunched and attempt == job.attempt > pending.attempt
        return "" if relaunched else None


MECHANISMS: tuple[Mechanism, ...] = (InPlaceBatch(), InPlaceRegroup(), SuspendResume())


# --- the batch an attempt trains at ------------------------------------------------------------


def attempt_batch(job: Job, gpus: int, book: ResizeBook) -> int:
    """The global batch of an elastic job on ``gpus`` GPUs: the spec's (fixed global), its
    share per GPU times ``gpus`` (fixed per GPU), or the scheduler's (the one last ordered,
    else the one last reported, else the spec's), within ``gpus..max_batch_size``."""
    spec, elastic = job.spec, job.spec.elastic
    if elastic.batch is BatchRule.SCHEDULER:
        chosen = book.batches.get(job.id) or int(job.metrics.get("batch_size", 0))
        chosen = chosen or spec.batch_size
        return max(gpus, min(chosen, elastic.max_batch_size or chosen))
    return elastic.batch_size(spec.batch_size, spec.gpus, gpus)


def elastic_env(spec: JobSpec, batch: int) -> dict[str, str]:
    return {
        "MLSCHED_ELASTIC_BATCH_SIZE": str(batch),
        "MLSCHED_BASE_BATCH_SIZE": str(spec.batch_size),
        "MLSCHED_LR_SCALING": "linear" if spec.elastic.linear_lr else "none",
    }


def launch(
    state: ControllerState,
    book: ResizeBook,
    job: Job,
    placement: tuple[TaskPlacement, ...],
    lease_s: float,
) -> None:
    """``lifecycle.launch``; an elastic job's launch commands carry its batch (module
    docstring) in the environment of the spec they send (the stored spec is unchanged)."""
    if not job.spec.elastic.enabled:
        lifecycle.launch(state, job, placement, lease_s)
        return
    batch = attempt_batch(job, _gpus(placement), book)
    spec = replace(job.spec, env=(*job.spec.env, *elastic_env(job.spec, batch).items()))
    send = state.send

    def with_batch(node_id: str, command: Command) -> None:
        if isinstance(command, LaunchCommand) and command.task.job_id == job.id:
            command = replace(command, spec=spec)
        send(node_id, command)

    state.send = with_batch
    try:
        lifecycle.launch(state, job, placement, lease_s)
    finally:
        state.send = send


# --- ordering ----------------------------------------------------------------------------------


def order(
    state: ControllerState,
    book: ResizeBook,
    item: Resize,
    mechanisms: Sequence[Mechanism] = MECHANISMS,
) -> bool:
    """Carry out ``item`` (module docstring); True when the job was dealt with (resized, or
    renewed because there was nothing to do or the resize could not be made now)."""
    job = state.job(item.job_id)
    if job is None or not job.state.active:
        log.info("resize of %s skipped: the job is not running", item.job_id)
        return False
    lease = item.lease_s if math.isfinite(item.lease_s) and item.lease_s > 0 else None
    if job.stop_requested:  # its trainer is finishing with a final checkpoint: no new shape
        log.info("resize of %s skipped: %s", job.id, job.stop_requested)
        lifecycle.renew(state, job, lease or state.settings.lease_s)
        return True
    placement = tuple(sorted(item.placement, key=lambda p: p.rank))
    current = tuple(
        TaskPlacement(t.rank, t.node_id, tuple(t.gpu_indices))
        for t in sorted(state.live_tasks(job.id), key=lambda t: t.rank)
    )
    if _gpu_sets(placement) == _gpu_sets(current):
        placement = current  # the same processes' GPUs in another rank order: no move
    problem = resize_problem(job.spec, placement, item.batch_size, item.lease_s)
    if problem is None and job.id in book.pending:  # policies repeat an order until it shows
        log.debug("resize of %s waits: one is under way", job.id)
        lifecycle.renew(state, job, item.lease_s)
        return True
    if problem is None and placement != current:
        problem, passes = target_problem(state, book, job.id, placement)
        problem = None if passes else problem  # GPUs still being given up are waited for
    if problem is not None:
        log.warning("resize of %s not made: %s", job.id, problem)
        lifecycle.renew(state, job, lease or state.settings.lease_s)
        return True
    held = _gpus(current)
    batch = item.batch_size or attempt_batch(job, _gpus(placement), book)
    now_batch = attempt_batch(job, held, book)
    if placement == current and (batch == now_batch or not job.spec.elastic.enabled):
        lifecycle.renew(state, job, item.lease_s)
        return True
    mechanism = next(m for m in mechanisms if m.accepts(state, job, current, placement, batch))
    pending = PendingResize(
        job_id=job.id,
        mechanism=mechanism.name,
        from_gpus=held,
        placement=placement,
        batch_size=batch,
        lease_s=item.lease_s,
        reason=item.reason or "the policy's choice",
        ordered_at=state.clock.now(),
        attempt=job.attempt,
    )
    book.pending[job.id] = pending
    if job.spec.elastic.batch is BatchRule.SCHEDULER:
        book.batches[job.id] = batch
    state.emit(
        "resize_ordered",
        f"{held} -> {pending.to_gpus} GPUs ({_where(placement)}), global batch {batch}, "
        f"by {mechanism.name}: {pending.reason}",
        job_id=job.id,
    )
    mechanism.start(state, book, pending)
    return True


def resize_problem(
    spec: JobSpec, placement: tuple[TaskPlacement, ...], batch: int, lease_s: float
) -> str | None:
    """Why a resize of a job of ``spec`` to ``placement`` (ranks in order) with global batch
    ``batch`` (0: the rule's) cannot be made; None when it can."""
    elastic = spec.elastic
    if not elastic.enabled:
        return "the job is not elastic (its spec has no elastic section)"
    if not (math.isfinite(lease_s) and lease_s > 0):
        return f"lease of {lease_s} s; it must be a positive number of seconds"
    per = spec.gpus_per_process
    if [p.rank for p in placement] != list(range(len(placement))):
        return f"ranks {[p.rank for p in placement]} are not 0..{len(placement) - 1}"
    seen: set[tuple[str, int]] = set()
    for p in placement:
        if len(p.gpu_indices) != per or len(set(p.gpu_indices)) != per:
            return f"rank {p.rank} holds GPUs {list(p.gpu_indices)}; each process takes {per}"
        if seen & {(p.node_id, g) for g in p.gpu_indices}:
            return f"a GPU of {p.node_id} is given to more than one process"
        seen.update((p.node_id, g) for g in p.gpu_indices)
    low, high = elastic.min_gpus, max(elastic.max_gpus, spec.gpus)
    if not low <= len(seen) <= high:
        return f"{len(seen)} GPUs; the job stretches over {low} to {high}"
    if batch and elastic.batch is not BatchRule.SCHEDULER:
        return f"a batch of {batch}, but the job's batch follows its rule ({elastic.batch.value})"
    if batch and not len(seen) <= batch <= elastic.max_batch_size:
        return f"global batch {batch} outside {len(seen)}..{elastic.max_batch_size}"
    return None


def target_problem(
    state: ControllerState, book: ResizeBook, job_id: str, placement: Sequence[TaskPlacement]
) -> tuple[str | None, bool]:
    """(why the target cannot be given to ``job_id``, whether that passes by itself: a GPU
    still held by a job giving it up, or fenced); (None, False) when every GPU is free."""
    schedulable = {n.id: n for n in state.schedulable_nodes()}
    holders: dict[tuple[str, int], str] = {}
    for other, tasks in state.tasks.items():
        for task in tasks:
            if other != job_id and task.state in LIVE_TASK_STATES:
                holders.update({(task.node_id, g): other for g in task.gpu_indices})
    reserved = lifecycle.reserved_gpus(state, except_job=job_id)
    for other, pending in book.pending.items():
        if other != job_id and not pending.relaunched and pending.mechanism == "suspend/resume":
            for p in pending.placement:
                reserved.setdefault(p.node_id, set()).update(p.gpu_indices)
    fenced = state.fences.gpus()
    waiting: str | None = None
    for p in placement:
        node = schedulable.get(p.node_id)
        if node is None or not node.accepts_new_tasks:
            return f"node {p.node_id} is not connected or takes no new tasks", False
        missing = set(p.gpu_indices) - {g.index for g in node.gpus}
        if missing:
            return f"{p.node_id} has no GPU {sorted(missing)}", False
        for gpu in p.gpu_indices:
            holder = holders.get((p.node_id, gpu))
            if gpu in reserved.get(p.node_id, set()):
                return f"{p.node_id}:{gpu} is reserved for another job", False
            if holder is not None and not _releasing(state, book, holder, p.node_id, gpu):
                return f"{p.node_id}:{gpu} is held by {holder}", False
            if holder is not None or gpu in fenced.get(p.node_id, set()):
                waiting = waiting or f"{p.node_id}:{gpu} is not yet released"
    return waiting, waiting is not None


def _releasing(state: ControllerState, book: ResizeBook, job_id: str, node: str, gpu: int) -> bool:
    job = state.job(job_id)
    if job is not None and job.state in (JobState.SUSPENDING, JobState.CANCELLING):
        return True
    return book.releasing(job_id, node, gpu)


# --- after the order ------------------------------------------------------------------------------


def resume_ready(state: ControllerState, book: ResizeBook) -> None:
    """Launch every job suspended for a resize whose target is free; drop those that cannot
    be resumed (ended, launched elsewhere, target gone)."""
    for pending in list(book.pending.values()):
        if pending.mechanism == InPlaceRegroup.name:
            _regroup_overdue(state, book, pending)
            continue
        if pending.relaunched or pending.mechanism != "suspend/resume":
            continue
        job = state.job(pending.job_id)
        if job is None or job.state.terminal:
            del book.pending[pending.job_id]
            continue
        if job.attempt != pending.attempt:
            _abandon(state, book, pending, "the job was launched elsewhere meanwhile")
            continue
        if job.state is not JobState.SUSPENDED:
            continue
        problem, passes = target_problem(state, book, job.id, pending.placement)
        if passes:
            continue
        if problem is not None:
            _abandon(state, book, pending, f"the target is gone ({problem}); it waits in the queue")
            continue
        launch(state, book, job, pending.placement, pending.lease_s)
        pending.relaunched = True


def _regroup_overdue(state: ControllerState, book: ResizeBook, pending: PendingResize) -> None:
    """An in-place regroup not done a lease after its order, whether or not rank 0 still
    reports (a rank that hangs in the switch reports nothing): abandoned, and the job is
    suspended so that checkpoint-restart carries the change out."""
    elapsed = state.clock.now() - pending.ordered_at
    if elapsed <= pending.lease_s:
        return
    why = f"regroup {pending.generation} not done after {elapsed:.0f} s"
    _abandon(state, book, pending, f"{why}; the job is suspended")
    job = state.job(pending.job_id)
    if job is not None and job.state.active and job.attempt == pending.attempt:
        lifecycle.suspend(state, job, f"in-place {why}")


def note_progress(
    state: ControllerState, book: ResizeBook, job: Job, attempt: int, batch: int
) -> None:
    """A progress report of ``job``'s rank 0: closes its resize when its mechanism says the
    job now trains in the new shape, recording the cost (``job_resized``)."""
    pending = book.pending.get(job.id)
    mechanism = _mechanism(pending) if pending else None
    if pending is None or mechanism is None:
        return
    if isinstance(mechanism, InPlaceRegroup) and not leaving_ranks_gone(state, pending):
        return
    cost = state.clock.now() - pending.ordered_at
    outcome = mechanism.settled(pending, job, attempt, batch, cost)
    if outcome:
        _abandon(state, book, pending, outcome)
    if outcome != "":
        return
    del book.pending[job.id]
    state.emit(
        "job_resized",
        f"{pending.from_gpus} -> {pending.to_gpus} GPUs, global batch {pending.batch_size}, "
        f"by {pending.mechanism} in {cost:.2f} s; {pending.reason}",
        job_id=job.id,
    )


def _abandon(state: ControllerState, book: ResizeBook, pending: PendingResize, why: str) -> None:
    book.pending.pop(pending.job_id, None)
    if isinstance(_mechanism(pending), InPlaceRegroup):
        abandoned(state, book, pending)
    state.emit("resize_abandoned", f"{pending.mechanism}: {why}", job_id=pending.job_id)


def _mechanism(pending: PendingResize) -> Mechanism | None:
    return next((m for m in MECHANISMS if m.name == pending.mechanism), None)


def _gpu_sets(placement: Sequence[TaskPlacement]) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((p.node_id, tuple(sorted(p.gpu_indices))) for p in placement)


def _gpus(placement: Sequence[TaskPlacement]) -> int:
    return sum(len(p.gpu_indices) for p in placement)


def _where(placement: Sequence[TaskPlacement]) -> str:
    return lifecycle.describe(placement)
