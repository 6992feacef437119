"""Shared pieces of the live elastic tests (tests/integration/test_elastic_live.py,
test_ones_live.py): timings, job specs and readers of a job's events, logs and `describe`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

from mlsched.localcluster import ClusterTiming
from mlsched.model import BatchRule, ElasticSpec, Event, MetricGoal, TargetMetricStop

# SLAQ moves a GPU only when the epoch (a lease) outweighs the pause it assumes for a resize
# before one is measured: a grow from 1 to 2 GPUs pays when 2 (L - pause) > L. The controller
# runs with SLAQ_PAUSE_S (`--slaq-pause-s`; 25 s by default), so a 20-s lease is enough.
SLAQ_PAUSE_S = 2.0
SLAQ_TIMING = ClusterTiming(
    lease_s=20.0,
    cycle_s=0.5,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=10.0,
    suspend_grace_s=60.0,
)
# Several DDP processes share this machine's cores: the node's CPU runs above MLFS' h_r, and an
# agent asking to move tasks off it (no other host: back to the queue) would decide the test,
# not the policy under test.
AGENT_FLAGS = ["--no-overload-detection"]
ARGS = ("--train-size", "4000", "--lr", "0.0001")
# A loss no job reaches: the jobs train until the test has seen what it waits for and stops them
# (`mlsched stop`: a final checkpoint, then COMPLETED), so no outcome depends on their speed.
UNREACHED_LOSS = TargetMetricStop("loss", 1e-6, MetricGoal.MINIMIZE, 10**7)


def loss_job(example_spec, name: str, gpus: int, *args: str):
    """A DDP example job that stops on a loss it never reaches (SLAQ tracks the loss), elastic
    over 1 to 2 GPUs with a fixed global batch of 128."""
    spec = example_spec(
        name, "ddp_classifier.py", gpus, UNREACHED_LOSS, "--eval-every", "20", *args
    )
    return replace(spec, batch_size=128, elastic=ElasticSpec(1, 2, BatchRule.FIXED_GLOBAL))


def job_events(client, job_id: str) -> list[Event]:
    return list(client.events(job_id=job_id))


def describe(cluster, job_id: str, *args: str, user: str = "demo") -> str:
    """``mlsched describe JOB [ARGS]`` in a subprocess, as the job's owner."""
    cluster.credentials(user)
    command = [sys.executable, "-m", "mlsched", "describe", job_id, *args]
    command += [
        "--controller",
        cluster.address,
        "--credentials",
        str(cluster.root / "users" / user),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSCHED_")}
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


def json_lines(text: str) -> list[dict]:
    """elastic_classifier.py's JSON lines in a task log (the shim's log lines are skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith('{"event"')]
