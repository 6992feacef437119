"""User operations on jobs and nodes: submit, get, list, cancel."""

from __future__ import annotations

import uuid
from collections.abc import Collection

from controller import lifecycle
from controller.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from controller.state import ControllerState
from mlsched.jobspec import SpecError, validate_spec
from mlsched.model import Job, JobSpec, JobState, Node, Task


class JobOperations:
    def __init__(self, state: ControllerState) -> None:
        self.state = state

    def submit(self, user: str, spec: JobSpec) -> Job:
        """Validate and store a new job; it is durable when this returns."""
        try:
            validate_spec(spec)
        except SpecError as exc:
            raise InvalidArgument(str(exc)) from exc
        state = self.state
        with state.lock:
            job_id = self._new_id()
            now = state.clock.now()
            job = Job(
                id=job_id,
                user=user,
                spec=spec,
                state=JobState.PENDING,
                submit_time=now,
                queued_since=now,
            )
            with state.store.transaction():
                state.save_job(job)
                state.emit(
                    "job_submitted",
                    f"{spec.name} by {user}: {spec.gpus} GPU(s), {spec.job_class.value}",
                    job_id=job_id,
                )
            state.jobs[job_id] = job
            return job

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        with self.state.lock:
            job = self.state.job(job_id)
            if job is None:
                raise NotFound(f"no job {job_id!r}")
            return job, list(self.state.job_tasks(job_id))

    def list(
        self, states: Collection[JobState] = (), user: str = ""
    ) -> list[tuple[Job, list[Task]]]:
        with self.state.lock:
            return [
                (job, list(self.state.job_tasks(job.id)))
                for job in sorted(self.state.jobs.values(), key=lambda j: (j.submit_time, j.id))
                if (not states or job.state in states) and (not user or job.user == user)
            ]

    def cancel(self, user: str, job_id: str) -> Job:
        with self.state.lock:
            job = self.state.job(job_id)
            if job is None:
                raise NotFound(f"no job {job_id!r}")
            if job.user != user:
                raise PermissionDenied(f"job {job_id} belongs to {job.user!r}, not {user!r}")
            if job.state.terminal:
                raise FailedPrecondition(f"job {job_id} already ended: {job.state.value}")
            lifecycle.cancel(self.state, job, f"cancelled by {user}")
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
