"""Chic live (issue 16): a parameter-server job and a DDP job on a LocalCluster under ``chic``.

One node with two (virtual) GPUs. The PS job arrives alone and ``chic`` gives it 2 workers and
1 PS (the shipped network on two GPUs, ``tests/controller/test_chic_live.py``). The DDP job's
arrival changes the job set: the PS job's share becomes one GPU, so it is suspended
(checkpoint through its servers) and resumed from that checkpoint on 1 worker and 2 PS, while
the DDP job starts on the other GPU. When the PS job completes, the DDP job (elastic 1-2 GPUs)
is alone: suspended and resumed from its checkpoint on both GPUs. Neither job has a budget it
can reach, so the order never depends on speed (with a budget of 300 steps the PS job once
finished before the DDP job's arrival had it resized): the test stops each (``mlsched stop``:
it completes with its model) once it has seen what it waits for, the PS job once it trains on
its new shape, the DDP job once it trains on two GPUs. Waits on job states and events only.
"""

from __future__ import annotations

import pytest

from mlsched.localcluster import ClusterTiming
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, PsSpec, RoleResources

pytestmark = pytest.mark.integration

TIMING = ClusterTiming(
    lease_s=600.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=10.0,
    suspend_grace_s=30.0,
)
# Small role vectors: the node's real cores (this machine has 2) hold 2 workers and 2 PS.
PS = PsSpec(1, 2, 1, 2, RoleResources(1, 0.25, 0.25), RoleResources(0, 0.25, 0.25))
FOREVER = IterationStop(10**9)
# Five training processes share this machine's cores, so the node's CPU runs above MLFS' h_r
# and its agent would ask to move tasks: with no other host, each request sends the PS job back
# to the queue (82 suspensions in 300 s in one run). Overload is not what this test is about.
AGENT_FLAGS = ["--no-overload-detection"]


def _shapes(job, client) -> list[tuple[int, int]]:
    """(tasks with GPUs, tasks without) of each launch of the job, from its job_state events
    ("launching attempt 1 on node-a:[0], node-a:[1], node-a:[]")."""
    shapes = []
    for e in client.events(job_id=job.id):
        if e.kind == "job_state" and "attempt" in e.message and " on " in e.message:
            where = e.message.split(" on ", 1)[1]
            servers = where.count("[]")
            shapes.append((where.count("node-a:[") - servers, servers))
    return shapes


def test_a_ps_job_and_a_ddp_job_are_resized_through_checkpoints_and_complete(
    make_cluster, example_spec, wait_job, ended
):
    cluster = make_cluster(TIMING, nodes={"node-a": 2}, policy="chic", agent_flags=AGENT_FLAGS)
    args = ("--checkpoint-every", "100", "--eval-every", "100")
    base = example_spec("ps-resnet50", "ps_classifier.py", 1, FOREVER, *args)
    ps_spec = JobSpec(**{**base.__dict__, "ps": PS})
    ddp = example_spec("ddp", "ddp_classifier.py", 2, FOREVER)
    ddp = JobSpec(**{**ddp.__dict__, "elastic": ElasticSpec(1, 2), "batch_size": 128})
    with cluster.client("alice") as client:
        ps_job = client.submit(ps_spec)
        # Trained a step before the DDP job changes the job set: resized at step 0 (seen on
        # one pinned core) it would have no checkpoint to resume from, and nothing to test.
        wait_job(
            cluster,
            client,
            ps_job.id,
            lambda j: j.state is JobState.RUNNING and j.iteration > 0,
            timeout_s=300,
        )
        ddp_job = client.submit(ddp)
        resized = wait_job(
            cluster,
            client,
            ps_job.id,
            lambda j: (
                j.state is JobState.RUNNING
                and j.resumes
                and j.resumes[-1].restored_step is not None
                and j.iteration > j.resumes[-1].restored_step
            ),
            timeout_s=600,
        )
        client.stop(ps_job.id, "enough")
        ps_done = wait_job(cluster, client, ps_job.id, ended, timeout_s=300)
        grown = wait_job(
            cluster,
            client,
            ddp_job.id,
            lambda j: (
                j.state is JobState.RUNNING
                and j.suspensions >= 1
                and j.resumes[-1].restored_step is not None
            ),
            timeout_s=300,
        )
        client.stop(ddp_job.id, "enough")
        ddp_done = wait_job(cluster, client, ddp_job.id, ended, timeout_s=300)
        ps_launches = _shapes(ps_job, client)
        ddp_launches = _shapes(ddp_job, client)
    # PS job: 2 workers + 1 PS, then resized to 1 worker + 2 PS from its checkpoint
    assert ps_launches[:2] == [(2, 1), (1, 2)]
    assert ps_done.state is JobState.COMPLETED, ps_done.message
    assert ps_done.iteration >= resized.iteration
    resize = ps_done.resumes[0]
    assert resize.checkpoint_step > 0 and resize.restored_step == resize.checkpoint_step
    # DDP job: one GPU beside the PS job, then both GPUs from its checkpoint
    assert ddp_launches[0] == (1, 0) and ddp_launches[-1] == (2, 0)
    [grow] = grown.resumes
    assert grow.restored_step == grow.checkpoint_step > 0
    assert ddp_done.state is JobState.COMPLETED, ddp_done.message
    assert ddp_done.iteration >= grow.checkpoint_step
