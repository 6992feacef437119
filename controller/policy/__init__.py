"""Scheduling policies: pure functions from a cluster snapshot to a decision."""

from typing import TYPE_CHECKING

from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Migrate,
    NodeView,
    Policy,
    Renew,
    Stop,
    Suspend,
)
from controller.policy.names import available_policies

if TYPE_CHECKING:
    from pathlib import Path

    from controller.policy.mlfs.config import MlfsConfig


def make_policy(
    name: str,
    mlfs: "MlfsConfig | None" = None,
    mlfs_model: "Path | None" = None,
    slaq_pause_s: float | None = None,
) -> Policy:
    """A new policy of that name (``controller/policy/registry.py``; imported on first use, so
    that naming policies, as ``mlsched --help`` does, imports none of them). ``mlfs``: MLF-H's,
    MLF-RL's and MLFS' parameters (None: the paper's); ``mlfs_model``: the network file of
    MLF-RL and MLFS (None: the shipped one); ``slaq_pause_s``: SLAQ's assumed restart pause
    (None: its default)."""
    from controller.policy.registry import make_policy as make

    return make(name, mlfs, mlfs_model, slaq_pause_s)


__all__ = [
    "ClusterSnapshot",
    "Decision",
    "JobView",
    "Launch",
    "Migrate",
    "NodeView",
    "Policy",
    "Renew",
    "Stop",
    "Suspend",
    "available_policies",
    "make_policy",
]
