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
from controller.policy.registry import available_policies, make_policy

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
