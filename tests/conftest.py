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


# Directories whose tests start real processes and run for tens of seconds each: collected
# first, so that the workers (``--dist worksteal``: each takes a share of the list in order,
# then steals from the others) start the long tests early and the short unit tests fill the
# end of the run.
LIVE_FIRST = ("integration", "faults", "trainer_shim", "packaging", "nodeagent")


# The longest files of all (a minute or more per test on a 2-core machine: SLAQ's live test
# waits out a 60-s lease and a resize; the demo runs its whole story), ahead of everything:
# started last, one of them alone set the suite's end.
LONGEST_FIRST = (
    "test_elastic_live.py",
    "test_demo.py",
    "test_shim_floor.py",
    "test_ps_live.py",
    "test_ones_live.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The LONGEST_FIRST files (in that order), then the live-test directories (LIVE_FIRST
    order), then the rest; each group keeps its collection order."""

    def rank(item: pytest.Item) -> int:
        if item.path.name in LONGEST_FIRST:
            return LONGEST_FIRST.index(item.path.name) - len(LONGEST_FIRST)
        parts = item.path.parts
        for index, name in enumerate(LIVE_FIRST):
            if name in parts:
                return index
        return len(LIVE_FIRST)

    items.sort(key=rank)
