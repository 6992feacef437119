"""ListJobs pages on a real in-process controller (port 0): the client follows them."""

from __future__ import annotations

import grpc

from mlsched.client import Client
from mlsched.v1 import jobs_pb2
from tests.controller.test_servicer import api, connect, good_spec  # noqa: F401 - fixtures

Code = grpc.StatusCode


def test_the_client_follows_pages_and_gets_every_job_once(api):  # noqa: F811
    ids = [api.submit(good_spec(f"t{i}")).id for i in range(7)]
    first = api.call("ListJobs", jobs_pb2.ListJobsRequest(page_size=3))
    assert len(first.jobs) == 3 and first.next_page_token
    with Client(api.controller.address, "alice") as client:
        listed = [job.id for job, _ in client.list(page_size=3)]
        assert [job.id for job, _ in client.list()] == listed
    by_key = {j.id: (j.submit_time, j.id) for j in api.list_jobs(page_size=1000)}
    assert sorted(listed) == sorted(ids) and listed == sorted(ids, key=by_key.__getitem__)


def test_a_bad_page_token_is_invalid_argument(api):  # noqa: F811
    try:
        api.call("ListJobs", jobs_pb2.ListJobsRequest(page_token="nonsense"))
    except grpc.RpcError as err:
        assert err.code() == Code.INVALID_ARGUMENT
        assert "page_token" in err.details()
    else:
        raise AssertionError("a bad token was accepted")
