"""Settings for the whole suite."""

from __future__ import annotations

import os

import pytest

# Live tests start controllers, agents and training processes of their own: more workers than
# this would only make them wait for the CPUs.
MAX_WORKERS = 4


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject.toml): one worker per CPU this process may run on (one under
    ``taskset -c 0``, where xdist's own count would see the whole machine), at most
    MAX_WORKERS."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))
