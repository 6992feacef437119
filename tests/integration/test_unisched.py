"""UniSched live: a strict-SLO job meets a deadline under UniSched that it misses under FIFO.

The deadline under UniSched is generous (two minutes for a job of a few seconds of training):
the test is about who runs, and a loaded one-core machine takes tens of seconds to start,
profile, suspend and resume torch processes. Under FIFO the job waits behind a job of hours
whatever the machine's speed, so a short deadline shows the miss without a long wait.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from mlsched.localcluster import ClusterTiming
from mlsched.model import Deadline, IterationStop, JobClass, JobState

pytestmark = pytest.mark.integration

DEADLINE_S = 120.0
FIFO_DEADLINE_S = 8.0
TIMING = ClusterTiming(
    lease_s=4.0,  # BE lease; UniSched's SLO lease is twice that
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=10.0,
    suspend_grace_s=15.0,
)


def submit_pair(cluster, client, example_spec, wait_job, deadline_s: float = DEADLINE_S):
    """A best-effort job that would run for hours holds the only GPU; then an SLO job comes."""
    hog = client.submit(example_spec("hog", stopping=IterationStop(10_000_000)))
    wait_job(cluster, client, hog.id, lambda j: j.state is JobState.RUNNING)
    slo_spec = replace(
        example_spec("urgent", stopping=IterationStop(300)),
        job_class=JobClass.STRICT_SLO,
        deadlines=(Deadline(deadline_s, 100.0),),
    )
    return hog, client.submit(slo_spec)


def test_slo_job_meets_its_deadline_under_unisched(make_cluster, example_spec, wait_job, ended):
    cluster = make_cluster(TIMING, nodes={"node-a": 1}, policy="unisched")
    with cluster.client("alice") as client:
        hog, urgent = submit_pair(cluster, client, example_spec, wait_job)
        done = wait_job(cluster, client, urgent.id, ended, timeout_s=DEADLINE_S + 60)
        hog_now, _ = client.get(hog.id)
        client.cancel(hog.id)
    assert done.state is JobState.COMPLETED, done.message
    assert done.end_time - done.submit_time <= DEADLINE_S
    assert hog_now.suspensions >= 1  # the best-effort job yielded at a lease boundary
    assert done.estimate is not None  # the policy's last prediction, kept for describe
    assert done.speed_samples  # profiled on the live trainer's reports


def test_an_slo_job_misses_its_deadline_under_fifo(make_cluster, example_spec, wait_job):
    cluster = make_cluster(TIMING, nodes={"node-a": 1}, policy="fifo")
    with cluster.client("alice") as client:
        hog, urgent = submit_pair(cluster, client, example_spec, wait_job, FIFO_DEADLINE_S)
        # FIFO never preempts: wait until the deadline has passed, then look
        time.sleep(max(0.0, urgent.submit_time + FIFO_DEADLINE_S - time.time()) + 1.0)
        missed, _ = client.get(urgent.id)
        client.cancel(urgent.id)
        client.cancel(hog.id)
    assert missed.state is JobState.PENDING
