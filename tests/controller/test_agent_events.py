"""AgentEvents: registration and reconciliation, heartbeats, task status and progress."""

from __future__ import annotations

from dataclasses import replace

from controller import lifecycle
from controller.commands import (
    AckCommand,
    KillCommand,
    LaunchCommand,
    SuspendCommand,
    TaskRef,
    TaskReport,
)
from mlsched.model import GpuInfo, JobState, NodeMetrics, Progress, TaskState

T0 = 1_000.0


def running_on(c, node: str | None = None, gpus: int = 1):
    """Submit a job, schedule it and report all its tasks running."""
    job = c.submit(gpus=gpus)
    c.cycle()
    assert job.state is JobState.STARTING
    if node is not None:
        assert {t.node_id for t in c.tasks(job.id)} == {node}
    c.report_all(job.id, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    return job


def progress(iteration: int, loss: float, **metrics: float) -> Progress:
    return Progress(iteration, loss, dict(metrics), 0.25, 64, T0)


# --- registration ----------------------------------------------------------------------------


def test_register_records_and_persists_the_node(cluster):
    c = cluster
    c.advance(3.0)
    node = c.add_node("n1", 2)
    assert c.state.nodes["n1"] is node
    assert node.alive and node.last_seen == T0 + 3.0
    assert c.state.connected == {"n1"}
    assert [n.id for n in c.state.schedulable_nodes()] == ["n1"]
    assert c.store.load().nodes["n1"] == replace(node, metrics=None)
    [event] = c.store.events_after(0)
    assert (event.kind, event.node_id, event.message) == (
        "node_registered",
        "n1",
        "registered with 2 GPUs at n1.cluster.local",
    )


def test_re_registration_is_reported_as_such_and_virtual_gpus_are_named(cluster):
    c = cluster
    c.add_node("n1", 2)
    node = replace(c.node("n1", 2), gpus=(GpuInfo(0, "virtual", True), GpuInfo(1, "virtual", True)))
    c.events.register(node, [])
    assert (
        c.store.events_after(0)[-1].message
        == "re-registered with 2 virtual GPUs at n1.cluster.local"
    )


def test_re_registration_replaces_the_node_description(cluster):
    c = cluster
    c.add_node("n1", 1, address="10.0.0.1")
    c.events.disconnected("n1")
    c.add_node("n1", 1, address="10.0.0.99")
    assert c.state.nodes["n1"].address == "10.0.0.99"
    assert c.store.load().nodes["n1"].address == "10.0.0.99"
    job = c.submit()
    c.cycle()
    [(_, launch)] = c.sink.of(LaunchCommand)
    assert launch.master_addr == "10.0.0.99"
    assert job.state is JobState.STARTING


def test_registering_a_dead_node_brings_it_back(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.advance(31.0)
    c.cycle()
    assert not c.state.nodes["n1"].alive
    c.add_node("n1", 1)
    assert c.state.nodes["n1"].alive
    job = c.submit()
    c.cycle()
    assert job.state is JobState.STARTING


def test_disconnected_node_is_not_schedulable(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.events.disconnected("n1")
    assert c.state.connected == set()
    assert c.state.schedulable_nodes() == []
    assert c.store.events_after(0)[-1].kind == "node_disconnected"
    job = c.submit()
    c.cycle()
    assert job.state is JobState.PENDING


# --- reconciliation on re-registration --------------------------------------------------------


def test_reconciliation_kills_unknown_loses_missing_and_keeps_reported(cluster):
    c = cluster
    c.add_node("n1", 2)
    kept = running_on(c, "n1")
    missing = running_on(c, "n1")
    c.sink.clear()

    ghost = TaskRef("j-ghost", 0, 1)
    c.add_node(
        "n1",
        2,
        reports=[
            c.report_of(kept.id, 0, TaskState.RUNNING),
            TaskReport(ghost, TaskState.RUNNING),
        ],
    )
    assert kept.state is JobState.RUNNING
    assert c.task(kept.id).state is TaskState.RUNNING
    assert c.task(missing.id).state is TaskState.LOST
    assert c.task(missing.id).message == "agent no longer knows this task"
    assert missing.state is JobState.SUSPENDED
    assert c.sink.sent == [("n1", KillCommand(ghost, "not a current task of this cluster"))]
    # The lost job can run again right away on the freed GPU.
    c.cycle()
    assert missing.state is JobState.STARTING
    assert missing.attempt == 2


def test_ended_report_at_registration_ends_the_task_and_is_acked(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.sink.clear()
    ended = c.report_of(job.id, 0, TaskState.COMPLETED, checkpoint_step=1000)
    c.add_node("n1", 1, reports=[ended])
    assert job.state is JobState.COMPLETED
    assert job.checkpoint_step == 1000
    assert c.sink.sent == [("n1", AckCommand(TaskRef(job.id, 0, 1)))]
    ended_events = [e for e in c.store.events_after(0, job.id) if e.kind == "task_ended"]
    assert len(ended_events) == 1

    # The agent did not get the ack and reports the same end again: just another ack.
    c.sink.clear()
    c.add_node("n1", 1, reports=[ended])
    assert job.state is JobState.COMPLETED
    assert c.sink.sent == [("n1", AckCommand(TaskRef(job.id, 0, 1)))]
    assert len([e for e in c.store.events_after(0, job.id) if e.kind == "task_ended"]) == 1


def test_repeated_ended_status_is_idempotent(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.report(job.id, 0, TaskState.FAILED, exit_code=3)
    assert job.state is JobState.FAILED and job.failures == 1
    c.sink.clear()
    c.report(job.id, 0, TaskState.FAILED, exit_code=3)
    assert job.failures == 1
    assert c.sink.sent == [("n1", AckCommand(TaskRef(job.id, 0, 1)))]


def test_reports_of_a_stale_attempt_are_killed_or_acked(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.report(job.id, 0, TaskState.LOST)  # the agent lost it; it is requeued and relaunched
    c.cycle()
    assert job.attempt == 2
    c.sink.clear()
    old = TaskRef(job.id, 0, 1)
    c.events.task_status("n1", TaskReport(old, TaskState.RUNNING))
    c.events.task_status("n1", TaskReport(old, TaskState.KILLED))
    assert c.sink.sent == [
        ("n1", KillCommand(old, "not a current task of this cluster")),
        ("n1", AckCommand(old)),
    ]
    assert c.task(job.id).state is TaskState.LAUNCHING  # the current attempt is untouched


def test_report_from_the_wrong_node_is_killed(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_on(c, "n1")
    c.sink.clear()
    ref = TaskRef(job.id, 0, 1)
    c.events.task_status("n2", TaskReport(ref, TaskState.RUNNING))
    c.events.task_status("n2", TaskReport(ref, TaskState.COMPLETED))
    assert c.sink.sent == [
        ("n2", KillCommand(ref, "not a current task of this cluster")),
        ("n2", AckCommand(ref)),
    ]
    assert job.state is JobState.RUNNING


def test_task_given_up_but_still_running_is_killed(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.advance(31.0)
    c.cycle()  # n1 declared dead: the task is LOST
    assert c.task(job.id).state is TaskState.LOST
    c.sink.clear()
    c.add_node("n1", 1, reports=[c.report_of(job.id, 0, TaskState.RUNNING)])
    assert c.sink.sent == [("n1", KillCommand(TaskRef(job.id, 0, 1), "task already LOST"))]
    # Its later end is acknowledged without changing anything.
    c.sink.clear()
    c.report(job.id, 0, TaskState.KILLED)
    assert c.sink.sent == [("n1", AckCommand(TaskRef(job.id, 0, 1)))]
    assert c.task(job.id).state is TaskState.LOST


def test_registration_repeats_pending_kills_and_suspends(cluster):
    c = cluster
    c.add_node("n1", 2)
    cancelling = running_on(c, "n1")
    suspending = running_on(c, "n1")
    c.jobs.cancel("alice", cancelling.id)
    with c.state.lock:
        lifecycle.suspend(c.state, suspending, "lease expired")
    c.sink.clear()
    c.add_node(
        "n1",
        2,
        reports=[
            c.report_of(cancelling.id, 0, TaskState.RUNNING),
            c.report_of(suspending.id, 0, TaskState.RUNNING),
        ],
    )
    assert sorted(c.sink.sent, key=lambda item: item[1].task.job_id) == sorted(
        [
            ("n1", KillCommand(TaskRef(cancelling.id, 0, 1), "cancelled by alice")),
            ("n1", SuspendCommand(TaskRef(suspending.id, 0, 1), 10.0, "lease expired")),
        ],
        key=lambda item: item[1].task.job_id,
    )
    assert cancelling.state is JobState.CANCELLING
    assert suspending.state is JobState.SUSPENDING


def test_registration_with_a_task_of_another_node(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_on(c, "n1")
    c.sink.clear()
    c.add_node("n2", 1, reports=[c.report_of(job.id, 0, TaskState.RUNNING)])
    assert c.sink.sent == [
        ("n2", KillCommand(TaskRef(job.id, 0, 1), "not a current task of this cluster"))
    ]
    assert c.task(job.id).state is TaskState.RUNNING


# --- heartbeats ------------------------------------------------------------------------------


def test_heartbeat_updates_last_seen_and_metrics(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.advance(12.0)
    metrics = NodeMetrics(T0 + 12.0, 33.0, 1 << 30, 4 << 30, 100.0, 200.0)
    c.events.heartbeat("n1", metrics)
    assert c.state.nodes["n1"].last_seen == T0 + 12.0
    assert c.state.nodes["n1"].metrics == metrics
    c.advance(1.0)
    c.events.heartbeat("n1")
    assert c.state.nodes["n1"].metrics == metrics  # kept when none is sent
    assert c.state.nodes["n1"].last_seen == T0 + 13.0


def test_heartbeat_from_an_unknown_node_is_ignored(cluster):
    cluster.events.heartbeat("nobody", None)
    assert cluster.state.nodes == {}


def test_task_status_counts_as_a_heartbeat(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.advance(25.0)
    c.report(job.id, 0, TaskState.RUNNING)
    c.advance(25.0)
    c.cycle()
    assert c.state.nodes["n1"].alive


# --- task status -----------------------------------------------------------------------------


def test_job_runs_once_every_task_reports_running(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 2)
    job = c.submit(gpus=3)
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.report(job.id, 2, TaskState.RUNNING)
    assert job.state is JobState.STARTING
    c.report(job.id, 1, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    c.report(job.id, 1, TaskState.RUNNING)  # repeated: nothing new
    states = [e.message for e in c.store.events_after(0, job.id) if e.kind == "job_state"]
    assert states[-1] == "STARTING -> RUNNING: all tasks running"
    assert len(states) == 2
    assert [t.state for t in c.store.load().tasks[job.id]] == [TaskState.RUNNING] * 3


def test_checkpoint_steps_only_move_forward(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = running_on(c, "n1", gpus=2)
    c.report(job.id, 1, TaskState.RUNNING, checkpoint_step=300)
    assert (c.task(job.id, 1).checkpoint_step, job.checkpoint_step) == (300, 300)
    c.report(job.id, 0, TaskState.RUNNING, checkpoint_step=200)
    assert (c.task(job.id, 0).checkpoint_step, job.checkpoint_step) == (200, 300)
    c.report(job.id, 1, TaskState.RUNNING, checkpoint_step=100)
    assert c.task(job.id, 1).checkpoint_step == 300
    assert c.store.load().jobs[job.id].checkpoint_step == 300


def test_restored_step_of_rank_0_is_recorded_on_the_job(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = c.submit(gpus=2)
    c.cycle()
    c.report(job.id, 1, TaskState.RUNNING, restored_step=50)
    assert c.task(job.id, 1).restored_step == 50
    assert job.restored_step == 0  # only rank 0 speaks for the job
    c.report(job.id, 0, TaskState.RUNNING, restored_step=40)
    assert job.restored_step == 40
    assert job.resumes == []  # a first attempt has no resume record to fill in
    restored = [e for e in c.store.events_after(0, job.id) if e.kind == "job_restored"]
    assert [(e.message, e.node_id) for e in restored] == [("resumed from step 40", "n1")]


def test_restored_step_completes_the_resume_record(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=120)
    assert job.state is JobState.SUSPENDED
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING, restored_step=120)
    assert job.resumes[0].restored_step == 120
    assert c.store.load().jobs[job.id].resumes[0].restored_step == 120


# --- progress --------------------------------------------------------------------------------


def test_progress_of_rank_0_updates_the_job(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = running_on(c, "n1", gpus=2)
    c.events.progress("n1", job.id, 0, 1, progress(100, 0.5, accuracy=0.7))
    assert job.iteration == 100
    assert job.metrics == {"accuracy": 0.7, "loss": 0.5}
    c.events.progress("n1", job.id, 0, 1, progress(200, 0.25, top5=0.9))
    assert job.iteration == 200
    assert job.metrics == {"accuracy": 0.7, "top5": 0.9, "loss": 0.25}
    stored = c.store.load().jobs[job.id]
    assert (stored.iteration, stored.metrics) == (200, job.metrics)


def test_progress_from_other_ranks_nodes_or_attempts_is_ignored(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_on(c, "n1", gpus=2)
    c.events.progress("n1", job.id, 1, 1, progress(10, 9.0))  # not rank 0
    c.events.progress("n2", job.id, 0, 1, progress(11, 9.0))  # wrong node
    c.events.progress("n1", job.id, 0, 7, progress(12, 9.0))  # no such attempt
    c.events.progress("n1", "j-nope", 0, 1, progress(13, 9.0))  # no such job
    assert job.iteration == 0
    assert job.metrics == {}


def test_fresh_start_after_a_suspension_without_checkpoint_is_recorded(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.report(job.id, 0, TaskState.SUSPENDED)  # yielded before its first checkpoint
    c.cycle()
    assert job.attempt == 2
    c.report(job.id, 0, TaskState.RUNNING)
    c.report(job.id, 0, TaskState.RUNNING, restored_step=0)  # the trainer: fresh start
    assert job.resumes[0].restored_step == 0


def test_restored_step_is_that_of_the_latest_attempt(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=500)
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING, restored_step=500)
    assert job.restored_step == 500
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=700)
    c.cycle()
    assert job.attempt == 3
    # The checkpoint could not be read on this attempt: the trainer starts from scratch.
    c.report(job.id, 0, TaskState.RUNNING, restored_step=0)
    assert job.restored_step == 0
