"""Live observability: /metrics of a real controller and agent move as a job runs; the gRPC
health service answers SERVING on both; logs carry job_id/node_id (docs/observability.md)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from mlsched.localcluster import LocalCluster
from mlsched.model import IterationStop, Job, JobState

from .conftest import FAST

pytestmark = pytest.mark.integration
HTTP = ("--http-listen", "127.0.0.1:0")
# These tests kill no node: a heartbeat timeout and a start that a loaded machine never reaches.
TIMING = dataclasses.replace(FAST, heartbeat_timeout_s=120.0)
START_S = 180.0


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``url``/metrics by (name, sorted labels)."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def training(job: Job) -> bool:
    """Running and past its first reported iteration (its trainer is connected)."""
    return job.state is JobState.RUNNING and job.iteration > 0


def wait_serving(channel: grpc.Channel, service: str = "") -> None:
    """Follow the health service's Watch until it says SERVING."""
    stub = health_pb2_grpc.HealthStub(channel)
    for reply in stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=60):
        if reply.status == health_pb2.HealthCheckResponse.SERVING:
            return
    raise AssertionError("the health stream ended before SERVING")


@pytest.fixture
def cluster(tmp_path: Path):
    cluster = LocalCluster(tmp_path / "cluster", TIMING, controller_extra=HTTP)
    cluster.start_controller(timeout_s=START_S)
    cluster.start_agent("node-a", gpus=1, extra=list(HTTP))
    cluster.wait_for_nodes({"node-a"}, timeout_s=START_S)
    yield cluster
    cluster.stop()


def test_metrics_move_as_a_job_runs(
    cluster: LocalCluster, example_spec: Callable, wait_job: Callable
) -> None:
    controller_url = (cluster.state_dir / "controller.http").read_text().strip()
    agent_url = (cluster.root / "node-a" / "agent.http").read_text().strip()
    assert controller_url.startswith("http://127.0.0.1:")  # loopback: plain HTTP
    before = scrape(controller_url)
    assert value(before, "mlsched_job_launches_total", kind="start") == 0
    assert value(before, "mlsched_node_up", node_id="node-a") == 1
    assert value(before, "mlsched_node_gpus", node_id="node-a", use="free") == 1

    with cluster.client() as client:
        job = client.submit(example_spec("observed", stopping=IterationStop(10**9)))
        wait_job(cluster, client, job.id, training, START_S)  # stopped later: at a checkpoint
        running = scrape(controller_url)
        agent_running = scrape(agent_url)
        client.stop(job.id, "enough")
        wait_job(cluster, client, job.id, lambda j: j.state.terminal, START_S)
    after = scrape(controller_url)

    assert value(running, "mlsched_jobs", state="running", job_class="best-effort") == 1
    assert value(running, "mlsched_node_gpus", node_id="node-a", use="busy") == 1
    assert value(running, "mlsched_job_launches_total", kind="start") == 1
    assert value(running, "mlsched_job_queue_wait_seconds_count", job_class="best-effort") == 1
    assert value(running, "mlsched_scheduler_cycle_seconds_count") >= 1
    submit = "/mlsched.v1.JobService/SubmitJob"
    assert value(running, "mlsched_grpc_requests_total", method=submit, code="OK") == 1

    assert value(after, "mlsched_jobs", state="completed", job_class="best-effort") == 1
    assert value(after, "mlsched_jobs", state="running", job_class="best-effort") == 0
    assert value(after, "mlsched_job_ends_total", state="completed") == 1
    assert value(after, "mlsched_events_total", kind="job_submitted") == 1
    assert value(after, "mlsched_scheduler_cycle_seconds_count") > value(
        running, "mlsched_scheduler_cycle_seconds_count"
    )

    assert value(agent_running, "mlsched_agent_registered", node_id="node-a") == 1
    assert value(agent_running, "mlsched_agent_commands_total", kind="launch") == 1
    assert value(agent_running, "mlsched_agent_tasks", state="running") == 1
    agent_after = scrape(agent_url)
    assert value(agent_after, "mlsched_agent_tasks", state="running") == 0
    assert ("mlsched_agent_gpu_memory_total_bytes", (("gpu", "0"),)) in agent_after


def test_health_and_structured_logs(cluster: LocalCluster) -> None:
    bundle = cluster.credentials("watcher")
    with grpc.secure_channel(cluster.address, bundle.channel_credentials()) as channel:
        wait_serving(channel)
        wait_serving(channel, "mlsched.v1.JobService")
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as unknown:
            stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=30)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    trainer = (cluster.root / "node-a" / "trainer-address").read_text().strip()
    with grpc.insecure_channel(trainer) as channel:
        wait_serving(channel)  # registered with the controller
    # The text log's structured fields: the node's registration names its node_id.
    log = (cluster.root / "controller.log").read_text()
    assert "node_registered: " in log and "node_id=node-a" in log


def test_json_logs_carry_job_and_node_ids(
    tmp_path: Path, example_spec: Callable, wait_job: Callable
) -> None:
    cluster = LocalCluster(
        tmp_path / "json", TIMING, controller_extra=("--log-format", "json", "--log-level", "info")
    )
    try:
        cluster.start_controller(timeout_s=START_S)
        cluster.start_agent("node-j", gpus=1, extra=["--log-format", "json"])
        cluster.wait_for_nodes({"node-j"}, timeout_s=START_S)
        with cluster.client() as client:
            job = client.submit(example_spec("logged", stopping=IterationStop(10**9)))
            wait_job(cluster, client, job.id, lambda j: j.state is JobState.RUNNING, START_S)
            client.cancel(job.id)
            wait_job(cluster, client, job.id, lambda j: j.state.terminal, START_S)
    finally:
        cluster.stop()
    text = (cluster.root / "controller.log").read_text()
    plain = [line for line in text.splitlines() if not line.startswith("{")]
    assert plain == ["controller stopped"]  # the command's own last word, not a log record
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    states = [x for x in lines if x.get("event") == "job_state" and x.get("job_id") == job.id]
    assert [x["message"].split(":")[1].strip() for x in states][:2] == [
        "PENDING -> STARTING",
        "STARTING -> RUNNING",
    ]
    assert states[-1]["message"].startswith("job_state: CANCELLING -> CANCELLED")
    assert any(x.get("policy") == "fifo-lease" for x in lines)
    tasks = [x for x in lines if x.get("event") == "task_ended" and x.get("job_id") == job.id]
    assert tasks and tasks[0]["node_id"] == "node-j"
    agent_lines = (cluster.root / "node-j.log").read_text().splitlines()
    assert agent_lines and all(json.loads(line)["level"] for line in agent_lines)
