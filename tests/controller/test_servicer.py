"""The controller's gRPC surface: a real in-process ``Controller`` on port 0, real channels.

Every refusal carries its own status code (docs/wire.md, "Status codes"), never a blanket
INTERNAL/UNKNOWN, and a refused submission stores nothing: not in memory, not in SQLite.
"""

from __future__ import annotations

import math
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message

from controller.clock import ManualClock
from controller.server import Controller, ControllerConfig
from controller.state import ControllerSettings
from mlsched.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

TOKEN = "t"
WAIT_S = 10.0  # upper bound for anything awaited; never a fixed sleep
RPC_TIMEOUT_S = 10.0
SETTINGS = ControllerSettings(
    lease_s=600.0,
    cycle_s=60.0,  # cycles run when triggered (submit, cancel, register), not on a timer
    heartbeat_timeout_s=600.0,
    suspend_grace_s=10.0,
)
Code = grpc.StatusCode


# --- harness -----------------------------------------------------------------------------


class Api:
    """A running controller and stubs on a real channel to it."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.channel = grpc.insecure_channel(controller.address)
        self.jobs = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.agents = agent_pb2_grpc.AgentServiceStub(self.channel)

    def call(self, rpc: str, request: Message, user: str | None = "alice") -> Any:
        metadata = () if user is None else (("mlsched-user", user),)
        return getattr(self.jobs, rpc)(request, metadata=metadata, timeout=RPC_TIMEOUT_S)

    def submit(self, spec: common_pb2.JobSpec | None = None, user: str = "alice") -> common_pb2.Job:
        request = jobs_pb2.SubmitJobRequest(spec=spec if spec is not None else good_spec())
        return self.call("SubmitJob", request, user).job

    def list_jobs(self, **kw: Any) -> list[common_pb2.Job]:
        return list(self.call("ListJobs", jobs_pb2.ListJobsRequest(**kw)).jobs)

    def events(self, after_seq: int = 0) -> list[common_pb2.Event]:
        stream = self.jobs.WatchEvents(
            jobs_pb2.WatchEventsRequest(after_seq=after_seq, follow=False),
            metadata=(("mlsched-user", "alice"),),
            timeout=RPC_TIMEOUT_S,
        )
        return [reply.event for reply in stream]

    def close(self) -> None:
        self.channel.close()


def start_controller(state_dir: Path) -> Controller:
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=state_dir,
        join_token=TOKEN,
        settings=SETTINGS,
        heartbeat_interval_s=60.0,
        # The servicers' refusals and status codes, on plaintext with claimed users; the
        # authenticated (TLS) surface is tests/controller/test_auth.py's.
        insecure=True,
    )
    controller = Controller(config, clock=ManualClock())
    controller.start()
    return controller


@pytest.fixture
def connect() -> Iterator[Callable[[Path], Api]]:
    """Start controllers on demand; every one is stopped (and its channel closed) at the end."""
    apis: list[Api] = []

    def make(state_dir: Path) -> Api:
        api = Api(start_controller(state_dir))
        apis.append(api)
        return api

    yield make
    for api in reversed(apis):
        api.close()
        api.controller.stop(grace_s=0.5)


@pytest.fixture
def api(connect: Callable[[Path], Api], tmp_path: Path) -> Api:
    return connect(tmp_path / "state")


def good_spec(name: str = "train", gpus: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name,
        command=["python", "train.py"],
        gpus=gpus,
        stopping=common_pb2.StoppingCriterion(
            iterations=common_pb2.IterationCriterion(iterations=100)
        ),
    )


def rpc_error(fn: Callable[[], object]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn()
    return info.value


def db_job_rows(state_dir: Path) -> int:
    conn = sqlite3.connect(f"file:{state_dir / 'controller.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    finally:
        conn.close()


# --- JobService: authentication ----------------------------------------------------------

USER_RPCS = [
    ("SubmitJob", jobs_pb2.SubmitJobRequest(spec=good_spec())),
    ("GetJob", jobs_pb2.GetJobRequest(job_id="j-00000000")),
    ("ListJobs", jobs_pb2.ListJobsRequest()),
    ("CancelJob", jobs_pb2.CancelJobRequest(job_id="j-00000000")),
    ("ListNodes", jobs_pb2.ListNodesRequest()),
    ("GetJobLogs", jobs_pb2.GetJobLogsRequest(job_id="j-00000000")),
]


@pytest.mark.parametrize("user", [None, "", "   "], ids=["absent", "empty", "blank"])
@pytest.mark.parametrize(("rpc", "request_msg"), USER_RPCS, ids=[r for r, _ in USER_RPCS])
def test_unary_rpcs_without_a_user_are_unauthenticated(
    api: Api, rpc: str, request_msg: Message, user: str | None
) -> None:
    err = rpc_error(lambda: api.call(rpc, request_msg, user=user))
    assert err.code() == Code.UNAUTHENTICATED
    assert "mlsched-user" in err.details()
    assert api.list_jobs() == []  # not even the valid SubmitJob was stored


def test_watch_events_without_a_user_is_unauthenticated(api: Api) -> None:
    stream = api.jobs.WatchEvents(jobs_pb2.WatchEventsRequest(), timeout=RPC_TIMEOUT_S)
    err = rpc_error(lambda: list(stream))
    assert err.code() == Code.UNAUTHENTICATED


# --- JobService: SubmitJob validation ----------------------------------------------------


def _spec(**changes: Any) -> common_pb2.JobSpec:
    """``good_spec()`` with some fields replaced (``stopping=None`` clears the criterion)."""
    spec = good_spec()
    for field, value in changes.items():
        spec.ClearField(field)
        if field == "env":
            spec.env.update(value)
        elif field in ("command", "deadlines"):
            getattr(spec, field).extend(value)
        elif field == "stopping":
            if value is not None:
                spec.stopping.CopyFrom(value)
        else:
            setattr(spec, field, value)
    return spec


INVALID_SPECS = {
    "gpus-zero": (_spec(gpus=0), "gpus"),
    "gpus-negative": (_spec(gpus=-1), "gpus"),
    "gpus-too-many": (_spec(gpus=5000), "gpus"),
    "command-empty": (_spec(command=[]), "command"),
    "command-blank": (_spec(command=["  "]), "command"),
    "no-stopping-criterion": (_spec(stopping=None), "stopping"),
    "iterations-zero": (
        _spec(stopping=common_pb2.StoppingCriterion(iterations=common_pb2.IterationCriterion())),
        "stop.iterations",
    ),
    "strict-slo-without-deadline": (
        _spec(job_class=common_pb2.JOB_CLASS_STRICT_SLO),
        "deadlines",
    ),
    "soft-slo-increasing-reward": (
        _spec(
            job_class=common_pb2.JOB_CLASS_SOFT_SLO,
            deadlines=[
                common_pb2.Deadline(seconds_after_submit=60, reward=10),
                common_pb2.Deadline(seconds_after_submit=120, reward=50),
            ],
        ),
        "deadlines",
    ),
    "name-with-spaces": (_spec(name="my job"), "name"),
    "name-empty": (_spec(name=""), "name"),
    "gpus-not-multiple-of-per-process": (_spec(gpus=3, gpus_per_process=2), "gpus_per_process"),
    "negative-retries": (_spec(max_retries=-1), "max_retries"),
    "reserved-env": (_spec(env={"MLSCHED_TASK_ID": "x"}), "env"),
    # issue 11 #5: a NUL byte reached Popen on the agent and wedged the node
    "command-nul-byte": (_spec(command=["python", "train.py\0--x"]), "command[1]: must not"),
    "command-control-char": (_spec(command=["python\x1b[2J"]), "command[0]: must not"),
    "env-nul-byte": (_spec(env={"OPTS": "a\0b"}), "env.OPTS: must not contain a NUL byte"),
    "working-dir-nul-byte": (_spec(working_dir="/tmp/a\0b"), "working_dir: must not"),
    # issue 11 #11
    "target-nan": (
        _spec(
            stopping=common_pb2.StoppingCriterion(
                target_metric=common_pb2.TargetMetricCriterion(
                    metric="accuracy",
                    target=math.nan,
                    goal=common_pb2.METRIC_GOAL_MAXIMIZE,
                    max_iterations=100,
                )
            )
        ),
        "stop.target: a finite number, got nan",
    ),
    "metric-nul-byte": (
        _spec(
            stopping=common_pb2.StoppingCriterion(
                target_metric=common_pb2.TargetMetricCriterion(
                    metric="acc\0",
                    target=0.9,
                    goal=common_pb2.METRIC_GOAL_MAXIMIZE,
                    max_iterations=100,
                )
            )
        ),
        "stop.metric: must not contain a NUL byte",
    ),
    "max-iterations-beyond-the-bound": (
        _spec(
            stopping=common_pb2.StoppingCriterion(
                target_metric=common_pb2.TargetMetricCriterion(
                    metric="accuracy",
                    target=0.9,
                    goal=common_pb2.METRIC_GOAL_MAXIMIZE,
                    max_iterations=2**62,
                )
            )
        ),
        "stop.max_iterations: required integer from 1 to",
    ),
    "target-metric-unknown-goal": (
        _spec(
            stopping=common_pb2.StoppingCriterion(
                target_metric=common_pb2.TargetMetricCriterion(
                    metric="accuracy", target=0.9, goal=99, max_iterations=10
                )
            )
        ),
        "goal",
    ),
    "target-metric-no-max-iterations": (
        _spec(
            stopping=common_pb2.StoppingCriterion(
                target_metric=common_pb2.TargetMetricCriterion(
                    metric="accuracy", target=0.9, goal=common_pb2.METRIC_GOAL_MAXIMIZE
                )
            )
        ),
        "max_iterations",
    ),
}


def test_submit_without_a_spec_is_invalid_argument(api: Api, tmp_path: Path) -> None:
    err = rpc_error(lambda: api.call("SubmitJob", jobs_pb2.SubmitJobRequest()))
    assert err.code() == Code.INVALID_ARGUMENT
    assert "spec" in err.details()
    assert api.list_jobs() == []
    assert db_job_rows(tmp_path / "state") == 0


@pytest.mark.parametrize(("spec", "field"), INVALID_SPECS.values(), ids=INVALID_SPECS.keys())
def test_submit_invalid_spec_is_invalid_argument_and_stores_nothing(
    api: Api, tmp_path: Path, spec: common_pb2.JobSpec, field: str
) -> None:
    err = rpc_error(lambda: api.submit(spec))
    assert err.code() == Code.INVALID_ARGUMENT
    assert field in err.details(), err.details()
    assert api.list_jobs() == []
    assert db_job_rows(tmp_path / "state") == 0
    assert not [e for e in api.events() if e.kind == "job_submitted"]


def test_submit_reports_every_problem_at_once(api: Api) -> None:
    err = rpc_error(lambda: api.submit(_spec(name="a b", gpus=0, command=[])))
    assert err.code() == Code.INVALID_ARGUMENT
    for field in ("name", "gpus", "command"):
        assert field in err.details()


@pytest.mark.parametrize("reward", [math.nan, math.inf], ids=["nan", "inf"])
def test_submit_non_finite_reward_is_invalid_argument(api: Api, reward: float) -> None:
    spec = _spec(
        job_class=common_pb2.JOB_CLASS_STRICT_SLO,
        deadlines=[common_pb2.Deadline(seconds_after_submit=60, reward=reward)],
    )
    err = rpc_error(lambda: api.submit(spec))
    assert err.code() == Code.INVALID_ARGUMENT
    assert "reward" in err.details()


def test_submit_unknown_job_class_is_invalid_argument(api: Api, tmp_path: Path) -> None:
    err = rpc_error(lambda: api.submit(_spec(job_class=99)))
    assert err.code() == Code.INVALID_ARGUMENT
    assert "class" in err.details()
    assert db_job_rows(tmp_path / "state") == 0


def test_valid_submit_is_stored_and_owned_by_the_caller(api: Api, tmp_path: Path) -> None:
    job = api.submit(user="alice")
    assert job.id.startswith("j-")
    assert job.user == "alice"
    assert job.state == common_pb2.JOB_STATE_PENDING
    assert [j.id for j in api.list_jobs()] == [job.id]
    assert db_job_rows(tmp_path / "state") == 1


# --- JobService: lookups, cancellation, filters, logs ------------------------------------


@pytest.mark.parametrize(
    ("rpc", "request_msg"),
    [
        ("GetJob", jobs_pb2.GetJobRequest(job_id="j-nope")),
        ("CancelJob", jobs_pb2.CancelJobRequest(job_id="j-nope")),
        ("GetJobLogs", jobs_pb2.GetJobLogsRequest(job_id="j-nope")),
    ],
    ids=["GetJob", "CancelJob", "GetJobLogs"],
)
def test_unknown_job_is_not_found(api: Api, rpc: str, request_msg: Message) -> None:
    err = rpc_error(lambda: api.call(rpc, request_msg))
    assert err.code() == Code.NOT_FOUND
    assert "j-nope" in err.details()


def test_cancel_of_another_users_job_is_permission_denied(api: Api) -> None:
    job = api.submit(user="alice")
    err = rpc_error(lambda: api.call("CancelJob", jobs_pb2.CancelJobRequest(job_id=job.id), "bob"))
    assert err.code() == Code.PERMISSION_DENIED
    got = api.call("GetJob", jobs_pb2.GetJobRequest(job_id=job.id), "bob").job
    assert got.state == common_pb2.JOB_STATE_PENDING


def test_cancel_twice_is_failed_precondition(api: Api) -> None:
    job = api.submit()
    request = jobs_pb2.CancelJobRequest(job_id=job.id)
    first = api.call("CancelJob", request).job
    assert first.state == common_pb2.JOB_STATE_CANCELLED
    err = rpc_error(lambda: api.call("CancelJob", request))
    assert err.code() == Code.FAILED_PRECONDITION
    assert "already ended" in err.details()


@pytest.mark.parametrize("state", [99, 0], ids=["out-of-range", "unspecified"])
def test_list_jobs_with_an_unknown_state_is_invalid_argument(api: Api, state: int) -> None:
    api.submit()
    err = rpc_error(lambda: api.list_jobs(states=[state]))
    assert err.code() == Code.INVALID_ARGUMENT
    assert str(state) in err.details()


def test_list_jobs_filters_by_state_and_user(api: Api) -> None:
    a = api.submit(user="alice")
    b = api.submit(user="bob")
    api.call("CancelJob", jobs_pb2.CancelJobRequest(job_id=b.id), "bob")
    assert [j.id for j in api.list_jobs(user="alice")] == [a.id]
    assert [j.id for j in api.list_jobs(states=[common_pb2.JOB_STATE_CANCELLED])] == [b.id]
    assert {j.id for j in api.list_jobs()} == {a.id, b.id}


def test_logs_of_a_pending_job_are_failed_precondition(api: Api) -> None:
    job = api.submit()
    err = rpc_error(lambda: api.call("GetJobLogs", jobs_pb2.GetJobLogsRequest(job_id=job.id)))
    assert err.code() == Code.FAILED_PRECONDITION
    assert "not run yet" in err.details()


def test_logs_with_negative_max_bytes_are_invalid_argument(api: Api) -> None:
    job = api.submit()
    request = jobs_pb2.GetJobLogsRequest(job_id=job.id, max_bytes=-1)
    err = rpc_error(lambda: api.call("GetJobLogs", request))
    assert err.code() == Code.INVALID_ARGUMENT
    assert "max_bytes" in err.details()


# --- JobService: events ------------------------------------------------------------------


def test_watch_events_without_follow_returns_the_submit_event(api: Api) -> None:
    job = api.submit()
    events = api.events()
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    submitted = [e for e in events if e.kind == "job_submitted"]
    assert [e.job_id for e in submitted] == [job.id]
    after = api.events(after_seq=submitted[0].seq)
    assert all(e.seq > submitted[0].seq for e in after)


def test_watch_events_with_follow_yields_later_events(api: Api) -> None:
    received: queue.Queue[common_pb2.Event | BaseException] = queue.Queue()
    stream = api.jobs.WatchEvents(
        jobs_pb2.WatchEventsRequest(follow=True),
        metadata=(("mlsched-user", "alice"),),
        timeout=30.0,
    )

    def read() -> None:
        try:
            for reply in stream:
                received.put(reply.event)
        except grpc.RpcError as exc:
            received.put(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # The stream is open once the backlog (at least controller_started) has arrived.
        first = received.get(timeout=WAIT_S)
        assert isinstance(first, common_pb2.Event), first
        assert first.kind == "controller_started"
        job = api.submit()
        while True:
            event = received.get(timeout=WAIT_S)
            assert isinstance(event, common_pb2.Event), event
            if event.kind == "job_submitted":
                break
        assert event.job_id == job.id
        assert event.seq > first.seq
    finally:
        stream.cancel()
        reader.join(WAIT_S)
    assert not reader.is_alive()


# --- AgentService ------------------------------------------------------------------------


class Outbox:
    """The agent's side of the request stream: yields what is put, ends on ``close``."""

    _END = agent_pb2.AgentSessionRequest()  # identity marks the end, never sent

    def __init__(self, *messages: agent_pb2.AgentSessionRequest) -> None:
        self._queue: queue.Queue[agent_pb2.AgentSessionRequest] = queue.Queue()
        for message in messages:
            self.put(message)

    def put(self, message: agent_pb2.AgentSessionRequest) -> None:
        self._queue.put(message)

    def close(self) -> None:
        self._queue.put(self._END)

    def __iter__(self) -> Iterator[agent_pb2.AgentSessionRequest]:
        while (item := self._queue.get()) is not self._END:
            yield item


