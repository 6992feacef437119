"""A small client for the controller's JobService, returning domain objects."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from mlsched import serde
from mlsched.model import Event, Job, JobSpec, JobState, Node, Task
from mlsched.v1 import jobs_pb2, jobs_pb2_grpc

USER_KEY = "mlsched-user"


@dataclass(frozen=True)
class JobLogs:
    node_id: str
    content: str
    truncated: bool


class Client:
    """One channel per client; every call carries the user's name."""

    def __init__(self, address: str, user: str, timeout_s: float = 30.0) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)
        self._metadata = ((USER_KEY, user),)
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method, request):  # type: ignore[no-untyped-def]
        return method(request, metadata=self._metadata, timeout=self._timeout_s)

    def submit(self, spec: JobSpec) -> Job:
        reply = self._call(
            self._stub.SubmitJob, jobs_pb2.SubmitJobRequest(spec=serde.spec_to_proto(spec))
        )
        return serde.job_from_proto(reply.job)[0]

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        reply = self._call(self._stub.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
        return serde.job_from_proto(reply.job)

    def list(
        self, states: tuple[JobState, ...] = (), user: str = ""
    ) -> list[tuple[Job, list[Task]]]:
        request = jobs_pb2.ListJobsRequest(
            states=[serde.job_state_to_proto(s) for s in states], user=user
        )
        return [serde.job_from_proto(j) for j in self._call(self._stub.ListJobs, request).jobs]

    def cancel(self, job_id: str) -> Job:
        reply = self._call(self._stub.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id))
        return serde.job_from_proto(reply.job)[0]

    def stop(self, job_id: str, reason: str = "") -> Job:
        """Finish a job now, keeping its model (``mlsched stop``)."""
        reply = self._call(
            self._stub.StopJob, jobs_pb2.StopJobRequest(job_id=job_id, reason=reason)
        )
        return serde.job_from_proto(reply.job)[0]

    def nodes(self) -> list[tuple[Node, list[int]]]:
        reply = self._call(self._stub.ListNodes, jobs_pb2.ListNodesRequest())
        return [serde.node_from_proto(n) for n in reply.nodes]

    def logs(self, job_id: str, rank: int = 0, max_bytes: int = 0) -> JobLogs:
        reply = self._call(
            self._stub.GetJobLogs,
            jobs_pb2.GetJobLogsRequest(job_id=job_id, rank=rank, max_bytes=max_bytes),
        )
        return JobLogs(reply.node_id, reply.content, reply.truncated)

    def events(
        self,
        after_seq: int = 0,
        job_id: str = "",
        follow: bool = False,
        timeout_s: float | None = None,
    ) -> Iterator[Event]:
        """Events after ``after_seq``; with ``follow`` the iterator waits for new ones."""
        request = jobs_pb2.WatchEventsRequest(after_seq=after_seq, job_id=job_id, follow=follow)
        stream = self._stub.WatchEvents(request, metadata=self._metadata, timeout=timeout_s)
        try:
            for reply in stream:
                yield serde.event_from_proto(reply.event)
        finally:
            stream.cancel()
