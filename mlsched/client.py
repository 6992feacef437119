"""A small client for the controller's JobService, returning domain objects."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import grpc

from mlsched import serde
from mlsched.model import Event, Job, JobSpec, JobState, Node, Task
from mlsched.security.bundle import Bundle
from mlsched.v1 import jobs_pb2, jobs_pb2_grpc

USER_KEY = "mlsched-user"

# gRPC keepalive of every channel to the controller (the CLI's and the agents'): a ping every
# KEEPALIVE_TIME_MS, also on an idle connection; no answer within KEEPALIVE_TIMEOUT_MS closes
# the connection, so a half-open one (a partition, a dead peer) is noticed and redialled. The
# controller permits pings this often (controller/server.py's SERVER_OPTIONS), so clients are
# not sent GOAWAY ("too_many_pings").
KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)

# A submit that failed with one of these may or may not have reached the controller; it is
# sent again with the same request id, which the controller answers with the job it made.
RETRIED_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
# Waits before the second, third, ... attempt of a submit.
SUBMIT_RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
# How the controller begins the details of a call refused for its user's request rate
# (controller/auth/guard.py); such a call did nothing, so any call may be sent again.
RATE_LIMITED = "too many requests"
# Waits before each repeat of a call refused for the rate (the bucket refills at its rate).
RATE_RETRY_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def rate_limited(exc: grpc.RpcError) -> bool:
    """Whether a call was refused for its user's request rate (and so did nothing)."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    return code is grpc.StatusCode.RESOURCE_EXHAUSTED and (details or "").startswith(RATE_LIMITED)


# A standby controller refuses every call UNAVAILABLE with details starting NOT_LEADER and the
# leader's address (when it knows one) in the trailing metadata under LEADER_KEY
# (controller/standby.py); such a call did nothing, so it may go to the leader.
NOT_LEADER = "not the leader"
LEADER_KEY = "mlsched-leader"
# Waits between rounds over the controller addresses while none answers as the leader: a
# failover takes the standby's lease time (15 s by default) and its start.
FOLLOW_DELAYS_S = (0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 5.0)


def controller_addresses(text: str) -> list[str]:
    """The addresses of ``--controller``: one, or the controllers of an HA pair as a
    comma-separated list (``host1:port,host2:port``)."""
    addresses = [a.strip() for a in text.split(",") if a.strip()]
    if not addresses:
        raise ValueError(f"no controller address in {text!r}")
    return addresses


def leader_hint(exc: grpc.RpcError) -> str | None:
    """Where the leader is, when ``exc`` is a standby's refusal ("" when it knows none);
    None when ``exc`` is not a standby's refusal."""
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else ""
    if code is not grpc.StatusCode.UNAVAILABLE or not (details or "").startswith(NOT_LEADER):
        return None
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    return next((str(v) for k, v in trailing or () if k == LEADER_KEY), "")


def next_address(addresses: Sequence[str], current: int, exc: grpc.RpcError) -> int:
    """The index of the address to try after ``exc`` from ``addresses[current]``: the leader a
    standby named, when it is in the list, else the next one."""
    hint = leader_hint(exc)
    if hint and hint in addresses:
        return addresses.index(hint)
    return (current + 1) % len(addresses)


@dataclass(frozen=True)
class JobLogs:
    node_id: str
    content: str
    truncated: bool


