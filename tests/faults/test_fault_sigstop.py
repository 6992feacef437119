"""A SIGSTOP'd agent cannot fence its tasks: their shims do (issue 11 #2)."""

from __future__ import annotations

import signal

import pytest
from faultkit import all_events, exit_record, spec, terminal_states, trainers, wait_gone, wait_job

from mlsched.model import JobState

pytestmark = pytest.mark.integration


def test_stopped_agents_trainer_exits_before_the_next_attempt_trains(cluster_factory):
    cluster = cluster_factory()
    with cluster.client("alice") as client:
        job = client.submit(spec("stopped"))
        running = wait_job(
            cluster, client, job.id, lambda j: j.state is JobState.RUNNING and j.checkpoint_step > 0
        )
        victim = running.node_history[0]
        [old] = [t for t in trainers(cluster) if t.job_id == job.id]
        assert old.attempt == 1
        seq = max(e.seq for e in all_events(client))
        cluster.agents[victim].send_signal(signal.SIGSTOP)
        cluster.wait_for_event(
            lambda e: e.kind == "node_dead" and e.node_id == victim, 60, after_seq=seq
        )
        wait_gone(old.pid, 60)  # the shim fences itself; its agent is still stopped
        at_exit = max(e.seq for e in all_events(client))
        assert [t for t in trainers(cluster) if t.job_id == job.id] == []
        record = exit_record(cluster, victim, job.id, 0, 1)
        assert record["outcome"] == "suspended"
        assert record["reason"].startswith("self-fencing: no word from the node agent")
        # The next attempt starts (and trains) only after the old process is gone.
        resumed = wait_job(
            cluster,
            client,
            job.id,
            lambda j: j.attempt == 2 and j.checkpoint_step > record["checkpoint_step"],
            timeout_s=120,
        )
        events = all_events(client)
        restarts = [e for e in events if e.job_id == job.id and "-> STARTING" in e.message]
        assert len(restarts) == 2 and restarts[1].seq > at_exit
        assert victim not in resumed.node_history[1:]
        assert resumed.resumes[0].restored_step >= record["checkpoint_step"] > 0
        client.stop(job.id, "enough")
        done = wait_job(cluster, client, job.id, lambda j: j.state.terminal)
        cluster.agents[victim].send_signal(signal.SIGCONT)
        ends = terminal_states(all_events(client), job.id)
    assert done.state is JobState.COMPLETED, done.message
    assert ends == ["COMPLETED"]
