"""torchrun and Lightning jobs on a real LocalCluster (issue 18 #2; docs/frameworks.md): each is
suspended at a lease boundary, resumes from its checkpoint and completes.

The order is forced, not timed: the job trains past a checkpoint, a second job then waits for
the GPUs, so at the lease boundary the first job is suspended and the second runs. The second
is cancelled once it runs, the first resumes on the freed GPUs, and it is stopped (StopNow,
``mlsched stop``) once it has reported a step past the one it restored: no budget is left for
the machine's speed to reach first.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from mlsched.localcluster import ClusterTiming
from mlsched.model import IterationStop, Job, JobState, Launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

FOREVER = IterationStop(10**9)
LEASE = ClusterTiming(
    lease_s=5.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=30.0,
    suspend_grace_s=60.0,
)
TIMEOUT_S = 300.0  # every wait ends on an event; this only bounds a broken run


def _suspend_resume_and_stop(cluster, client, spec, filler, wait_job, ended) -> tuple[Job, Job]:
    """The job's state once it resumed past its checkpoint, and once it ended."""
    job = client.submit(spec)
    wait_job(cluster, client, job.id, lambda j: j.checkpoint_step > 0, timeout_s=TIMEOUT_S)
    other = client.submit(filler)
    wait_job(cluster, client, other.id, lambda j: j.state is JobState.RUNNING, TIMEOUT_S)
    assert client.get(job.id)[0].state is JobState.SUSPENDED
    client.cancel(other.id)
    resumed = wait_job(
        cluster,
        client,
        job.id,
        lambda j: j.resumes and j.restored_step > 0 and j.iteration > j.restored_step,
        timeout_s=TIMEOUT_S,
    )
    client.stop(job.id, "enough")
    done = wait_job(cluster, client, job.id, ended, timeout_s=TIMEOUT_S)
    return resumed, done


def _check(resumed: Job, done: Job) -> None:
    assert done.state is JobState.COMPLETED, done.message
    [record] = resumed.resumes
    assert record.restored_step == record.checkpoint_step > 0
    assert (resumed.attempt, resumed.suspensions) == (2, 1)
    assert done.iteration >= resumed.iteration > record.restored_step


def test_torchrun_job_suspends_and_resumes_from_its_checkpoint(
    make_cluster, example_spec, wait_job, ended
):
    cluster = make_cluster(LEASE, nodes={"node-a": 2})
    spec = _torchrun_spec(example_spec, "ddp-torchrun", 2, 2, FOREVER)
    with cluster.client("alice") as client:
        filler = example_spec("filler", stopping=FOREVER)
        resumed, done = _suspend_resume_and_stop(cluster, client, spec, filler, wait_job, ended)
        _, tasks = client.get(done.id)
        log = client.logs(done.id).content
    _check(resumed, done)
    assert [(t.rank, t.gpu_indices) for t in tasks] == [(0, (0, 1))]  # one launcher, 2 GPUs
    # both of torchrun's processes trained and both resumed from the checkpoint
    assert log.count(f"restored step {resumed.restored_step} from") == 2
    assert '"rank": 1' in log and "process group" not in log


def test_lightning_job_suspends_and_resumes_from_its_checkpoint(
    make_cluster, example_spec, wait_job, ended
):
    pytest.importorskip("lightning")
    cluster = make_cluster(LEASE, nodes={"node-a": 1})
    spec = example_spec(
        "lightning", "lightning_classifier.py", 1, FOREVER, "--checkpoint-every", "20"
    )
    with cluster.client("alice") as client:
        filler = example_spec("filler", stopping=FOREVER)
        resumed, done = _suspend_resume_and_stop(cluster, client, spec, filler, wait_job, ended)
        log = client.logs(done.id).content
    _check(resumed, done)
    assert f"restored step {resumed.restored_step} from" in log
    assert f'"restored": {resumed.restored_step}' in log


def _torchrun_spec(example_spec, name: str, gpus: int, per_launcher: int, stopping):
    ddp = example_spec(name, "ddp_classifier.py", gpus, stopping, "--checkpoint-every", "20")
    torchrun = (sys.executable, "-m", "torch.distributed.run")
    return replace(
        ddp,
        command=(*torchrun, *ddp.command[1:]),  # torchrun examples/ddp_classifier.py ...
        launcher=Launcher.TORCHRUN,
        gpus_per_process=per_launcher,
    )


def _summary_line(log: str) -> str:
    """The example's JSON summary (torchrun may log after it)."""
    [line] = [line for line in log.splitlines() if line.startswith('{"rank"')]
    return line


def test_two_torchrun_launchers_on_two_agents_train_as_one_group(
    make_cluster, example_spec, wait_job, ended
):
    cluster = make_cluster()  # node-a and node-b, one GPU each
    spec = _torchrun_spec(example_spec, "ddp-2-nodes", 2, 1, IterationStop(60))
    with cluster.client("alice") as client:
        job = client.submit(spec)
        done = wait_job(cluster, client, job.id, ended, timeout_s=TIMEOUT_S)
        _, tasks = client.get(job.id)
        logs = [client.logs(job.id, rank=rank).content for rank in (0, 1)]
    assert done.state is JobState.COMPLETED, done.message
    assert done.iteration == 60
    assert sorted((t.rank, t.node_id) for t in tasks) == [(0, "node-a"), (1, "node-b")]
    # node rank 1's launcher started global rank 1; both ranks ended in the same DDP model
    summaries = [json.loads(_summary_line(log)) for log in logs]
    assert [s["rank"] for s in summaries] == [0, 1]
    assert summaries[0]["accuracy"] == summaries[1]["accuracy"]


def test_two_processes_without_a_process_group_get_a_warning_in_their_log(
    make_cluster, example_spec, wait_job, ended
):
    cluster = make_cluster(nodes={"node-a": 2})
    with cluster.client("alice") as client:
        job = client.submit(example_spec("no-ddp", "mlp_classifier.py", 2, IterationStop(30)))
        done = wait_job(cluster, client, job.id, ended, timeout_s=TIMEOUT_S)
        logs = [client.logs(job.id, rank=rank).content for rank in (0, 1)]
    assert done.state is JobState.COMPLETED, done.message
    for log in logs:
        assert "this job runs 2 processes (WORLD_SIZE=2) but none has joined" in log