class Client:
    """One channel per client. With ``credentials`` (a user's bundle) the channel is mutual
    TLS and the certificate says who calls; without, it is plaintext and every call claims
    ``user``, which only a controller started ``--insecure`` believes."""

    def __init__(
        self,
        address: str,
        user: str = "",
        timeout_s: float = 30.0,
        *,
        credentials: Bundle | None = None,
        retry_delays_s: Sequence[float] = SUBMIT_RETRY_DELAYS_S,
        sleep: Callable[[float], None] = time.sleep,
        follow_delays_s: Sequence[float] = FOLLOW_DELAYS_S,
    ) -> None:
        self._addresses = controller_addresses(address)
        self._credentials = credentials
        if credentials is not None:
            self._metadata: tuple[tuple[str, str], ...] = ()
        else:
            self._metadata = ((USER_KEY, user),)
        self._timeout_s = timeout_s
        self._retry_delays_s = tuple(retry_delays_s)
        self._follow_delays_s = tuple(follow_delays_s)
        self._sleep = sleep
        self._connect(0)

    def _connect(self, index: int) -> None:
        """One channel, to ``addresses[index]``."""
        self._index = index
        address = self._addresses[index]
        if self._credentials is not None:
            self._channel = grpc.secure_channel(
                address, self._credentials.channel_credentials(), options=KEEPALIVE_OPTIONS
            )
        else:
            self._channel = grpc.insecure_channel(address, options=KEEPALIVE_OPTIONS)
        self._stub = jobs_pb2_grpc.JobServiceStub(self._channel)

    @property
    def address(self) -> str:
        """The controller this client talks to now."""
        return self._addresses[self._index]

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _follow(self, exc: grpc.RpcError, tried: int) -> bool:
        """After ``exc``, whether to try again at another controller of the list (switched to
        here); ``tried``: addresses tried so far. A pause after each full round."""
        if len(self._addresses) < 2 or exc.code() is not grpc.StatusCode.UNAVAILABLE:
            return False
        rounds, rest = divmod(tried, len(self._addresses))
        if rest == 0:
            if rounds > len(self._follow_delays_s):
                return False
            self._sleep(self._follow_delays_s[rounds - 1])
        index = next_address(self._addresses, self._index, exc)
        self._channel.close()
        self._connect(index)
        return True

    def _call(self, name: str, request):  # type: ignore[no-untyped-def]
        """One unary call (``name``: the method). Refused for the user's request rate, it is
        sent again after each of ``RATE_RETRY_DELAYS_S`` (the refusal comes before the
        controller does anything). With several controller addresses, an UNAVAILABLE one
        (down, or a standby) passes the call on to the next, or to the leader a standby names."""
        tried = 0
        while True:
            try:
                return self._call_once(name, request)
            except grpc.RpcError as exc:
                tried += 1
                if not self._follow(exc, tried):
                    raise

    def _call_once(self, name: str, request):  # type: ignore[no-untyped-def]
        for delay_s in (*RATE_RETRY_DELAYS_S, None):
            try:
                method = getattr(self._stub, name)
                return method(request, metadata=self._metadata, timeout=self._timeout_s)
            except grpc.RpcError as exc:
                if delay_s is None or not rate_limited(exc):
                    raise
                self._sleep(delay_s)
        raise AssertionError("unreachable")

    def submit(self, spec: JobSpec, request_id: str = "") -> Job:
        """Submit a job, exactly once: every attempt carries one request id (a new uuid unless
        given), and an attempt that failed UNAVAILABLE or DEADLINE_EXCEEDED is repeated after
        each of ``retry_delays_s``; the controller answers a repeat with the same job."""
        request = jobs_pb2.SubmitJobRequest(
            spec=serde.spec_to_proto(spec), request_id=request_id or str(uuid.uuid4())
        )
        for delay_s in (*self._retry_delays_s, None):
            try:
                reply = self._call("SubmitJob", request)
            except grpc.RpcError as exc:
                if delay_s is None or exc.code() not in RETRIED_CODES:
                    raise
                self._sleep(delay_s)
                continue
            return serde.job_from_proto(reply.job)[0]
        raise AssertionError("unreachable")

    def get(self, job_id: str) -> tuple[Job, list[Task]]:
        reply = self._call("GetJob", jobs_pb2.GetJobRequest(job_id=job_id))
        return serde.job_from_proto(reply.job)

    def list(
        self, states: tuple[JobState, ...] = (), user: str = "", page_size: int = 0
    ) -> list[tuple[Job, list[Task]]]:
        """Every matching job, following the pages (``page_size``: jobs per call, 0 for the
        controller's default)."""
        request = jobs_pb2.ListJobsRequest(
            states=[serde.job_state_to_proto(s) for s in states], user=user, page_size=page_size
        )
        jobs: list[tuple[Job, list[Task]]] = []
        while True:
            reply = self._call("ListJobs", request)
            jobs += [serde.job_from_proto(j) for j in reply.jobs]
            if not reply.next_page_token:
                return jobs
            request.page_token = reply.next_page_token

    def cancel(self, job_id: str) -> Job:
        reply = self._call("CancelJob", jobs_pb2.CancelJobRequest(job_id=job_id))
        return serde.job_from_proto(reply.job)[0]

    def stop(self, job_id: str, reason: str = "") -> Job:
        """Finish a job now, keeping its model (``mlsched stop``)."""
        reply = self._call("StopJob", jobs_pb2.StopJobRequest(job_id=job_id, reason=reason))
        return serde.job_from_proto(reply.job)[0]

    def nodes(self) -> list[tuple[Node, list[int]]]:
        reply = self._call("ListNodes", jobs_pb2.ListNodesRequest())
        return [serde.node_from_proto(n) for n in reply.nodes]

    def logs(self, job_id: str, rank: int = 0, max_bytes: int = 0) -> JobLogs:
        reply = self._call(
            "GetJobLogs",
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
        """Events after ``after_seq``; with ``follow`` the iterator waits for new ones. With
        several controller addresses a stream the controller ended UNAVAILABLE (it died, or is
        a standby) goes on at the leader from the last event received: the controllers share
        the events and their numbers. A stream refused for the user's request rate is opened
        again after each of ``RATE_RETRY_DELAYS_S``, as a unary call is, from the last event
        received."""
        tried = 0
        rate_waits = iter(RATE_RETRY_DELAYS_S)
        while True:
            request = jobs_pb2.WatchEventsRequest(after_seq=after_seq, job_id=job_id, follow=follow)
            stream = self._stub.WatchEvents(request, metadata=self._metadata, timeout=timeout_s)
            try:
                for reply in stream:
                    tried = 0
                    rate_waits = iter(RATE_RETRY_DELAYS_S)
                    event = serde.event_from_proto(reply.event)
                    after_seq = event.seq
                    yield event
                return
            except grpc.RpcError as exc:
                if rate_limited(exc) and (delay_s := next(rate_waits, None)) is not None:
                    self._sleep(delay_s)
                    continue
                tried += 1
                if not self._follow(exc, tried):
                    raise
            finally:
                stream.cancel()
