"""The job state machine: every job state change goes through :func:`check_transition`."""

from __future__ import annotations

from mlsched.model import JobState as S

ALLOWED: dict[S, frozenset[S]] = {
    S.PENDING: frozenset({S.STARTING, S.CANCELLED}),
    S.STARTING: frozenset(
        {S.RUNNING, S.SUSPENDING, S.SUSPENDED, S.PENDING, S.COMPLETED, S.FAILED, S.CANCELLING}
    ),
    S.RUNNING: frozenset({S.SUSPENDING, S.SUSPENDED, S.COMPLETED, S.FAILED, S.CANCELLING}),
    S.SUSPENDING: frozenset({S.SUSPENDED, S.COMPLETED, S.FAILED, S.CANCELLING}),
    # SUSPENDED -> COMPLETED: a user stop keeps the last checkpoint as the final model.
    S.SUSPENDED: frozenset({S.STARTING, S.COMPLETED, S.CANCELLED}),
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


class InvalidTransition(RuntimeError):
    """A state change the state machine does not allow."""


def check_transition(job_id: str, current: S, new: S) -> None:
    if new not in ALLOWED[current]:
        raise InvalidTransition(f"job {job_id}: {current.value} -> {new.value} is not allowed")
