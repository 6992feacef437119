"""ControllerState: queries, state changes, events and restarting from the store."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from controller.clock import ManualClock, SystemClock
from controller.commands import KillCommand
from controller.states import InvalidTransition
from mlsched.model import JobState, Progress, TaskState

T0 = 1_000.0


# --- queries ---------------------------------------------------------------------------------


def test_busy_gpus_counts_only_live_tasks(cluster):
    c = cluster
    c.add_node("n1", 4)
    c.add_node("n2", 4)
    running = c.submit(gpus=3)  # best fit tie: n1 GPUs 0-2
    c.cycle()
    c.report_all(running.id, TaskState.RUNNING)
    spanning = c.submit(gpus=4)  # n2 GPUs 0-3
    c.cycle()
    assert c.state.busy_gpus() == {"n1": {0, 1, 2}, "n2": {0, 1, 2, 3}}
    c.report(spanning.id, 2, TaskState.FAILED)  # fails the job; other ranks still live
    assert spanning.state is JobState.FAILED
    assert c.state.busy_gpus() == {"n1": {0, 1, 2}, "n2": {0, 1, 3}}
    assert [t.rank for t in c.state.live_tasks(spanning.id)] == [0, 1, 3]
    assert sorted((t.job_id, t.rank) for t in c.state.tasks_on_node("n1")) == [
        (running.id, 0),
        (running.id, 1),
        (running.id, 2),
    ]
    assert c.state.live_tasks("j-nope") == [] and c.state.job_tasks("j-nope") == []
    assert c.state.job("j-nope") is None


def test_schedulable_nodes_are_alive_connected_and_sorted(cluster):
    c = cluster
    for node_id in ["n3", "n1", "n2", "n4"]:
        c.add_node(node_id, 1)
    c.events.disconnected("n2")
    c.state.nodes["n4"].alive = False
    assert [n.id for n in c.state.schedulable_nodes()] == ["n1", "n3"]


# --- state changes and events ----------------------------------------------------------------


def test_set_job_state_persists_and_records_an_event(cluster):
    c = cluster
    job = c.submit()
    with c.state.lock:
        c.state.set_job_state(job, JobState.CANCELLED, "no longer needed")
    assert job.state is JobState.CANCELLED
    assert job.message == "no longer needed"
    assert job.end_time == T0
    assert c.store.load().jobs[job.id].state is JobState.CANCELLED
    event = c.store.events_after(0, job.id)[-1]
    assert (event.kind, event.message) == ("job_state", "PENDING -> CANCELLED: no longer needed")
    assert c.state.last_event_seq == event.seq


def test_set_job_state_without_message_keeps_the_old_one(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    old = job.message
    with c.state.lock:
        c.state.set_job_state(job, JobState.RUNNING)
    assert job.message == old
    assert c.store.events_after(0, job.id)[-1].message == "STARTING -> RUNNING"


def test_terminal_state_clears_the_lease(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    assert job.lease_expires_at == T0 + 100.0
    c.advance(7.0)
    with c.state.lock:
        c.state.set_job_state(job, JobState.FAILED, "x")
    assert job.lease_expires_at is None
    assert job.end_time == T0 + 7.0


def test_forbidden_state_change_raises_and_changes_nothing(cluster):
    c = cluster
    job = c.submit()
    events = c.store.events_after(0)
    with c.state.lock, pytest.raises(InvalidTransition):
        c.state.set_job_state(job, JobState.RUNNING, "skip ahead")
    assert job.state is JobState.PENDING
    assert job.message == ""
    assert c.store.load().jobs[job.id].state is JobState.PENDING
    assert c.store.events_after(0) == events


def test_emit_wakes_up_watchers(cluster):
    c = cluster
    woke = threading.Event()
    ready = threading.Event()

    def watch() -> None:
        with c.state.lock:
            ready.set()
            if c.state.changed.wait(timeout=5.0):
                woke.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert ready.wait(5.0)
    with c.state.lock:
        event = c.state.emit("custom", "hello", job_id="j-1", node_id="n1")
    watcher.join(5.0)
    assert woke.is_set()
    assert (event.kind, event.message, event.job_id, event.node_id, event.time) == (
        "custom",
        "hello",
        "j-1",
        "n1",
        T0,
    )
    assert c.state.last_event_seq == event.seq


# --- restart ---------------------------------------------------------------------------------


def test_restart_from_the_same_file_recovers_jobs_tasks_and_nodes(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 2)
    first.add_node("n2", 2)
    job = first.submit(gpus=2)
    first.cycle()
    assert [t.node_id for t in first.tasks(job.id)] == ["n1", "n1"]
    first.report(job.id, 0, TaskState.RUNNING, checkpoint_step=10)
    first.report(job.id, 1, TaskState.RUNNING)
    first.events.progress("n1", job.id, 0, 1, Progress(42, 0.5, {"accuracy": 0.6}, 0.1, 32, T0))
    waiting = first.submit(gpus=4)
    first.advance(10.0)
    assert job.state is JobState.RUNNING
    events_before = first.store.events_after(0)

    # The controller dies without closing anything; a new one starts on the same file.
    clock = ManualClock(first.clock.now() + 5.0)
    second = make_cluster(path, clock=clock)
    assert second.state.jobs == first.state.jobs
    assert second.state.jobs[job.id] is not job
    assert second.state.tasks == first.state.tasks
    assert second.state.jobs[job.id].iteration == 42
    assert second.state.jobs[job.id].checkpoint_step == 10
    assert sorted(second.state.nodes) == ["n1", "n2"]
    for node_id in ("n1", "n2"):
        restored = second.state.nodes[node_id]
        assert restored == replace(first.state.nodes[node_id], last_seen=T0 + 15.0, metrics=None)
    assert second.store.events_after(0) == events_before

    # No agent has reconnected yet: nothing is schedulable, nothing launched, nothing lost.
    assert second.state.connected == set()
    assert second.state.schedulable_nodes() == []
    second.cycle()
    assert second.sink.sent == []
    assert second.state.jobs[waiting.id].state is JobState.PENDING
    assert second.state.jobs[job.id].state is JobState.RUNNING

    # n1's agent re-registers with its running tasks: the job keeps running untouched.
    reports = [second.report_of(job.id, r, TaskState.RUNNING) for r in (0, 1)]
    second.add_node("n1", 2, reports=reports)
    assert second.state.connected == {"n1"}
    assert second.state.jobs[job.id].state is JobState.RUNNING
    assert second.sink.of(KillCommand) == []
    assert second.store.events_after(0)[-1].seq > events_before[-1].seq

    # n2 never comes back: a heartbeat timeout after the restart it is declared dead.
    second.advance(31.0, heartbeat=True)
    second.cycle()
    assert second.state.nodes["n1"].alive
    assert not second.state.nodes["n2"].alive


def test_restart_after_a_clean_close(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 1)
    job = first.submit()
    first.cycle()
    first.report(job.id, 0, TaskState.RUNNING)
    first.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=77)
    first.store.close()

    second = make_cluster(path)
    restored = second.state.jobs[job.id]
    assert restored.state is JobState.SUSPENDED
    assert restored.resumes == job.resumes
    assert restored.resumes[0].checkpoint_step == 77
    second.add_node("n1", 1)
    second.cycle()
    assert restored.state is JobState.STARTING
    assert restored.attempt == 2


def test_restarted_controller_loses_tasks_of_nodes_that_stay_away(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 1)
    job = first.submit()
    first.cycle()
    first.report(job.id, 0, TaskState.RUNNING)

    second = make_cluster(path, clock=ManualClock(T0 + 500.0))
    second.advance(30.0)
    second.cycle()
    assert second.state.nodes["n1"].alive  # a full timeout from the restart, not before
    second.advance(1.0)
    second.cycle()
    restored = second.state.jobs[job.id]
    assert second.state.job_tasks(job.id)[0].state is TaskState.LOST
    assert restored.state is JobState.SUSPENDED


def test_system_clock_tells_the_time():
    before = time.time()
    now = SystemClock().now()
    assert before <= now <= time.time()


def test_manual_clock_moves_only_forward():
    clock = ManualClock(5.0)
    clock.advance(2.5)
    assert clock.now() == 7.5
    with pytest.raises(ValueError):
        clock.advance(-1.0)
    assert clock.now() == 7.5