def register(
    node_id: str = "node-a", gpu_indices: tuple[int, ...] = (0, 1), **kw: Any
) -> agent_pb2.AgentSessionRequest:
    gpus = [common_pb2.GpuInfo(index=i, name="vgpu", virtual=True) for i in gpu_indices]
    return agent_pb2.AgentSessionRequest(
        register=agent_pb2.RegisterAgent(
            node_id=node_id, address="127.0.0.1", hostname="h", gpus=gpus, cpu_count=4, **kw
        )
    )


def open_session(api: Api, outbox: Outbox, token: str | None = TOKEN) -> Any:
    metadata = () if token is None else (("mlsched-join-token", token),)
    return api.agents.AgentSession(iter(outbox), metadata=metadata, timeout=30.0)


def session_error(
    api: Api, *messages: agent_pb2.AgentSessionRequest, token: str | None = TOKEN
) -> grpc.RpcError:
    outbox = Outbox(*messages)
    outbox.close()
    call = open_session(api, outbox, token)
    return rpc_error(lambda: list(call))


def list_nodes(api: Api) -> list[common_pb2.Node]:
    return list(api.call("ListNodes", jobs_pb2.ListNodesRequest()).nodes)


@pytest.mark.parametrize(
    "token", [None, "", "wrong", "t "], ids=["absent", "empty", "wrong", "trailing-space"]
)
def test_agent_session_with_a_wrong_token_is_unauthenticated(api: Api, token: str | None) -> None:
    err = session_error(api, register(), token=token)
    assert err.code() == Code.UNAUTHENTICATED
    assert "token" in err.details()
    assert list_nodes(api) == []


