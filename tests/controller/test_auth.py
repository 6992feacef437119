"""The authenticated surface of a default (TLS) controller: a real in-process ``Controller`` on
port 0, real channels with certificates of its own CA. Each test replays one probe of issue 13
(plaintext, forged user, impersonated node, stream flood) and shows it refused."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controller.auth.limits import UserLimits
from controller.clock import ManualClock
from controller.server import Controller, ControllerConfig
from controller.state import ControllerSettings
from mlsched.client import Client, rate_limited
from mlsched.security.authority import Authority
from mlsched.security.bundle import Bundle
from mlsched.security.names import ADMIN, NODE, USER, Identity
from mlsched.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

WAIT_S = 10.0
SETTINGS = ControllerSettings(
    lease_s=600.0, cycle_s=60.0, heartbeat_timeout_s=600.0, suspend_grace_s=10.0
)
STREAMS_PER_USER = 3
Code = grpc.StatusCode


class Cluster:
    """A TLS controller and credentials its CA issues."""

    def __init__(self, state_dir: Path, limits: UserLimits) -> None:
        config = ControllerConfig(
            listen="127.0.0.1:0", state_dir=state_dir, settings=SETTINGS, limits=limits
        )
        self.controller = Controller(config, clock=ManualClock())
        self.controller.start()
        self.authority = Authority(state_dir)
        self.channels: list[grpc.Channel] = []

    def bundle(self, kind: str, name: str) -> Bundle:
        return self.authority.issue_bundle(Identity(kind, name))

    def channel(self, creds: Bundle) -> grpc.Channel:
        channel = grpc.secure_channel(self.controller.address, creds.channel_credentials())
        self.channels.append(channel)
        return channel

    def jobs(self, user: str, kind: str = USER) -> jobs_pb2_grpc.JobServiceStub:
        return jobs_pb2_grpc.JobServiceStub(self.channel(self.bundle(kind, user)))

    def agents(self, node: str) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self.channel(self.bundle(NODE, node)))

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        self.controller.stop(grace_s=0.5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path / "state", UserLimits(streams_per_user=STREAMS_PER_USER))
    yield c
    c.close()


def secret_spec() -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="train",
        command=["python", "train.py", "--api-key", "s3cr3t"],
        gpus=1,
        env={"HF_TOKEN": "hf_secret"},
        stopping=common_pb2.StoppingCriterion(
            iterations=common_pb2.IterationCriterion(iterations=100)
        ),
    )


def rpc_error(fn: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


class Outbox:
    _END = agent_pb2.AgentSessionRequest()

    def __init__(self, *messages: agent_pb2.AgentSessionRequest) -> None:
        self._queue: queue.Queue[agent_pb2.AgentSessionRequest] = queue.Queue()
        for message in messages:
            self._queue.put(message)

    def put(self, message: agent_pb2.AgentSessionRequest) -> None:
        self._queue.put(message)

    def close(self) -> None:
        self._queue.put(self._END)

    def __iter__(self) -> Iterator[agent_pb2.AgentSessionRequest]:
        while (item := self._queue.get()) is not self._END:
            yield item


def register(node_id: str) -> agent_pb2.AgentSessionRequest:
    gpus = [common_pb2.GpuInfo(index=0, name="vgpu", virtual=True)]
    return agent_pb2.AgentSessionRequest(
        register=agent_pb2.RegisterAgent(
            node_id=node_id, address="127.0.0.1", hostname="h", gpus=gpus, cpu_count=4
        )
    )


def metrics() -> agent_pb2.AgentSessionRequest:
    return agent_pb2.AgentSessionRequest(metrics=agent_pb2.MetricsReport())


def wait_event(
    stub: jobs_pb2_grpc.JobServiceStub, job_id: str, match: Callable[[common_pb2.Event], bool]
) -> common_pb2.Event:
    stream = stub.WatchEvents(
        jobs_pb2.WatchEventsRequest(job_id=job_id, follow=True), timeout=WAIT_S
    )
    try:
        return next(r.event for r in stream if match(r.event))
    finally:
        stream.cancel()


def next_of(call: Any, kind: str) -> agent_pb2.AgentSessionResponse:
    for response in call:
        if response.WhichOneof("message") == kind:
            return response
    raise AssertionError(f"the session ended before a {kind} message")


# --- plaintext and foreign certificates --------------------------------------------------


def test_a_plaintext_rpc_to_a_default_controller_is_refused(cluster: Cluster) -> None:
    for address in (cluster.controller.address, cluster.controller.join_address):
        with grpc.insecure_channel(address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            err = rpc_error(
                lambda s=stub: s.ListJobs(
                    jobs_pb2.ListJobsRequest(),
                    metadata=(("mlsched-user", "alice"),),
                    timeout=WAIT_S,
                )
            )
            assert err.code() == Code.UNAVAILABLE


def test_a_certificate_of_another_ca_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    other = Authority(tmp_path / "other")
    other.ensure()
    forged = other.issue_bundle(Identity(ADMIN, "alice"))
    trusting = Bundle(cluster.authority.ca_pem(), forged.cert_pem, forged.key_pem)
    stub = jobs_pb2_grpc.JobServiceStub(cluster.channel(trusting))
    err = rpc_error(lambda: stub.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S))
    assert err.code() == Code.UNAVAILABLE  # the TLS handshake fails


def test_the_join_endpoint_serves_no_jobs_without_a_certificate(cluster: Cluster) -> None:
    creds = grpc.ssl_channel_credentials(cluster.authority.ca_pem())
    with grpc.secure_channel(cluster.controller.join_address, creds) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        err = rpc_error(lambda: stub.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S))
        assert err.code() == Code.UNAUTHENTICATED
        agents = agent_pb2_grpc.AgentServiceStub(channel)
        outbox = Outbox(register("node-a"))
        outbox.close()
        err = rpc_error(lambda: list(agents.AgentSession(iter(outbox), timeout=WAIT_S)))
        assert err.code() == Code.PERMISSION_DENIED


# --- users -------------------------------------------------------------------------------


def test_the_owner_is_the_certified_user_not_a_claim(cluster: Cluster) -> None:
    eve = cluster.jobs("eve")
    job = eve.SubmitJob(
        jobs_pb2.SubmitJobRequest(spec=secret_spec()),
        metadata=(("mlsched-user", "alice"),),  # the old forgery: ignored under TLS
        timeout=WAIT_S,
    ).job
    assert job.user == "eve"
    events = list(eve.WatchEvents(jobs_pb2.WatchEventsRequest(), timeout=WAIT_S))
    submitted = [e.event for e in events if e.event.kind == "job_submitted"]
    assert [e.message.endswith("by eve: 1 GPU(s), best-effort") for e in submitted] == [True]


def test_another_users_job_shows_no_env_arguments_or_logs(cluster: Cluster) -> None:
    alice, eve, root = cluster.jobs("alice"), cluster.jobs("eve"), cluster.jobs("root", ADMIN)
    job_id = alice.SubmitJob(jobs_pb2.SubmitJobRequest(spec=secret_spec()), timeout=WAIT_S).job.id

    seen = eve.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=WAIT_S).job
    assert (dict(seen.spec.env), list(seen.spec.command)) == ({}, ["python"])
    listed = eve.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S).jobs
    assert [(j.id, dict(j.spec.env), list(j.spec.command)) for j in listed] == [
        (job_id, {}, ["python"])
    ]
    err = rpc_error(
        lambda: eve.GetJobLogs(jobs_pb2.GetJobLogsRequest(job_id=job_id), timeout=WAIT_S)
    )
    assert err.code() == Code.PERMISSION_DENIED
    err = rpc_error(lambda: eve.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), timeout=WAIT_S))
    assert err.code() == Code.PERMISSION_DENIED

    own = alice.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=WAIT_S).job
    admin = root.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=WAIT_S).job
    for full in (own, admin):
        assert dict(full.spec.env) == {"HF_TOKEN": "hf_secret"}
        assert list(full.spec.command) == ["python", "train.py", "--api-key", "s3cr3t"]


def test_an_admin_may_stop_and_cancel_any_users_job_and_is_named_for_it(
    cluster: Cluster,
) -> None:
    alice, root = cluster.jobs("alice"), cluster.jobs("root", ADMIN)
    job_id = alice.SubmitJob(jobs_pb2.SubmitJobRequest(spec=secret_spec()), timeout=WAIT_S).job.id
    err = rpc_error(lambda: root.StopJob(jobs_pb2.StopJobRequest(job_id=job_id), timeout=WAIT_S))
    assert err.code() == Code.FAILED_PRECONDITION  # allowed, but queued without a checkpoint
    cancelled = root.CancelJob(jobs_pb2.CancelJobRequest(job_id=job_id), timeout=WAIT_S).job
    assert cancelled.user == "alice"
    events = list(alice.WatchEvents(jobs_pb2.WatchEventsRequest(), timeout=WAIT_S))
    assert any(
        e.event.kind == "job_state" and e.event.message == "PENDING -> CANCELLED: cancelled by root"
        for e in events
    ), [(e.event.kind, e.event.message) for e in events]


def test_a_node_certificate_cannot_use_the_job_service(cluster: Cluster) -> None:
    stub = cluster.jobs("node-a", NODE)
    err = rpc_error(lambda: stub.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S))
    assert err.code() == Code.PERMISSION_DENIED


def test_an_oversized_env_is_refused_and_nothing_is_stored(cluster: Cluster) -> None:
    alice = cluster.jobs("alice")
    spec = secret_spec()
    spec.env.update({f"V{i}": "x" for i in range(129)})  # one over the 128 variables
    err = rpc_error(lambda: alice.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), timeout=WAIT_S))
    assert err.code() == Code.INVALID_ARGUMENT
    assert "more than 128 variables" in err.details()
    assert list(alice.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S).jobs) == []


# --- nodes -------------------------------------------------------------------------------


def test_an_agent_may_register_only_as_the_node_its_certificate_names(cluster: Cluster) -> None:
    alice = cluster.jobs("alice")
    real = Outbox(register("node-a"))
    call = cluster.agents("node-a").AgentSession(iter(real), timeout=30.0)
    try:
        next_of(call, "registered")
        job_id = alice.SubmitJob(
            jobs_pb2.SubmitJobRequest(spec=secret_spec()), timeout=WAIT_S
        ).job.id
        launch = next_of(call, "launch").launch
        real.put(
            agent_pb2.AgentSessionRequest(
                task_status=agent_pb2.TaskStatus(
                    task=launch.task, state=common_pb2.TASK_STATE_RUNNING
                )
            )
        )
        wait_event(alice, job_id, lambda e: e.kind == "job_state" and "-> RUNNING" in e.message)

        impostor = Outbox(register("node-a"))
        impostor.close()
        err = rpc_error(
            lambda: list(cluster.agents("node-b").AgentSession(iter(impostor), timeout=WAIT_S))
        )
        assert err.code() == Code.PERMISSION_DENIED
        assert "names node 'node-b', not 'node-a'" in err.details()

        job = alice.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=WAIT_S).job
        assert job.state == common_pb2.JOB_STATE_RUNNING
        assert [t.state for t in job.tasks] == [common_pb2.TASK_STATE_RUNNING]
        nodes = alice.ListNodes(jobs_pb2.ListNodesRequest(), timeout=WAIT_S).nodes
        assert [(n.id, n.alive) for n in nodes] == [("node-a", True)]
    finally:
        real.close()
        call.cancel()


# --- limits ------------------------------------------------------------------------------


def test_a_stream_flood_is_capped_and_agents_still_register_and_heartbeat(
    cluster: Cluster,
) -> None:
    mallory = cluster.jobs("mallory")
    follows = [
        mallory.WatchEvents(jobs_pb2.WatchEventsRequest(follow=True), timeout=60.0)
        for _ in range(STREAMS_PER_USER)
    ]
    try:
        for stream in follows:
            next(stream)  # its handler runs: the slot is held
        extra = mallory.WatchEvents(jobs_pb2.WatchEventsRequest(follow=True), timeout=WAIT_S)
        err = rpc_error(lambda: next(extra))
        assert err.code() == Code.RESOURCE_EXHAUSTED

        outbox = Outbox(register("node-a"))
        call = cluster.agents("node-a").AgentSession(iter(outbox), timeout=30.0)
        try:
            assert next_of(call, "registered").registered.node_id == "node-a"
            outbox.put(metrics())
            nodes = mallory.ListNodes(jobs_pb2.ListNodesRequest(), timeout=WAIT_S).nodes
            assert [(n.id, n.alive) for n in nodes] == [("node-a", True)]
        finally:
            outbox.close()
            call.cancel()
        # Another user is not held back by mallory's streams.
        other = cluster.jobs("alice").WatchEvents(jobs_pb2.WatchEventsRequest(follow=True))
        assert next(other).event.seq >= 1
        other.cancel()
    finally:
        for stream in follows:
            stream.cancel()


def test_a_user_over_the_request_rate_gets_resource_exhausted(tmp_path: Path) -> None:
    # A bucket of 3 that refills once in ~30 years: the 4th call is over, however fast.
    slow = Cluster(tmp_path / "state", UserLimits(requests_per_s=1e-9, burst=3.0))
    try:
        mallory, alice = slow.jobs("mallory"), slow.jobs("alice")
        for _ in range(3):
            mallory.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S)
        err = rpc_error(lambda: mallory.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S))
        assert err.code() == Code.RESOURCE_EXHAUSTED
        alice.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S)  # her own bucket
    finally:
        slow.close()


def test_an_insecure_controller_still_refuses_an_oversized_claimed_name(tmp_path: Path) -> None:
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        settings=SETTINGS,
        insecure=True,
        join_token="t",
    )
    controller = Controller(config, clock=ManualClock())
    controller.start()
    refused = {Code.UNAUTHENTICATED}
    # 8,000 characters are past gRPC's soft metadata limit (8 KiB), where gRPC itself refuses
    # some calls (RESOURCE_EXHAUSTED) before the controller sees them: refused either way.
    cases = (("x" * 65, refused), ("x" * 8000, refused | {Code.RESOURCE_EXHAUSTED}))
    try:
        with grpc.insecure_channel(controller.address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            for name, codes in (*cases, ("alice", {Code.OK})):
                try:
                    stub.ListJobs(
                        jobs_pb2.ListJobsRequest(),
                        metadata=(("mlsched-user", name),),
                        timeout=WAIT_S,
                    )
                    got = Code.OK
                except grpc.RpcError as exc:
                    got = exc.code()
                assert got in codes, (len(name), got)
    finally:
        controller.stop(grace_s=0.5)


def test_another_users_failed_job_shows_no_lines_of_its_log(cluster: Cluster) -> None:
    alice, eve, root = cluster.jobs("alice"), cluster.jobs("eve"), cluster.jobs("root", ADMIN)
    outbox = Outbox(register("node-a"))
    call = cluster.agents("node-a").AgentSession(iter(outbox), timeout=30.0)
    try:
        next_of(call, "registered")
        job_id = alice.SubmitJob(
            jobs_pb2.SubmitJobRequest(spec=secret_spec()), timeout=WAIT_S
        ).job.id
        task = next_of(call, "launch").launch.task
        # What an agent reports for a task that failed: its log's last lines after the marker
        # (nodeagent/endstate.py).
        outbox.put(
            agent_pb2.AgentSessionRequest(
                task_status=agent_pb2.TaskStatus(
                    task=task,
                    state=common_pb2.TASK_STATE_FAILED,
                    exit_code=3,
                    message="exited with code 3\n--- last lines of the log ---\nkey=hf_secret",
                )
            )
        )
        wait_event(alice, job_id, lambda e: "-> FAILED" in e.message)
    finally:
        outbox.close()
        call.cancel()

    def texts(stub: jobs_pb2_grpc.JobServiceStub) -> str:
        job = stub.GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=WAIT_S).job
        events = stub.WatchEvents(jobs_pb2.WatchEventsRequest(job_id=job_id), timeout=WAIT_S)
        return "\n".join(
            [job.message, *(t.message for t in job.tasks)] + [r.event.message for r in events]
        )

    assert "hf_secret" not in texts(eve)
    assert "exited with code 3" in texts(eve)  # the failure itself stays visible
    assert "key=hf_secret" in texts(alice)  # her own job, in full
    assert "key=hf_secret" in texts(root)


def rate_limited_cluster(
    tmp_path: Path, requests_per_s: float, burst: float
) -> tuple[Cluster, list[float], Callable[[float], None]]:
    """A cluster whose users get ``burst`` requests refilled at ``requests_per_s``, the list of
    the client's waits, and the sleep that records them."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    limits = UserLimits(requests_per_s=requests_per_s, burst=burst)
    return Cluster(tmp_path / "state", limits), waits, sleep


