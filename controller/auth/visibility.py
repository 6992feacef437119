"""What one user may see of another's job: its shape and state, never its environment (it
may hold secrets), its command's arguments or lines of its log (an agent appends the last lines
of a failed task's log to its message, after LOG_TAIL_MARKER: nodeagent/endstate.py)."""

from __future__ import annotations

import dataclasses

from mlsched.model import Event, Job, Task
from mlsched.security.names import Identity

LOG_TAIL_MARKER = "\n--- last lines of the log ---"


def may_see_all(who: Identity, job: Job) -> bool:
    return who.is_admin or job.user == who.name


def without_log_tail(message: str) -> str:
    return message.split(LOG_TAIL_MARKER, 1)[0]


def visible(who: Identity, job: Job, tasks: list[Task]) -> tuple[Job, list[Task]]:
    """``job`` and ``tasks`` as ``who`` may see them: copies without env, arguments and log
    lines unless theirs."""
    if may_see_all(who, job):
        return job, tasks
    spec = dataclasses.replace(job.spec, env=(), command=job.spec.command[:1])
    seen = dataclasses.replace(job, spec=spec, message=without_log_tail(job.message))
    return seen, [dataclasses.replace(t, message=without_log_tail(t.message)) for t in tasks]


def visible_event(who: Identity, event: Event) -> Event:
    """Events go to every user: without log lines (owners read them in GetJob and the logs),
    except for admins."""
    if who.is_admin or LOG_TAIL_MARKER not in event.message:
        return event
    return dataclasses.replace(event, message=without_log_tail(event.message))