def test_agent_session_must_start_with_register(api: Api) -> None:
    metrics = agent_pb2.AgentSessionRequest(metrics=agent_pb2.MetricsReport())
    err = session_error(api, metrics)
    assert err.code() == Code.INVALID_ARGUMENT
    assert "register" in err.details()
    assert list_nodes(api) == []


def test_agent_session_with_an_empty_message_first_is_invalid_argument(api: Api) -> None:
    err = session_error(api, agent_pb2.AgentSessionRequest())
    assert err.code() == Code.INVALID_ARGUMENT
    assert list_nodes(api) == []


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (register(node_id=""), "node_id"),
        (register(gpu_indices=(0, 0)), "GPU indices"),
        (register(gpu_indices=(0, -1)), "GPU indices"),
        (
            register(tasks=[agent_pb2.TaskStatus(task=agent_pb2.TaskRef(job_id="j-1"), state=99)]),
            "task state",
        ),
    ],
    ids=["empty-node-id", "duplicate-gpus", "negative-gpu", "unknown-task-state"],
)
def test_agent_session_bad_register_is_invalid_argument(
    api: Api, message: agent_pb2.AgentSessionRequest, words: str
) -> None:
    err = session_error(api, message)
    assert err.code() == Code.INVALID_ARGUMENT
    assert words in err.details()
    assert list_nodes(api) == []
    assert not [e for e in api.events() if e.kind == "node_registered"]


