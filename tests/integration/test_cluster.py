"""End to end: real controller, agents and PyTorch training processes on this machine."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import replace

import grpc
import psutil
import pytest

from mlsched.localcluster import ClusterTiming
from mlsched.model import IterationStop, JobState, MetricGoal, TargetMetricStop
from mlsched.v1 import agent_pb2, agent_pb2_grpc
from tests.integration.conftest import FAST

pytestmark = pytest.mark.integration

FOREVER = IterationStop(10**9)  # no machine reaches it: such a job ends when the test says


def test_job_trains_to_completion_with_accuracy_and_logs(
    make_cluster, example_spec, wait_job, ended
):
    cluster = make_cluster(nodes={"node-a": 1})
    with cluster.client("alice") as client:
        job = client.submit(example_spec("mlp", stopping=IterationStop(300)))
        done = wait_job(cluster, client, job.id, ended)
        assert done.state is JobState.COMPLETED, done.message
        assert done.iteration == 300
        assert done.metrics["accuracy"] > 0.6  # 4 classes: chance is 0.25
        assert done.node_history == ["node-a"]
        logs = client.logs(job.id)
        assert logs.node_id == "node-a"
        assert "attempt 1" in logs.content


def test_lease_boundary_suspends_and_resumes_on_the_other_node(
    make_cluster, example_spec, wait_job, ended
):
    """Lease expiry suspends the longest-running job; it resumes on whichever node frees up.

    The order of events is forced, not timed: ``first`` and ``second`` fill both nodes,
    ``third`` waits, so at the lease boundary ``first`` (longest running) yields its GPU to
    ``third``. Only then is ``second`` cancelled, so the one free GPU is on the other node.
    No job has a budget it can reach: ``first`` could otherwise finish before its lease ends
    on a fast machine. It is cancelled once it has checkpointed past its restored step on
    the other node (test_overload.py has a moved job complete).
    """
    timing = ClusterTiming(
        lease_s=5.0,
        cycle_s=0.3,
        heartbeat_interval_s=0.5,
        heartbeat_timeout_s=10.0,
        suspend_grace_s=15.0,
    )
    cluster = make_cluster(timing)
    with cluster.client("alice") as client:
        first = client.submit(example_spec("first", stopping=FOREVER))
        first = wait_job(cluster, client, first.id, lambda j: j.state is JobState.RUNNING)
        second = client.submit(example_spec("second", stopping=FOREVER))
        wait_job(cluster, client, second.id, lambda j: j.state is JobState.RUNNING)
        third = client.submit(example_spec("third", stopping=FOREVER))
        third = wait_job(cluster, client, third.id, lambda j: j.state is JobState.RUNNING)
        start_node = first.node_history[-1]
        assert third.node_history == [start_node]
        assert client.get(first.id)[0].state is JobState.SUSPENDED
        client.cancel(second.id)
        moved = wait_job(cluster, client, first.id, lambda j: j.state is JobState.RUNNING)
        client.cancel(third.id)
        trained = wait_job(
            cluster, client, first.id, lambda j: j.checkpoint_step > moved.checkpoint_step
        )
        client.cancel(first.id)
        ended_jobs = [wait_job(cluster, client, j.id, ended) for j in (first, second, third)]
    assert moved.node_history[-1] != start_node
    [record] = trained.resumes
    assert record.from_nodes == (start_node,)
    assert record.to_nodes == (moved.node_history[-1],)
    assert record.restored_step == record.checkpoint_step > 0
    assert trained.node_history[-1] == moved.node_history[-1]
    assert (trained.attempt, trained.suspensions) == (moved.attempt, 1)
    assert all(j.state is JobState.CANCELLED for j in ended_jobs)


def test_ddp_job_spans_two_agents(make_cluster, example_spec, wait_job, ended):
    cluster = make_cluster()
    with cluster.client("alice") as client:
        job = client.submit(example_spec("ddp", "ddp_classifier.py", 2, IterationStop(300)))
        done = wait_job(cluster, client, job.id, ended)
        _, tasks = client.get(job.id)
    assert done.state is JobState.COMPLETED, done.message
    assert {t.node_id for t in tasks} == {"node-a", "node-b"}
    assert done.metrics["accuracy"] > 0.6


def test_target_metric_stops_the_job_early(make_cluster, example_spec, wait_job, ended):
    cluster = make_cluster(nodes={"node-a": 1})
    stop = TargetMetricStop("accuracy", 0.8, MetricGoal.MAXIMIZE, 100_000)
    with cluster.client("alice") as client:
        job = client.submit(example_spec("target", stopping=stop))
        done = wait_job(cluster, client, job.id, ended)
    assert done.state is JobState.COMPLETED, done.message
    assert done.metrics["accuracy"] >= 0.8
    assert done.iteration < 100_000


def test_controller_killed_mid_run_loses_and_duplicates_nothing(
    make_cluster, example_spec, wait_job, ended
):
    # A generous heartbeat timeout: this test is about reconciling running tasks after a
    # restart, not about liveness (a loaded machine may take seconds to reconnect the agents).
    cluster = make_cluster(
        ClusterTiming(
            lease_s=600.0,
            cycle_s=0.3,
            heartbeat_interval_s=0.5,
            heartbeat_timeout_s=30.0,
            suspend_grace_s=15.0,
        )
    )
    with cluster.client("alice") as client:
        jobs = [
            client.submit(example_spec(f"long-{i}", stopping=IterationStop(1500))) for i in range(2)
        ]
        for job in jobs:
            wait_job(cluster, client, job.id, lambda j: j.state is JobState.RUNNING)
        pids_before = _training_pids(cluster)
    cluster.kill_controller(signal.SIGKILL)
    cluster.start_controller()
    with cluster.client("alice") as client:
        done = [wait_job(cluster, client, j.id, ended, timeout_s=180) for j in jobs]
        listed = client.list()
    assert [j.id for j, _ in listed] == [j.id for j in jobs]
    for job in done:
        assert job.state is JobState.COMPLETED, job.message
        assert job.attempt == 1  # the running tasks were reconciled, not relaunched
        assert job.suspensions == 0
        assert job.iteration == 1500
    assert len(pids_before) == 2


def test_a_job_that_ends_while_the_controller_is_down_keeps_its_last_progress(
    make_cluster, example_spec, wait_job, ended
):
    """The trainer finishes while no controller runs (the test waits for its process to exit,
    however long that takes), so every progress report of its last stretch goes nowhere; the
    status the agent repeats at registration carries the last one. Self-fencing and the lease
    are far off (600 s) so that the job may finish on a slow machine too."""
    cluster = make_cluster(
        ClusterTiming(
            lease_s=600.0,
            cycle_s=0.3,
            heartbeat_interval_s=0.5,
            heartbeat_timeout_s=600.0,
            suspend_grace_s=15.0,
        ),
        nodes={"node-a": 1},
    )
    with cluster.client("alice") as client:
        job = client.submit(example_spec("ends-alone", stopping=IterationStop(300)))
        wait_job(cluster, client, job.id, lambda j: j.state is JobState.RUNNING)
        [pid] = _training_pids(cluster)
    cluster.kill_controller(signal.SIGKILL)
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=300)
    cluster.start_controller()
    with cluster.client("alice") as client:
        done = wait_job(cluster, client, job.id, ended, timeout_s=120)
    assert done.state is JobState.COMPLETED, done.message
    assert done.iteration == 300
    assert done.attempt == 1 and done.suspensions == 0


def test_dead_node_tasks_resume_from_checkpoint_elsewhere(
    make_cluster, example_spec, wait_job, ended
):
    """The job's budget is out of reach, so it is still training when its node dies however
    fast the machine; it is cancelled once it has checkpointed past its restored step.
    The controller reuses the dead node's GPUs only past the agent's self-fencing margin
    (twice the suspend grace plus the save extension, about 70 s with FAST's): a short grace
    and no extension keep the wait to about 15 s; the rule is the same."""
    timing = replace(FAST, suspend_grace_s=5.0)
    cluster = make_cluster(timing, agent_flags=["--suspend-save-extension", "0"])
    with cluster.client("alice") as client:
        job = client.submit(example_spec("survivor", stopping=FOREVER))
        running = wait_job(
            cluster, client, job.id, lambda j: j.state is JobState.RUNNING and j.checkpoint_step > 0
        )
        victim = running.node_history[0]
        _kill_node(cluster, victim)
        resumed = wait_job(
            cluster,
            client,
            job.id,
            lambda j: j.resumes and j.checkpoint_step > j.resumes[0].checkpoint_step,
            timeout_s=180,
        )
        client.cancel(job.id)
        wait_job(cluster, client, job.id, ended)
    assert resumed.state is JobState.RUNNING, resumed.message
    assert resumed.suspensions == 1
    [record] = resumed.resumes
    assert record.from_nodes == (victim,)
    assert victim not in record.to_nodes
    assert resumed.node_history == [victim, *record.to_nodes]
    assert record.restored_step == record.checkpoint_step > 0


def test_agent_with_wrong_join_token_is_refused_and_plaintext_is_refused(
    make_cluster, tmp_path, example_spec, wait_job, ended
):
    cluster = make_cluster(nodes={})
    bad = tmp_path / "bad-token"
    bad.write_text("0" * 64 + "\n")
    agent = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlsched",
            "agent",
            "--controller",
            cluster.address,
            "--join-controller",
            cluster.join_address,
            "--ca-file",
            str(cluster.ca_file),
            "--join-token-file",
            str(bad),
            "--node-id",
            "intruder",
            "--state-dir",
            str(tmp_path / "intruder"),
            "--checkpoint-root",
            str(tmp_path / "ck"),
            "--gpus",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert agent.returncode != 0
    assert "PERMISSION_DENIED: unknown or already used join token" in agent.stderr
    # The old probe, a plaintext session with a guessed token, no longer gets past TLS.
    with grpc.insecure_channel(cluster.address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        register = agent_pb2.AgentSessionRequest(register=agent_pb2.RegisterAgent(node_id="x"))
        with pytest.raises(grpc.RpcError) as err:
            list(
                stub.AgentSession(
                    iter([register]), metadata=(("mlsched-join-token", "no"),), timeout=10
                )
            )
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    with cluster.client("alice") as client:
        assert client.nodes() == []


def test_cancel_is_owner_only_and_kills_the_training(make_cluster, example_spec, wait_job, ended):
    cluster = make_cluster(nodes={"node-a": 1})
    with cluster.client("alice") as alice, cluster.client("mallory") as mallory:
        job = alice.submit(example_spec("mine", stopping=FOREVER))
        wait_job(cluster, alice, job.id, lambda j: j.state is JobState.RUNNING)
        with pytest.raises(grpc.RpcError) as err:
            mallory.cancel(job.id)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        alice.cancel(job.id)
        done = wait_job(cluster, alice, job.id, ended)
        _, tasks = alice.get(job.id)
    assert done.state is JobState.CANCELLED
    assert all(t.state.value == "KILLED" for t in tasks)
    assert _training_pids(cluster) == []


def _training_pids(cluster) -> list[int]:
    pids = []
    for process in psutil.process_iter(["pid"]):
        try:
            env = process.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("MLSCHED_CHECKPOINT_DIR", "").startswith(str(cluster.checkpoint_root)):
            pids.append(process.pid)
    return pids


def _kill_node(cluster, node_id: str) -> None:
    """A node dies: its agent and every training process on it vanish at once."""
    victims = [p for p in psutil.process_iter(["pid"]) if _runs_on(p, cluster, node_id)]
    cluster.kill_agent(node_id, signal.SIGKILL)
    for process in victims:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _runs_on(process: psutil.Process, cluster, node_id: str) -> bool:
    try:
        env = process.environ()
    except (psutil.Error, OSError):
        return False
    return env.get("MLSCHED_AGENT_ADDR_FILE", "").startswith(str(cluster.root / node_id))
