"""ONES on a real local cluster (issue 15 item 5): batch sizes changed inside the running
processes, and a job grown and shrunk in place without restarting rank 0. Real controller,
agents and DDP training processes. The jobs aim at a loss they never reach: each test waits for
the change it is about (an event), then stops the jobs (`mlsched stop`: a final checkpoint,
COMPLETED), so no outcome depends on how fast this machine trains."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from elastic_kit import (
    AGENT_FLAGS,
    ARGS,
    SLAQ_TIMING,
    UNREACHED_LOSS,
    describe,
    job_events,
    json_lines,
)

from mlsched import render
from mlsched.model import BatchRule, ElasticSpec, JobState

TIMING = replace(SLAQ_TIMING, lease_s=30.0)  # ONES renews every lease itself
ELASTIC = ElasticSpec(1, 2, BatchRule.SCHEDULER, max_batch_size=512, linear_lr=True)


def stop_all(cluster, client, wait_job, ids: list[str]) -> None:
    """Stop the jobs and wait until each has COMPLETED from its final checkpoint."""
    for job_id in ids:
        client.stop(job_id, "the test has seen the change")
    for job_id in ids:
        job = wait_job(cluster, client, job_id, lambda j: j.state.terminal, 600.0)
        assert job.state is JobState.COMPLETED, (job_id, job.state, job.message)


@pytest.mark.timeout(900)
def test_ones_changes_a_batch_size_in_place(make_cluster, example_spec, wait_job):
    # Two jobs of one GPU each on a node of 4: ONES deploys a schedule with a new batch size for
    # a job once every running job has finished an epoch (4,000 samples) and keeps its GPUs,
    # so the change happens inside the running processes.
    cluster = make_cluster(TIMING, nodes={"node-a": 4}, policy="ones", agent_flags=AGENT_FLAGS)
    specs = [
        replace(
            example_spec(name, "ddp_classifier.py", 1, UNREACHED_LOSS, *ARGS, "--seed", seed),
            batch_size=64,
            elastic=ELASTIC,
        )
        for name, seed in (("ones-a", "1"), ("ones-b", "2"))
    ]
    with cluster.client() as client:
        ids = [client.submit(spec).id for spec in specs]
        changed = cluster.wait_for_event(
            lambda e: e.kind == "job_resized" and "by in-place batch" in e.message, 600.0
        )
        stop_all(cluster, client, wait_job, ids)
        events = render.resize_events(job_events(client, changed.job_id))
        order = next(e for e in events if "by in-place batch" in e.message)
        assert order.kind == "resize_ordered" and order.message.endswith("in-place batch: ones")
        text = describe(cluster, changed.job_id)
        assert re.search(r"done: (\d) -> \1 GPUs, global batch \d+, by in-place batch in", text)


@pytest.mark.timeout(900)
def test_ones_grows_and_shrinks_a_job_in_place_without_restarting_rank_0(
    make_cluster, example_spec, wait_job
):
    # One node of 2 GPUs. ONES starts "first" on one GPU and doubles it after an epoch; the
    # script follows regroups (elastic_classifier.py), so the grow is a RegroupTask. A second
    # job then takes one of the GPUs back: the shrink is in place too.
    cluster = make_cluster(TIMING, nodes={"node-a": 2}, policy="ones", agent_flags=AGENT_FLAGS)

    def spec(name: str, script: str, seed: str):
        base = example_spec(
            name, script, 1, UNREACHED_LOSS, *ARGS, "--seed", seed, "--eval-every", "20"
        )
        return replace(base, batch_size=64, elastic=ELASTIC)

    def resized(job_id: str, change: str):
        return lambda e: (
            e.kind in ("job_resized", "resize_abandoned")
            and e.job_id == job_id
            and (e.kind == "resize_abandoned" or e.message.startswith(change))
        )

    with cluster.client() as client:
        first = client.submit(spec("first", "elastic_classifier.py", "1")).id
        grown = cluster.wait_for_event(resized(first, "1 -> 2 GPUs"), 600.0)
        assert grown.kind == "job_resized" and "by in-place regroup in" in grown.message
        second = client.submit(spec("second", "ddp_classifier.py", "2")).id
        shrunk = cluster.wait_for_event(resized(first, "2 -> 1 GPUs"), 600.0, grown.seq)
        assert shrunk.kind == "job_resized" and "by in-place regroup in" in shrunk.message
        stop_all(cluster, client, wait_job, [first, second])
        job, _ = client.get(first)
        assert job.attempt == 1 and job.suspensions == 0  # never restarted
        rank0 = json_lines(client.logs(first, 0).content)
        assert len({line["pid"] for line in rank0}) == 1  # one process throughout
        assert [line["event"] for line in rank0 if line["event"] != "first_step"][:1] == ["started"]
        regroups = [line for line in rank0 if line["event"] == "regrouped"]
        assert [line["world_size"] for line in regroups][:2] == [2, 1]
        steps = [line["step"] for line in rank0 if "step" in line]
        assert steps == sorted(steps) and steps[-1] > regroups[1]["step"]  # the count goes on
        rank1 = [line["event"] for line in json_lines(client.logs(first, 1).content)]
        assert rank1[:1] == ["joined"] and "left" in rank1
        text = describe(cluster, first)
        assert re.search(r"done: 1 -> 2 GPUs, global batch \d+, by in-place regroup in", text)
        assert re.search(r"done: 2 -> 1 GPUs, global batch \d+, by in-place regroup in", text)
