"""The request side of the controller session."""

from __future__ import annotations

import pytest

from mlsched.v1 import agent_pb2
from nodeagent.controller_link import Outbox


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
