"""What one user may see of another's job: its shape and state, never its environment (it
may hold secrets) nor its command's arguments."""

from __future__ import annotations

import dataclasses

from mlsched.model import Job
from mlsched.security.names import Identity


def may_see_all(who: Identity, job: Job) -> bool:
    return who.is_admin or job.user == who.name


def visible(who: Identity, job: Job) -> Job:
    """``job`` as ``who`` may see it: a copy without env and arguments unless theirs."""
    if may_see_all(who, job):
        return job
    spec = dataclasses.replace(job.spec, env=(), command=job.spec.command[:1])
    return dataclasses.replace(job, spec=spec)
