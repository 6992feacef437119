"""Seeded faults at random points of the scheduling cycle (the CI part of issue 11's suite;
scripts/fault_soak.py runs the long version): after them every job ends exactly once, no
checkpoint newer than another is lost and no GPU runs two tasks at once."""

from __future__ import annotations

import pytest
from faultkit import FOREVER
from injector import run_faults

pytestmark = pytest.mark.integration

KINDS = (
    "second-controller",
    "kill9-controller",
    "kill9-agent",
    "corrupt-row",
    "dropped-connection",
)


def test_each_fault_once_loses_and_duplicates_nothing(cluster_factory):
    cluster = cluster_factory()
    report = run_faults(
        cluster,
        seed=11,
        faults=len(KINDS),
        jobs_per_fault=0.0,
        kinds=KINDS,
        in_order=True,
        iterations=FOREVER.iterations,  # stopped at the end: they train through every fault
    )
    assert report.faults == list(KINDS)
    assert report.problems == []
    assert len(report.jobs) == 2
    print("skipped:", report.skipped)
