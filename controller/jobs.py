"""User operations on jobs and nodes: submit, get, list, cancel, stop."""

from __future__ import annotations

import heapq
import sqlite3
import uuid
from collections.abc import Collection

from controller import lifecycle
from controller.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from controller.state import ControllerState
from controller.store.base import JobKey
from mlsched.jobspec import SpecError, validate_spec
from mlsched.model import Job, JobSpec, JobState, Node, Task

MAX_REQUEST_ID_LEN = 128


class JobOperations:
    def __init__(self, state: ControllerState) -> None:
        self.state = state

    def submit(self, user: str, spec: JobSpec, request_id: str = "") -> Job:
        """Validate and store a new job; it is durable when this returns.

        Idempotent with a ``request_id``: a repeated id of the same user (a client's retry)
        within ``submit_request_retention_s`` returns the job the first request created, even
        after a controller restart, whatever the spec says this time.
        """
        try:
            validate_spec(spec)
        except SpecError as exc:
            raise InvalidArgument(str(exc)) from exc
        if len(request_id) > MAX_REQUEST_ID_LEN or not request_id.isprintable():
            raise InvalidArgument(f"request_id: at most {MAX_REQUEST_ID_LEN} printable characters")
        state = self.state
        with state.lock:
            now = state.clock.now()
            if request_id:
                known = self._submitted(user, request_id, now)
                if known is not None:
                    state.store.flush()  # the first request's commit may still be lazy
                    return known
            job_id = self._new_id()
            job = Job(
                id=job_id,
                user=user,
                spec=spec,
                state=JobState.PENDING,
                submit_time=now,
                queued_since=now,
            )
            # Lazy here, durable before the reply (flush below, outside the lock): concurrent
            # submits share one fsync.
            try:
                with state.store.transaction(durable=False):
                    state.save_job(job)
                    if request_id:
                        retention_s = state.settings.submit_request_retention_s
                        state.store.forget_submit_requests(now - retention_s)
                        state.store.save_submit_request(user, request_id, job_id, now)
                    state.emit(
                        "job_submitted",
                        f"{spec.name} by {user}: {spec.gpus} GPU(s), {spec.job_class.value}",
                        job_id=job_id,
                    )
            except sqlite3.OperationalError as exc:
                if "full" not in str(exc):  # SQLITE_FULL: "database or disk is full"
                    raise
                raise ResourceExhausted(
                    f"cannot store the new job: the controller's state disk is full ({exc});"
                    " new jobs are refused until it has room, running jobs go on"
                ) from exc
            state.jobs[job_id] = job
        state.store.flush()
        return job

    def _submitted(self, user: str, request_id: str, now: float) -> Job | None:
        """The job an earlier submit with this request id created, if remembered."""
        since = now - self.state.settings.submit_request_retention_s
        job_id = self.state.store.submit_request_job(user, request_id, since)
        if job_id is None:
            return None
        job = self.state.job(job_id)
        if job is None:  # archived since
            archived = self.state.store.archived_job(job_id)
            job = archived[0] if archived is not None else None
        return job

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        """A live or archived job (``controller.retention``)."""
        with self.state.lock:
            job = self.state.job(job_id)
            if job is not None:
                return job, list(self.state.job_tasks(job_id))
            archived = self.state.store.archived_job(job_id)
            if archived is None:
                raise NotFound(f"no job {job_id!r}")
            return archived

    def list(
        self, states: Collection[JobState] = (), user: str = ""
    ) -> list[tuple[Job, list[Task]]]:
        """Every matching job, live and archived, in (submit time, id) order."""
        out: list[tuple[Job, list[Task]]] = []
        after: JobKey | None = None
        while page := self.list_page(states, user, after, 1000):
            out += page
            after = job_key(page[-1][0])
        return out

    def list_page(
        self, states: Collection[JobState], user: str, after: JobKey | None, limit: int
    ) -> list[tuple[Job, list[Task]]]:
        """Up to ``limit`` matching jobs, live and archived, past ``after`` in (submit time,
        id) order; a job archived meanwhile is listed once."""

        def wanted(job: Job) -> bool:
            return (not states or job.state in states) and (not user or job.user == user)

        with self.state.lock:
            live = heapq.nsmallest(
                limit,
                (
                    j
                    for j in self.state.jobs.values()
                    if wanted(j) and (after is None or job_key(j) > after)
                ),
                key=job_key,
            )
            page = [(j, list(self.state.job_tasks(j.id))) for j in live]
            page += self.state.store.archived_jobs(after, limit, [s.value for s in states], user)
        page.sort(key=lambda item: job_key(item[0]))
        return page[:limit]

    def cancel(self, user: str, job_id: str, admin: bool = False) -> Job:
        """Cancel a live job of ``user``'s (any user's for an ``admin``)."""
        with self.state.lock:
            job = self._own_live_job(user, job_id, admin)
            with self.state.atomic(job):
                lifecycle.cancel(self.state, job, f"cancelled by {user}")
            return job

    def stop(self, user: str, job_id: str, reason: str = "", admin: bool = False) -> Job:
        """Finish a job now and keep its model. A running job is told to checkpoint and end
        COMPLETED at its next step (the scheduler sends the order, as for MLF-C's stops); a
        suspended one completes at once from its checkpoint. Idempotent until the job ends.
        An ``admin`` may stop any user's job."""
        with self.state.lock:
            job = self._own_live_job(user, job_id, admin)
            if job.state is JobState.CANCELLING:
                raise FailedPrecondition(f"job {job_id} is being cancelled")
            if job.state.queued and job.checkpoint_step == 0:
                raise FailedPrecondition(
                    f"job {job_id} has no checkpoint to finish with ({job.state.value}); "
                    "cancel it instead"
                )
            with self.state.atomic(job):
                if not job.stop_requested:
                    job.stop_requested = f"stopped by {user}" + (f": {reason}" if reason else "")
                    self.state.save_job(job)
                    self.state.emit("user_stop", job.stop_requested, job_id=job.id)
                if job.state is JobState.SUSPENDED:
                    lifecycle.finish_stopped(self.state, job)
            return job

    def _own_live_job(self, user: str, job_id: str, admin: bool = False) -> Job:
        job = self.state.job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}")
        if job.user != user and not admin:
            raise PermissionDenied(f"job {job_id} belongs to {job.user!r}, not {user!r}")
        if job.state.terminal:
            raise FailedPrecondition(f"job {job_id} already ended: {job.state.value}")
        return job

    def nodes(self) -> list[tuple[Node, list[int]]]:
        with self.state.lock:
            busy = self.state.busy_gpus()
            return [(n, sorted(busy.get(n.id, ()))) for _, n in sorted(self.state.nodes.items())]

    def log_location(self, job_id: str, rank: int) -> tuple[str, Task]:
        """The node holding the newest log of a task, and that task."""
        job, tasks = self.get(job_id)
        for task in tasks:
            if task.rank == rank:
                return task.node_id, task
        if not tasks:
            raise FailedPrecondition(f"job {job_id} has not run yet ({job.state.value})")
        raise NotFound(f"job {job_id} has no rank {rank} (ranks 0-{len(tasks) - 1})")

    def _new_id(self) -> str:
        while True:
            job_id = "j-" + uuid.uuid4().hex[:8]
            if job_id not in self.state.jobs:
                return job_id


def job_key(job: Job) -> JobKey:
    """A job's place in listings."""
    return (job.submit_time, job.id)
