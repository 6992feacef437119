"""The JobService client: submits carry one request id and are retried safely."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from mlsched.client import Client
from mlsched.model import IterationStop, JobSpec
from mlsched.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc


class FlakyJobService(jobs_pb2_grpc.JobServiceServicer):
    """Fails the first ``failures`` submits with ``code`` (after "creating" the job, as a
    deadline that expires on the way back would), then answers; one job per request id."""

    def __init__(self, failures: int, code: grpc.StatusCode) -> None:
        self.failures = failures
        self.code = code
        self.request_ids: list[str] = []
        self.jobs: dict[str, str] = {}

    def SubmitJob(self, request, context):  # type: ignore[no-untyped-def]
        self.request_ids.append(request.request_id)
        job_id = self.jobs.setdefault(request.request_id, f"j-{len(self.jobs):08x}")
        if len(self.request_ids) <= self.failures:
            context.abort(self.code, "try again")
        job = common_pb2.Job(
            id=job_id, user="alice", spec=request.spec, state=common_pb2.JOB_STATE_PENDING
        )
        return jobs_pb2.SubmitJobResponse(job=job)


@pytest.fixture
def serve() -> Iterator:
    servers: list[grpc.Server] = []

    def start(service: FlakyJobService) -> str:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        jobs_pb2_grpc.add_JobServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        servers.append(server)
        return f"127.0.0.1:{port}"

    yield start
    for server in servers:
        server.stop(0).wait()


def spec() -> JobSpec:
    return JobSpec(
        name="train",
        command=("python", "train.py"),
        gpus=1,
        stopping=IterationStop(100),
    )


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED])
def test_a_failed_submit_is_retried_with_the_same_request_id(serve, code) -> None:
    service = FlakyJobService(failures=2, code=code)
    waits: list[float] = []
    with Client(serve(service), "alice", retry_delays_s=(0.5, 1.0, 2.0), sleep=waits.append) as c:
        job = c.submit(spec())
    assert len(service.request_ids) == 3
    assert len(set(service.request_ids)) == 1 and service.request_ids[0]
    assert list(service.jobs.values()) == [job.id]  # one job
    assert waits == [0.5, 1.0]


def test_submits_get_distinct_request_ids_and_other_errors_are_not_retried(serve) -> None:
    service = FlakyJobService(failures=1, code=grpc.StatusCode.INVALID_ARGUMENT)
    with Client(serve(service), "alice", sleep=lambda _: None) as c:
        with pytest.raises(grpc.RpcError):
            c.submit(spec())
        c.submit(spec())
    assert len(service.request_ids) == 2
    assert len(set(service.request_ids)) == 2


def test_retries_end_with_the_last_error(serve) -> None:
    service = FlakyJobService(failures=10, code=grpc.StatusCode.UNAVAILABLE)
    client = Client(serve(service), "alice", retry_delays_s=(0.0,), sleep=lambda _: None)
    with client, pytest.raises(grpc.RpcError) as info:
        client.submit(spec())
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert len(service.request_ids) == 2
