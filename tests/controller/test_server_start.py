"""The controller says which policy it runs, in its log and in its event feed."""

from __future__ import annotations

import logging

import pytest

from controller.clock import ManualClock
from controller.server import Controller, ControllerConfig


@pytest.mark.parametrize(
    ("policy", "logged"), [("unisched", "policy unisched (the default)"), ("fifo", "policy fifo,")]
)
def test_the_controller_names_its_policy_at_start(tmp_path, caplog, policy, logged):
    config = ControllerConfig(
        listen="127.0.0.1:0", state_dir=tmp_path, join_token="t" * 32, policy=policy
    )
    controller = Controller(config, clock=ManualClock(1_000.0))
    with caplog.at_level(logging.INFO, logger="controller.server"):
        controller.start()
    try:
        assert logged in caplog.text
        events = controller.store.events_after(0, "")
        assert [e.message for e in events if e.kind == "controller_started"] == [
            f"listening on {controller.address}, policy {policy}"
        ]
    finally:
        controller.stop()