def test_agent_session_register_shows_the_node(api: Api) -> None:
    outbox = Outbox(register("node-a", gpu_indices=(0, 1)))
    call = open_session(api, outbox)
    try:
        first = next(call)
        assert first.WhichOneof("message") == "registered"
        assert first.registered.node_id == "node-a"
        # The agent keeps its reconnect back-off below this (issue 11 #9).
        assert first.registered.heartbeat_timeout_s == SETTINGS.heartbeat_timeout_s
        nodes = list_nodes(api)
        assert [n.id for n in nodes] == ["node-a"]
        assert nodes[0].alive
        assert [g.index for g in nodes[0].gpus] == [0, 1]
        assert [e.node_id for e in api.events() if e.kind == "node_registered"] == ["node-a"]
    finally:
        outbox.close()
        call.cancel()


def test_relayed_progress_becomes_speed_samples_in_get_job(api: Api) -> None:
    outbox = Outbox(register("node-a", gpu_indices=(0,)))
    call = open_session(api, outbox)
    try:
        assert next(call).WhichOneof("message") == "registered"
        job = api.submit()
        launch = next(m.launch for m in call if m.WhichOneof("message") == "launch")
        assert launch.task.job_id == job.id
        running = agent_pb2.TaskStatus(task=launch.task, state=common_pb2.TASK_STATE_RUNNING)
        outbox.put(agent_pb2.AgentSessionRequest(task_status=running))
        for iteration, seconds, compute in [(1, 4.0, 4.0), (2, 0.5, 0.25), (3, 0.25, 0.125)]:
            progress = common_pb2.Progress(
                iteration=iteration, iteration_time_s=seconds, compute_time_s=compute
            )
            report = agent_pb2.ProgressReport(task=launch.task, progress=progress)
            outbox.put(agent_pb2.AgentSessionRequest(progress=report))
        deadline = time.monotonic() + WAIT_S
        while True:
            got = api.call("GetJob", jobs_pb2.GetJobRequest(job_id=job.id)).job
            if got.iteration == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        # The first report of the attempt (warm-up) is not a sample.
        assert [
            (x.gpus, x.nodes, x.iteration_time_s, x.compute_time_s, x.count)
            for x in got.speed_samples
        ] == [(1, 1, 0.375, 0.1875, 2)]
    finally:
        outbox.close()
        call.cancel()


