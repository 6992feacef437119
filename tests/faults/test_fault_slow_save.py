"""A suspension waits for a checkpoint save in progress, up to a bound (issue 11 #9)."""

from __future__ import annotations

import signal

import pytest
from faultkit import exit_record, slow_save_spec, trainers, wait_gone, wait_job

pytestmark = pytest.mark.integration


def test_a_save_longer_than_twice_the_grace_finishes_before_the_suspension_ends(
    cluster_factory,
):
    """The controller is killed: after F = 4 s its agent suspends the task itself with grace
    G = 1 s (SIGKILL at 2 s without a save). The save takes 4 s and the agent allows 10 s more
    while a save is in progress, so the task ends SUSPENDED at the step it saved."""
    cluster = cluster_factory({"node-a": 1}, agent_flags=["--suspend-save-extension", "10"])
    with cluster.client("alice") as client:
        job = client.submit(slow_save_spec("slow-save", save_s=4.0))
        wait_job(cluster, client, job.id, lambda j: j.checkpoint_step > 0)
    [trainer] = trainers(cluster)
    cluster.kill_controller(signal.SIGKILL)
    wait_gone(trainer.pid, 60)
    record = exit_record(cluster, "node-a", job.id, 0, 1)
    assert record["outcome"] == "suspended", record
    assert record["checkpoint_step"] == record["step"] > 0
    cluster.start_controller()
    with cluster.client("alice") as client:
        resumed = wait_job(cluster, client, job.id, lambda j: j.attempt == 2)
        client.cancel(job.id)
    assert resumed.suspensions == 1 and resumed.failures == 0
    assert resumed.checkpoint_step == record["step"]