def test_the_client_waits_out_its_request_rate_and_every_call_goes_through(tmp_path: Path) -> None:
    # A bucket of 3 refilled at 2 per second: the raw stub is refused at its 4th call, the
    # client (which sends a rate-refused call again after a wait) gets all 10 answers.
    slow, waits, sleep = rate_limited_cluster(tmp_path, requests_per_s=2.0, burst=3.0)
    try:
        raw = slow.jobs("mallory")
        for _ in range(3):
            raw.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S)
        err = rpc_error(lambda: raw.ListJobs(jobs_pb2.ListJobsRequest(), timeout=WAIT_S))
        assert err.code() == Code.RESOURCE_EXHAUSTED and rate_limited(err)
        with Client(
            slow.controller.address, credentials=slow.bundle(USER, "alice"), sleep=sleep
        ) as client:
            answers = [client.list() for _ in range(10)]
    finally:
        slow.close()
    assert answers == [[]] * 10
    assert waits  # alice's 4th call onwards came back refused at least once and was resent


def test_an_event_stream_refused_for_the_rate_is_opened_again(tmp_path: Path) -> None:
    # A bucket of 2 refilled at 1 per second: the raw stub's 3rd stream is refused; the
    # client's events() waits and opens it again, and every event arrives once, in order.
    slow, waits, sleep = rate_limited_cluster(tmp_path, requests_per_s=1.0, burst=2.0)
    try:
        raw = slow.jobs("mallory")
        request = jobs_pb2.WatchEventsRequest()
        for _ in range(2):
            list(raw.WatchEvents(request, timeout=WAIT_S))
        err = rpc_error(lambda: list(raw.WatchEvents(request, timeout=WAIT_S)))
        assert err.code() == Code.RESOURCE_EXHAUSTED and rate_limited(err)
        with Client(
            slow.controller.address, credentials=slow.bundle(USER, "alice"), sleep=sleep
        ) as client:
            runs = [[e.seq for e in client.events()] for _ in range(4)]
    finally:
        slow.close()
    assert runs[0] and all(run == runs[0] for run in runs)
    assert runs[0] == sorted(set(runs[0]))
    assert waits  # a stream came back refused at least once and was opened again
