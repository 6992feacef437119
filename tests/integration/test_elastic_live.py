"""Elastic jobs on a real local cluster (issue 14, issue 15 item 5): real controller, agents
and DDP training processes; every wait is on an event or a state, never on time."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from mlsched import render
from mlsched.localcluster import ClusterTiming
from mlsched.model import BatchRule, ElasticSpec, Event, JobState, MetricGoal, TargetMetricStop

# SLAQ moves a GPU only when the epoch (a lease) outweighs the pause it assumes for a resize
# before one is measured (25 s, controller/policy/slaq.py): a grow from 1 to 2 GPUs pays when
# 2 (L - 25) > L, so the lease here is 60 s.
SLAQ_TIMING = ClusterTiming(
    lease_s=60.0,
    cycle_s=0.5,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=10.0,
    suspend_grace_s=60.0,
)
PREDICTION = re.compile(r"reduction over the next 60 s ([0-9.]+) on (\d) GPUs against ([0-9.]+)")


def loss_job(example_spec, name: str, gpus: int, *args: str):
    """A DDP example job that stops on a loss it never reaches (SLAQ tracks the loss), elastic
    over 1 to 2 GPUs with a fixed global batch of 128."""
    stop = TargetMetricStop("loss", 1e-6, MetricGoal.MINIMIZE, 10**7)
    spec = example_spec(name, "ddp_classifier.py", gpus, stop, "--eval-every", "20", *args)
    return replace(spec, batch_size=128, elastic=ElasticSpec(1, 2, BatchRule.FIXED_GLOBAL))


def job_events(client, job_id: str) -> list[Event]:
    return list(client.events(job_id=job_id))


@pytest.mark.timeout(900)
def test_slaq_moves_a_gpu_at_a_lease_boundary_to_the_job_whose_loss_still_falls(
    make_cluster, example_spec, wait_job
):
    # One node of 3 GPUs, started once both jobs wait: they launch in one cycle, so their
    # leases end at the same boundary. "plateau" (a 4-unit model, a large learning rate) has
    # learned what it can within the first lease; "falling" (a small learning rate) has not.
    cluster = make_cluster(SLAQ_TIMING, nodes={}, policy="slaq")
    plateau = loss_job(example_spec, "plateau", 2, "--hidden", "4", "--lr", "0.01")
    falling = loss_job(example_spec, "falling", 1, "--lr", "0.0001")
    with cluster.client() as client:
        ids = [client.submit(spec).id for spec in (plateau, falling)]
        cluster.start_agent("node-a", gpus=3)
        cluster.wait_for_nodes({"node-a"})
        grown = cluster.wait_for_event(
            lambda e: e.kind == "job_resized" and e.message.startswith("1 -> 2 GPUs"), 600.0
        )
        shrunk = cluster.wait_for_event(
            lambda e: e.kind == "job_resized" and e.message.startswith("2 -> 1 GPUs"), 600.0
        )
        assert (shrunk.job_id, grown.job_id) == tuple(ids)
        orders = {}
        for job_id in ids:
            events = job_events(client, job_id)
            launched = next(e for e in events if e.kind == "job_state" and "launching" in e.message)
            order = next(e for e in events if e.kind == "resize_ordered")
            assert order.time >= launched.time + SLAQ_TIMING.lease_s  # at its lease boundary
            assert "by suspend/resume" in order.message
            orders[job_id] = order
            # the move resumed from the checkpoint the suspension saved
            job = wait_job(
                cluster, client, job_id, lambda j: j.resumes and j.resumes[-1].restored_step
            )
            assert job.resumes[-1].restored_step == job.resumes[-1].checkpoint_step > 0
            tasks = client.get(job_id)[1]
            text = render.describe(job, tasks, render.resize_events(job_events(client, job_id)))
            assert "predicted normalised loss reduction" in text
            assert re.search(r"done: \d -> \d GPUs, global batch 128, by suspend/resume in", text)
        # the prediction behind the move: the GPU was worth more to the falling job than the
        # second one was to the plateaued job
        grow = PREDICTION.search(orders[grown.job_id].message)
        keep = PREDICTION.search(orders[shrunk.job_id].message)
        assert grow and keep and (grow[2], keep[2]) == ("2", "1")
        assert float(grow[1]) - float(grow[3]) > float(keep[3]) - float(keep[1])
        for job_id in ids:
            client.cancel(job_id)
        for job_id in ids:
            wait_job(cluster, client, job_id, lambda j: j.state is JobState.CANCELLED)


@pytest.mark.timeout(900)
def test_ones_changes_batch_sizes_in_place_and_the_jobs_reach_their_target(
    make_cluster, example_spec, wait_job
):
    timing = replace(SLAQ_TIMING, lease_s=30.0)  # ONES renews every lease itself
    cluster = make_cluster(timing, nodes={"node-a": 2}, policy="ones")
    elastic = ElasticSpec(1, 2, BatchRule.SCHEDULER, max_batch_size=512, linear_lr=True)
    stop = TargetMetricStop("accuracy", 0.95, MetricGoal.MAXIMIZE, 10**6)
    specs = [
        replace(
            example_spec(
                name, "ddp_classifier.py", 1, stop, "--train-size", "4000", "--seed", seed
            ),
            batch_size=64,
            elastic=elastic,
        )
        for name, seed in (("ones-a", "1"), ("ones-b", "2"))
    ]
    with cluster.client() as client:
        ids = [client.submit(spec).id for spec in specs]
        changed = cluster.wait_for_event(
            lambda e: e.kind == "job_resized" and "by in-place batch" in e.message, 600.0
        )
        for job_id in ids:
            job = wait_job(cluster, client, job_id, lambda j: j.state.terminal, 600.0)
            assert job.state is JobState.COMPLETED
            assert job.metrics["accuracy"] >= 0.95
        job, tasks = client.get(changed.job_id)
        events = render.resize_events(job_events(client, changed.job_id))
        order = next(e for e in events if e.kind == "resize_ordered")
        assert "by in-place batch: ones" in order.message
        text = render.describe(job, tasks, events)
        assert re.search(r"done: (\d) -> \1 GPUs, global batch \d+, by in-place batch in", text)