# --- persistence -------------------------------------------------------------------------


def test_submit_twice_with_one_request_id_makes_one_job(api: Api, tmp_path: Path) -> None:
    request = jobs_pb2.SubmitJobRequest(spec=good_spec(), request_id="6f1c-retry")
    first = api.call("SubmitJob", request).job
    again = api.call("SubmitJob", request).job
    assert again.id == first.id
    assert db_job_rows(tmp_path / "state") == 1


def test_jobs_survive_a_controller_restart(connect: Callable[[Path], Api], tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    first = connect(state_dir)
    clock = first.controller.state.clock
    assert isinstance(clock, ManualClock)
    submitted = []
    for i, user in enumerate(["alice", "alice", "bob"]):
        submitted.append(first.submit(good_spec(f"job-{i}"), user=user))
        clock.advance(1.0)  # ListJobs orders by submit time, then id
    first.call("CancelJob", jobs_pb2.CancelJobRequest(job_id=submitted[1].id), "alice")
    before = [(j.id, j.user, j.spec.name, j.state) for j in first.list_jobs()]
    assert [b[0] for b in before] == [j.id for j in submitted]
    assert {s for *_, s in before} == {
        common_pb2.JOB_STATE_PENDING,
        common_pb2.JOB_STATE_CANCELLED,
    }
    first.close()
    first.controller.stop(grace_s=0.5)

    second = connect(state_dir)
    after = [(j.id, j.user, j.spec.name, j.state) for j in second.list_jobs()]
    assert after == before
    seqs = [e.seq for e in second.events()]
    assert seqs == sorted(set(seqs))  # the event feed continues, no reused numbers
    assert len([e for e in second.events() if e.kind == "controller_started"]) == 2


def test_a_task_status_brings_its_last_progress_or_none() -> None:
    from controller.servicer import task_report_from_proto

    ref = agent_pb2.TaskRef(job_id="j", rank=0, attempt=1)
    progress = common_pb2.Progress(iteration=1500, loss=0.125, metrics={"accuracy": 0.9})
    running = common_pb2.TASK_STATE_RUNNING
    report = task_report_from_proto(
        agent_pb2.TaskStatus(task=ref, state=running, last_progress=progress)
    )
    assert report.progress is not None
    assert (report.progress.iteration, report.progress.metrics) == (1500, {"accuracy": 0.9})
    assert task_report_from_proto(agent_pb2.TaskStatus(task=ref, state=running)).progress is None
