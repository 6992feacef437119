"""Fixtures: a controller peer and in-process node agents."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent import NodeAgent
from nodeagent.gpus import VirtualGpus

# pytest runs with --import-mode=importlib, which leaves sys.path alone: make the helper module
# next to this file importable (its name is unique to this directory).
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from nodeagent_testkit import (
    ControllerServer,
    FakeController,
    agent_config,
    kill_leftovers,
    write_task_script,
)


@pytest.fixture
def controller() -> Iterator[ControllerServer]:
    """A controller peer on a free port."""
    server = ControllerServer(FakeController()).start()
    yield server
    server.stop()


@pytest.fixture
def task_script(tmp_path: Path) -> Path:
    """The test task script, written to tmp_path."""
    return write_task_script(tmp_path)


@pytest.fixture
def make_agent(tmp_path: Path, controller: ControllerServer) -> Iterator[Callable[..., NodeAgent]]:
    """Start in-process agents (2 virtual GPUs) against ``controller``; cleaned up after."""
    agents: list[NodeAgent] = []

    def make(**overrides: Any) -> NodeAgent:
        config = agent_config(tmp_path, controller.address, **overrides)
        agent = NodeAgent(config, gpus=VirtualGpus(2))
        agent.start()
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.close()
    kill_leftovers(controller.servicer.pids(), str(tmp_path))
