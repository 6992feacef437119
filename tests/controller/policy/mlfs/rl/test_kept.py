"""What MLF-RL keeps between cycles changes no decision (controller/policy/mlfs/rl/queue.py,
``cycle.Memory``, ``hosts.NodeMemo``, ``network.FrozenPointer.argmax``): a simulation in which
every cycle's decision is also made from scratch (a new memory, the einsum logits' argmax)
and the two compared; and MLF-H's order by NumPy against ``sorted``."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from controller.policy.base import ClusterSnapshot, Decision
from controller.policy.mlfs.rl.cycle import Step, plan
from controller.policy.mlfs.rl.policy import MlfRlPolicy
from controller.policy.mlfs.rl.queue import order
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.types import TraceJob
from simulator.workload import assign_mlfs_features
from tests.simulator.test_mlfs import LinearModel


class _Scratch(MlfRlPolicy):
    """MLF-RL deciding every cycle from nothing kept, with the reference logits."""

    def _plan(self, snapshot: ClusterSnapshot) -> Decision:
        return plan(
            snapshot,
            self,
            self.config,
            resources=self.resources,
            lease_s=self.lease_s,
            load_control=self.load_control,
        )

    def choose(self, step: Step) -> int:
        return int(np.argmax(self._logits(step)))


class _Twin:
    """Decides with ``kept``; asks ``scratch`` too and records any difference."""

    def __init__(self, kept: MlfRlPolicy, scratch: MlfRlPolicy) -> None:
        self.kept, self.scratch, self.name = kept, scratch, kept.name
        self.cycles = self.launches = 0
        self.diffs: list[float] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        mine = self.kept.decide(snapshot)
        if mine != self.scratch.decide(snapshot):
            self.diffs.append(snapshot.now)
        self.cycles += 1
        self.launches += len(mine.launch)
        return mine


@pytest.mark.parametrize("load_control", [False, True])
def test_kept_state_changes_no_decision(load_control: bool) -> None:
    """A queue of hundreds of jobs with measured loads (overloads, movers) on 3 x 8 GPUs."""
    rng = random.Random(4)
    jobs = [
        TraceJob(
            f"j{i:03d}",
            "u",
            float(rng.randrange(0, 4 * 3600, 30)),  # many share a submission time
            float(rng.choice((300, 900, 1800, 3600))),
            rng.choice((1, 1, 1, 2, 4, 8)),
            iterations=100,
        )
        for i in range(240)
    ]
    jobs = assign_mlfs_features(jobs, rng)
    twin = _Twin(MlfRlPolicy(load_control=load_control), _Scratch(load_control=load_control))
    config = SimConfig(lease_s=300.0, cycle_s=60.0)
    Simulation(jobs, twin, ClusterShape(3, 8), LinearModel(), config).run()
    assert twin.diffs == []
    assert twin.cycles > 200 and twin.launches >= 200


def test_order_is_sorted_by_priority_then_id() -> None:
    rng = np.random.default_rng(2)
    for trial in range(200):
        n = int(rng.integers(0, 60))
        p = rng.choice([0.0, -0.0, 1.5, 2.25, math.inf, -math.inf, 3.0], size=n)
        if trial % 2:
            p = np.round(rng.normal(size=n), 1)  # ties among random values
        ids = [f"j{int(v)}" for v in rng.permutation(1000)[:n]]
        expected = sorted(range(n), key=lambda i: (-p[i], ids[i]))
        assert order(p, ids).tolist() == expected
    p = np.array([1.0, math.nan, 2.0, 1.0])
    ids = ["d", "c", "b", "a"]
    assert order(p, ids).tolist() == sorted(range(4), key=lambda i: (-p[i], ids[i]))
    # NumPy's strings drop a trailing NUL ("a\0" would equal "a"): sorted() decides
    p = np.array([1.0, 1.0, 1.0, 2.0])
    ids = ["a\0", "a", "\0", ""]
    assert order(p, ids).tolist() == [3, 2, 1, 0]
    assert order(p, ids).tolist() == sorted(range(4), key=lambda i: (-p[i], ids[i]))
