"""Sends ``Decision.priorities`` to the node agents, only when they change
(``docs/overload.md``).

A job's priority goes to every live task of its current attempt as a :class:`PriorityCommand`
when it is first known, when it moved by more than :data:`CHANGE` (relative) since it was last
sent, and when the job runs a new attempt (after a migration or a resume the new tasks get the
last value at once, even in a cycle whose decision does not name the job). Ended jobs are
forgotten. Not every cycle for every task: a policy may name the same job
with the same value every cycle and nothing is sent.

The memory is the controller process's: after a controller restart the values are sent again
as policies name the jobs; an agent that restarted (a fresh process adopting its tasks) keeps
the fallback rule until the next change (``nodeagent/priorities.py``).

The caller holds ``state.lock``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

from controller.commands import PriorityCommand, TaskRef
from controller.state import ControllerState

log = logging.getLogger(__name__)

CHANGE = 0.01  # relative change that is worth a message


def changed(old: float, new: float) -> bool:
    """Whether ``new`` differs from ``old`` by more than :data:`CHANGE` of the larger."""
    return abs(new - old) > CHANGE * max(abs(old), abs(new))


class PrioritySender:
    """What each job's agents were last told, and the sending (module docstring)."""

    def __init__(self) -> None:
        self._value: dict[str, float] = {}  # job id -> latest priority from a decision
        self._sent: dict[str, tuple[int, float]] = {}  # job id -> (attempt, value) sent

    def sent(self, job_id: str) -> tuple[int, float] | None:
        """(attempt, priority) last sent for the job; None: nothing."""
        return self._sent.get(job_id)

    def apply(self, state: ControllerState, priorities: Mapping[str, float]) -> int:
        """Record a decision's priorities and send what is new; returns the messages sent."""
        for job_id, value in priorities.items():
            if not math.isfinite(value):
                log.error("priority %r of %s ignored: not a finite number", value, job_id)
                continue
            self._value[job_id] = float(value)
        messages = 0
        for job_id in list(self._value):
            job = state.job(job_id)
            if job is None or job.state.terminal:
                self._value.pop(job_id, None)
                self._sent.pop(job_id, None)
                continue
            if not job.state.active:
                continue  # suspending or queued: told again when it runs
            value = self._value[job_id]
            last = self._sent.get(job_id)
            if last is not None and last[0] == job.attempt and not changed(last[1], value):
                continue
            tasks = state.live_tasks(job_id)
            for task in tasks:
                ref = TaskRef(task.job_id, task.rank, task.attempt)
                state.send(task.node_id, PriorityCommand(ref, value))
            messages += len(tasks)
            self._sent[job_id] = (job.attempt, value)
        return messages
