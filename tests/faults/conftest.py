"""Fixtures of the fault-injection suite (real controller, agents and training processes)."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlsched.localcluster import ClusterTiming, LocalCluster

# pytest runs with --import-mode=importlib, which leaves sys.path alone: make the helper module
# next to this file importable (its name is unique to this directory).
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from faultkit import TIMING
from faultkit import make_cluster as _make_cluster


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    clusters: list[LocalCluster] = []

    def make(
        nodes: dict[str, int] | None = None,
        timing: ClusterTiming = TIMING,
        agent_flags: list[str] | None = None,
    ) -> LocalCluster:
        root = tmp_path / f"cluster{len(clusters)}"
        cluster = _make_cluster(root, nodes or {"node-a": 1, "node-b": 1}, timing, agent_flags)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        for process in cluster.agents.values():  # a stopped agent cannot take SIGTERM
            process.send_signal(signal.SIGCONT)
        cluster.stop()
