"""Policy names, importable without importing any policy (``mlsched --help`` stays light;
``controller/policy/registry.py`` builds them, and a test keeps the two lists equal)."""

from __future__ import annotations

DEFAULT_POLICY = "unisched"

POLICY_NAMES = (
    "chic",
    "chic-ar",
    "chronus",
    "edf",
    "fair",
    "fifo",
    "fifo-lease",
    "mlf-h",
    "mlf-rl",
    "mlfs",
    "ones",
    "optimus",
    "oracle",
    "pollux",
    "slaq",
    "slaq-maxmin",
    "srtf",
    "themis",
    "tiresias",
    "unisched",
    "unisched-cbc",
    "unisched-feasible",
    "unisched-highs",
    "unisched-no-iter",
    "unisched-no-sr",
    "unisched-roundup",
    "unisched-static-profiler",
)

# The policies that run an MLF-RL network (MLFS §3.4), each with whether it adds MLF-C's stops
# (§3.5): the ones a trained model file (``mlsched mlfs-train``) applies to.
RL_POLICIES = {"mlf-rl": False, "mlfs": True}


def available_policies() -> list[str]:
    """Every policy name, sorted."""
    return sorted(POLICY_NAMES)
