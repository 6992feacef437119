"""The request side of the controller session."""

from __future__ import annotations

import random

import pytest

from controller.server import SERVER_OPTIONS
from controller.state import ControllerSettings
from mlsched.client import KEEPALIVE_OPTIONS
from mlsched.v1 import agent_pb2
from nodeagent.config import AgentConfig
from nodeagent.controller_link import JITTER, Backoff, ControllerLink, Outbox


def test_outbox_holds_until_registration_and_stops_when_closed() -> None:
    outbox = Outbox(max_pending=2)
    status = agent_pb2.AgentSessionRequest(task_status=agent_pb2.TaskStatus(pid=1))
    metrics = agent_pb2.AgentSessionRequest(metrics=agent_pb2.MetricsReport())
    register = agent_pb2.AgentSessionRequest(register=agent_pb2.RegisterAgent(node_id="n"))
    assert outbox.put(status)
    assert outbox.put(metrics, droppable=True)
    assert not outbox.put(metrics, droppable=True)  # full: metrics may be dropped
    assert outbox.put(status)  # statuses never are
    outbox.start(register)
    assert next(outbox) == register
    assert next(outbox) == status
    outbox.close()
    with pytest.raises(StopIteration):
        next(outbox)
    assert not outbox.put(status)


class _MaxJitter(random.Random):
    """Always the largest jitter factor."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_backoff_with_jitter_stays_clearly_below_the_heartbeat_timeout() -> None:
    # Issue 11 #9: with a 30 s cap and +20 % jitter the agent waited up to 36 s while the
    # controller declares a node dead after 30 s without a heartbeat.
    backoff = Backoff(0.5, 30.0, rng=_MaxJitter())
    backoff.set_heartbeat_timeout(30.0)
    waits = [backoff.next_wait() for _ in range(20)]
    assert max(waits) <= 0.5 * 30.0
    assert waits[:3] == pytest.approx([0.6, 1.2, 2.4])  # still exponential from the start
    backoff.reset()
    assert backoff.next_wait() == pytest.approx(0.6)


def test_backoff_without_a_heartbeat_timeout_uses_the_configured_cap() -> None:
    backoff = Backoff(0.5, 4.0, rng=_MaxJitter())
    backoff.set_heartbeat_timeout(0.0)  # an older controller
    assert max(backoff.next_wait() for _ in range(10)) == pytest.approx(4.8)


def test_default_cap_is_below_the_default_heartbeat_timeout() -> None:
    # Before its first registration the agent only has its own cap.
    cfg = AgentConfig(controller="127.0.0.1:1")
    assert cfg.reconnect_max_s * (1 + JITTER) <= 0.5 * ControllerSettings().heartbeat_timeout_s


class _Handler:
    def __init__(self) -> None:
        self.registered: list[tuple[str, float]] = []

    def on_registered(self, node_id: str, heartbeat_interval_s: float) -> None:
        self.registered.append((node_id, heartbeat_interval_s))


def test_link_learns_the_heartbeat_timeout_at_registration() -> None:
    handler = _Handler()
    link = ControllerLink(
        "127.0.0.1:1",
        "t",
        handler,
        lambda _: None,
        reconnect_max_s=30.0,  # type: ignore[arg-type]
    )
    assert link.backoff.cap_s == 30.0
    response = agent_pb2.AgentSessionResponse(
        registered=agent_pb2.Registered(
            node_id="n", heartbeat_interval_s=5.0, heartbeat_timeout_s=12.0
        )
    )
    link._dispatch(response)
    assert handler.registered == [("n", 5.0)]
    assert link.backoff.cap_s * (1 + JITTER) < 12.0 / 2


def test_keepalive_pings_are_permitted_by_the_controller() -> None:
    client = dict(KEEPALIVE_OPTIONS)
    server = dict(SERVER_OPTIONS)
    assert client["grpc.keepalive_time_ms"] > 0
    assert server["grpc.keepalive_permit_without_calls"] == 1
    assert (
        server["grpc.http2.min_ping_interval_without_data_ms"] <= client["grpc.keepalive_time_ms"]
    )
    assert server["grpc.http2.max_ping_strikes"] == 0
