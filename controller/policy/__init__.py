"""Scheduling policies: pure functions from a cluster snapshot to a decision."""

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


def make_policy(name: str) -> Policy:
    """A new policy of that name (``controller/policy/registry.py``; imported on first use, so
    that naming policies, as ``mlsched --help`` does, imports none of them)."""
    from controller.policy.registry import make_policy as make

    return make(name)


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
