"""A standby controller's server refuses every call UNAVAILABLE naming the leader, and a client
given several addresses follows it there (controller.standby, mlsched.client)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.clock import ManualClock
from controller.leader import LeaderLease
from controller.server import Controller, ControllerConfig
from controller.standby import StandbyServer, _take_over, with_advertised_name
from controller.store.lease import open_lease_table
from mlsched.client import NOT_LEADER, Client, leader_hint
from mlsched.v1 import agent_pb2, agent_pb2_grpc
from tests.mlsched.test_client import FlakyJobService, serve, spec  # noqa: F401 - a fixture

T0 = 1_000_000.0


@pytest.fixture
def standby(tmp_path: Path) -> Iterator:
    """start(leader address or None) -> a standby server's address; "a" holds the lease."""
    servers: list[StandbyServer] = []
    tables = []

    def start(leader: str | None) -> str:
        clock = ManualClock(T0)
        table = open_lease_table("", tmp_path)
        tables.append(table)
        if leader is not None:
            held = LeaderLease(table, leader, 30.0, now=clock.now, monotonic=clock.now)
            assert held.try_acquire()
        lease = LeaderLease(table, "", 30.0, now=clock.now, monotonic=clock.now, holder="b")
        if leader is not None:
            assert not lease.try_acquire()  # b stands by; it has read a's address
        config = ControllerConfig(listen="127.0.0.1:0", state_dir=tmp_path, insecure=True)
        servers.append(StandbyServer(config, lease))
        return servers[-1].address

    yield start
    for server in servers:
        server.stop()
    for table in tables:
        table.close()


def test_a_standby_refuses_unary_and_stream_calls_naming_the_leader(standby):
    address = standby("10.0.0.1:50051")
    with grpc.insecure_channel(address) as channel:
        with pytest.raises(grpc.RpcError) as unary:
            Client(address, "alice", retry_delays_s=()).nodes()
        session = agent_pb2_grpc.AgentServiceStub(channel).AgentSession(
            iter([agent_pb2.AgentSessionRequest()])
        )
        with pytest.raises(grpc.RpcError) as stream:
            next(session)
    for exc in (unary.value, stream.value):
        assert exc.code() is grpc.StatusCode.UNAVAILABLE
        assert exc.details().startswith(NOT_LEADER)
        assert leader_hint(exc) == "10.0.0.1:50051"


def test_a_client_goes_to_the_leader_a_standby_names(standby, serve):  # noqa: F811
    leader = serve(FlakyJobService(0, grpc.StatusCode.OK))
    address = standby(leader)
    waits: list[float] = []
    with Client(f"{address},127.0.0.1:1,{leader}", "alice", sleep=waits.append) as client:
        job = client.submit(spec())
        assert client.address == leader
    assert job.id == "j-00000000"
    assert waits == []  # named, not searched for


def test_a_client_tries_every_address_in_rounds_then_gives_up(standby):
    address = standby(None)  # no leader known
    waits: list[float] = []
    client = Client(
        f"127.0.0.1:1,{address}",
        "alice",
        sleep=waits.append,
        retry_delays_s=(),
        follow_delays_s=(0.5, 1.0),
    )
    with client, pytest.raises(grpc.RpcError) as refused:
        client.nodes()
    assert waits == [0.5, 1.0]  # three rounds over two addresses, a pause between rounds
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert leader_hint(refused.value) == ""  # a standby that knows no leader


def test_the_advertised_host_is_named_in_the_server_certificate(tmp_path):
    config = ControllerConfig(listen="0.0.0.0:50051", state_dir=tmp_path, tls_names=("alias",))
    named = with_advertised_name(config, "ctl-1.example.internal:50051")
    assert named.tls_names == ("alias", "ctl-1.example.internal")
    assert with_advertised_name(named, "ctl-1.example.internal:50051") == named
    assert with_advertised_name(config, "[fd00::1]:50051").tls_names == ("alias", "fd00::1")
    assert with_advertised_name(config, "") == config


def test_the_new_leader_records_its_election_before_its_server_starts(tmp_path, monkeypatch):
    # An agent that reconnects as soon as the port answers re-registers with the new leader;
    # its event must come after leader_elected (the failover test waits for it there).
    table = open_lease_table("", tmp_path)
    lease = LeaderLease(table, "127.0.0.1:0", 30.0)
    assert lease.try_acquire()
    config = ControllerConfig(
        listen="127.0.0.1:0", state_dir=tmp_path, insecure=True, policy="fifo"
    )
    seen_at_start: list[str] = []
    real_start = Controller.start

    def start(controller: Controller) -> None:
        seen_at_start.extend(e.kind for e in controller.store.events_after(0))
        real_start(controller)

    monkeypatch.setattr(Controller, "start", start)
    controller = _take_over(config, 0, lease, 30.0)
    try:
        assert seen_at_start == ["leader_elected"]
        kinds = [e.kind for e in controller.store.events_after(0)]
        assert kinds[:2] == ["leader_elected", "controller_started"]
    finally:
        controller.stop()
        lease.release()
        table.close()
