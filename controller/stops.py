"""Carrying out a policy's ``Stop`` orders: MLF-C's early stops (MLFS §3.5).

A stop goes the way a target-metric stop already goes, only started by the controller: the
job's rank-0 trainer gets ``StopTraining(reason)`` through its node agent (the agent keeps it
sticky and relays it to the shim as ``StopNow``; under torch.distributed every rank stops at
the same step). The trainer leaves its loop, saves its final checkpoint and exits with a
``completed`` exit record whose reason is ``StopNow: <reason>``; rank 0 ending COMPLETED
completes the job (``lifecycle.settle``), whose message then carries the trainer's reason
(:func:`completion_message`).

The order is recorded as a ``stop_requested`` event and in the job's message. A policy (MLF-C
is pure) repeats a stop every cycle until the job has ended, so the command is sent once per
attempt and again only after ``RESEND_S`` (an agent that was disconnected meanwhile dropped
it). Only STARTING or RUNNING jobs are stopped; a job the same decision suspends or migrates
is SUSPENDING by then and left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from controller.commands import StopTrainingCommand, TaskRef
from controller.state import ControllerState
from mlsched.model import Task, TaskState

if TYPE_CHECKING:  # the policy package loads every policy: lifecycle imports this module
    from controller.policy.base import Stop

RESEND_S = 30.0
COMPLETED_MESSAGE = "reached its stopping criterion"
_TRAINER_SAYS = "; trainer: "  # how a node agent quotes the exit record in a task's message


def completion_message(tasks: Sequence[Task]) -> str:
    """The message of a job completed by its rank 0, with the trainer's reason when known
    (e.g. ``reached its stopping criterion: StopNow: MLF-C: ...``)."""
    rank0 = next((t for t in tasks if t.rank == 0 and t.state is TaskState.COMPLETED), None)
    said = rank0.message.partition(_TRAINER_SAYS)[2].strip() if rank0 is not None else ""
    return f"{COMPLETED_MESSAGE}: {said}" if said else COMPLETED_MESSAGE


class StopOrders:
    """Sends the stops of each decision; remembers, per job, the attempt and time last sent."""

    def __init__(self) -> None:
        self._sent: dict[str, tuple[int, float]] = {}

    def apply(self, state: ControllerState, stops: Iterable[Stop]) -> None:
        """Caller holds ``state.lock``."""
        now = state.clock.now()
        for item in stops:
            job = state.job(item.job_id)
            if job is None or not job.state.active:
                continue
            rank0 = next((t for t in state.live_tasks(job.id) if t.rank == 0), None)
            if rank0 is None:
                continue
            last = self._sent.get(job.id)
            if last is not None and last[0] == job.attempt and now - last[1] < RESEND_S:
                continue
            ref = TaskRef(rank0.job_id, rank0.rank, rank0.attempt)
            state.send(rank0.node_id, StopTrainingCommand(ref, item.reason))
            self._sent[job.id] = (job.attempt, now)
            if last is None or last[0] != job.attempt:
                job.message = f"stop requested: {item.reason}"
                state.save_job(job)
                state.emit("stop_requested", item.reason, job_id=job.id, node_id=rank0.node_id)
        for job_id in list(self._sent):
            job = state.job(job_id)
            if job is None or job.state.terminal:
                del self._sent[job_id]
