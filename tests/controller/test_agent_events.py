"""AgentEvents: registration and reconciliation, heartbeats, task status and progress."""

from __future__ import annotations

from dataclasses import replace

from controller import lifecycle
from controller.agent_events import METRIC_HISTORY_MAX, SR_OVERHEADS_KEPT, thin_history
from controller.clock import ManualClock
from controller.commands import (
    AckCommand,
    KillCommand,
    LaunchCommand,
    SuspendCommand,
    TaskRef,
    TaskReport,
)
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, Launch, Suspend
from controller.policy.fifo import FifoPolicy
from controller.snapshot import build_snapshot
from mlsched.model import (
    GpuInfo,
    JobEstimate,
    JobState,
    MetricGoal,
    NodeMetrics,
    Progress,
    SpeedSample,
    TargetMetricStop,
    TaskState,
)

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


def test_an_attempt_that_ended_while_the_controller_was_away_keeps_its_last_progress(cluster):
    # The progress reports of its last minutes went nowhere; the status the agent repeats at
    # registration carries the newest one, which lands before the job completes.
    c = cluster
    c.add_node("n1", 2)
    job = running_on(c, "n1", gpus=2)
    c.events.progress("n1", job.id, 0, 1, progress(100, 0.5, accuracy=0.7))
    last = progress(1500, 0.125, accuracy=0.9)
    rank1 = c.report_of(job.id, 1, TaskState.COMPLETED, progress=progress(1499, 9.0))
    rank0 = c.report_of(job.id, 0, TaskState.COMPLETED, progress=last)
    c.add_node("n1", 2, reports=[rank1, rank0])
    assert job.state is JobState.COMPLETED
    assert job.iteration == 1500
    assert job.metrics == {"accuracy": 0.9, "loss": 0.125}
    assert c.store.load().jobs[job.id].iteration == 1500


def test_a_status_never_takes_the_job_back_to_older_progress(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.events.progress("n1", job.id, 0, 1, progress(200, 0.25))
    samples = list(job.speed_samples)
    c.events.task_status("n1", c.report_of(job.id, 0, TaskState.RUNNING, progress=progress(150, 1)))
    c.events.task_status("n1", c.report_of(job.id, 0, TaskState.RUNNING, progress=progress(200, 1)))
    assert (job.iteration, job.metrics["loss"], job.speed_samples) == (200, 0.25, samples)
    c.events.task_status("n1", c.report_of(job.id, 0, TaskState.RUNNING, progress=progress(250, 1)))
    assert (job.iteration, job.metrics["loss"]) == (250, 1.0)


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


# --- observations for the estimator ----------------------------------------------------------


class Scripted:
    """Plays the given decisions, one per cycle, then decides nothing."""

    name = "scripted"

    def __init__(self, *decisions: Decision) -> None:
        self.decisions = list(decisions)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        return self.decisions.pop(0) if self.decisions else Decision()


def timed(iteration: int, iteration_time: float, compute: float = 0.0) -> Progress:
    return Progress(iteration, 1.0, {}, iteration_time, 64, T0, compute)


TARGET = TargetMetricStop("accuracy", 0.99, MetricGoal.MAXIMIZE, 10_000)


def test_speed_samples_skip_the_first_report_and_keep_running_means(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = running_on(c, "n1", gpus=2)

    def send(p: Progress, rank: int = 0) -> None:
        c.events.progress("n1", job.id, rank, 1, p)

    send(timed(1, 9.0, 9.0))  # warm-up and restore: not a sample
    assert job.speed_samples == []
    send(timed(2, 0.5, 0.25))
    assert job.speed_samples == [SpeedSample(2, 1, 0.5, 0.25, 1)]
    send(timed(3, 0.75))  # no compute time: its mean stays
    assert job.speed_samples == [SpeedSample(2, 1, 0.625, 0.25, 2)]
    send(timed(4, 1.0, 0.5))  # (0.5 + 0.75 + 1.0) / 3, (0.25 + 0.5) / 2
    assert job.speed_samples == [SpeedSample(2, 1, 0.75, 0.375, 3)]
    send(timed(5, 0.0, 0.5))  # no iteration time: not counted at all
    send(timed(6, -1.0))
    send(timed(7, 5.0, 5.0), rank=1)  # only rank 0 counts
    assert job.speed_samples == [SpeedSample(2, 1, 0.75, 0.375, 3)]
    assert job.iteration_time_s == 1.0
    assert c.store.load().jobs[job.id].speed_samples == job.speed_samples


def test_speed_samples_are_kept_per_allocation_shape(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = c.submit(gpus=2)

    def attempt(placement: tuple[TaskPlacement, ...], times: list[float]) -> None:
        c.scheduler.policy = Scripted(Decision(launch=(Launch(job.id, placement, 100.0),)))
        c.cycle()
        c.report_all(job.id, TaskState.RUNNING)
        node = c.task(job.id).node_id
        for i, iteration_time in enumerate(times):
            c.events.progress(node, job.id, 0, job.attempt, timed(i + 1, iteration_time))
        c.report_all(job.id, TaskState.SUSPENDED)
        assert job.state is JobState.SUSPENDED

    attempt((TaskPlacement(0, "n1", (0,)),), [8.0, 0.5])  # profiling on one GPU
    attempt((TaskPlacement(0, "n1", (0,)), TaskPlacement(1, "n2", (0,))), [8.0, 0.75, 1.25])
    attempt((TaskPlacement(0, "n2", (0,)),), [8.0, 1.0])  # one GPU again, another node
    assert job.speed_samples == [SpeedSample(1, 1, 0.75, 0.0, 2), SpeedSample(2, 2, 1.0, 0.0, 2)]


def test_metric_history_records_new_values_of_the_target_metric(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = c.submit(stopping=TARGET)
    plain = c.submit()  # stops after a number of iterations: no history
    c.cycle()
    for j in (job, plain):
        c.report_all(j.id, TaskState.RUNNING)

    def send(iteration: int, **metrics: float) -> None:
        c.events.progress("n1", job.id, 0, 1, progress(iteration, 1.0, **metrics))
        c.events.progress("n1", plain.id, 0, 1, progress(iteration, 1.0, **metrics))

    send(10, accuracy=0.5)
    send(20, accuracy=0.5)  # the shim repeating the same evaluation: stale
    send(30)  # no accuracy in this report
    send(40, accuracy=0.625, top5=0.75)
    send(35, accuracy=0.75)  # iteration went back (resumed from an older checkpoint)
    send(50, accuracy=float("nan"))
    assert job.metric_history == [(10, 0.5), (40, 0.625)]
    assert plain.metric_history == []
    assert c.store.load().jobs[job.id].metric_history == job.metric_history


def test_thin_history_drops_every_other_point_of_the_oldest_half():
    points = [(i, float(i)) for i in range(1, 6)]
    assert thin_history(points) == [(1, 1.0), (3, 3.0), (4, 4.0), (5, 5.0)]
    assert thin_history([(1, 1.0)]) == [(1, 1.0)]


def test_metric_history_is_capped_keeping_the_first_and_latest_points(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit(stopping=TARGET)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert METRIC_HISTORY_MAX == 256
    for i in range(1, 257):
        c.events.progress("n1", job.id, 0, 1, progress(i, 1.0, accuracy=i / 1000))
    assert len(job.metric_history) == 256
    c.events.progress("n1", job.id, 0, 1, progress(257, 1.0, accuracy=0.257))
    # 257 points: the oldest 128 keep iterations 1, 3, ..., 127; 129..257 all stay.
    expected = [(i, i / 1000) for i in range(1, 128, 2)] + [(i, i / 1000) for i in range(129, 258)]
    assert len(expected) == 193
    assert job.metric_history == expected
    assert c.store.load().jobs[job.id].metric_history == expected


def suspend_by_policy(c, job) -> None:
    c.scheduler.policy = Scripted(Decision(suspend=(Suspend(job.id, "preempted"),)))
    c.cycle()
    assert job.state is JobState.SUSPENDING


def test_suspend_resume_overhead_is_suspension_plus_resumption(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    c.events.progress("n1", job.id, 0, 1, progress(5, 1.0))  # a first attempt: nothing to time
    c.advance(10.0)
    suspend_by_policy(c, job)  # t = 1010
    c.advance(3.0)
    c.report(job.id, 0, TaskState.SUSPENDED)  # t = 1013: suspension 3 s
    assert job.state is JobState.SUSPENDED
    assert job.sr_overheads_s == []
    c.advance(5.0)
    c.scheduler.policy = FifoPolicy()
    c.cycle()  # t = 1018: the resuming launch
    assert job.attempt == 2
    c.advance(2.0)
    c.report(job.id, 0, TaskState.RUNNING, restored_step=0)
    c.advance(4.0)
    c.events.progress("n1", job.id, 0, 2, progress(6, 1.0))  # t = 1024: resumption 6 s
    assert job.sr_overheads_s == [9.0]
    c.advance(1.0)
    c.events.progress("n1", job.id, 0, 2, progress(7, 1.0))  # only the first report counts
    assert job.sr_overheads_s == [9.0]
    assert c.store.load().jobs[job.id].sr_overheads_s == [9.0]
    with c.state.lock:
        [view] = build_snapshot(c.state).active
    assert view.sr_overhead_s == 9.0


def training_since(c, job_id: str) -> float | None:
    with c.state.lock:
        snapshot = build_snapshot(c.state)
    [view] = [v for v in (*snapshot.active, *snapshot.queued) if v.id == job_id]
    return view.training_since


def test_training_time_starts_at_each_attempts_first_progress_report(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")  # launched at T0
    assert training_since(c, job.id) is None  # running, but no step yet
    c.advance(7.0)
    c.events.progress("n1", job.id, 0, 1, progress(1, 1.0))
    c.advance(1.0)
    c.events.progress("n1", job.id, 0, 1, progress(2, 1.0))
    assert training_since(c, job.id) == T0 + 7.0
    assert c.store.load().jobs[job.id].training_started_at == T0 + 7.0
    suspend_by_policy(c, job)
    c.report(job.id, 0, TaskState.SUSPENDED)
    assert training_since(c, job.id) is None  # queued again
    c.scheduler.policy = FifoPolicy()
    c.cycle()
    assert job.attempt == 2
    assert training_since(c, job.id) is None  # the new attempt has not trained yet
    c.advance(5.0)
    c.events.progress("n1", job.id, 0, 2, progress(3, 1.0))
    assert training_since(c, job.id) == T0 + 13.0


def test_only_the_latest_suspend_resume_overheads_are_kept(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    for k in range(SR_OVERHEADS_KEPT + 1):
        suspend_by_policy(c, job)
        c.advance(1.0, heartbeat=True)
        c.report(job.id, 0, TaskState.SUSPENDED)
        c.scheduler.policy = FifoPolicy()
        c.cycle()
        c.advance(float(k), heartbeat=True)
        c.report(job.id, 0, TaskState.RUNNING)
        c.events.progress("n1", job.id, 0, job.attempt, progress(k, 1.0))
    assert job.sr_overheads_s == [1.0 + k for k in range(1, SR_OVERHEADS_KEPT + 1)]


def test_cancelling_drops_the_timing_and_any_suspension_is_timed_from_suspending(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_on(c, "n1")
    suspend_by_policy(c, job)
    c.jobs.cancel("alice", job.id)  # CANCELLING: the timing is dropped with the job
    c.report(job.id, 0, TaskState.KILLED)
    assert job.state is JobState.CANCELLED
    assert c.state.sr_timings == {}

    c.scheduler.policy = FifoPolicy()
    other = running_on(c, "n1")
    # A suspension the controller did not order (the trainer stopped at a lease boundary)
    # still goes through SUSPENDING, so it is timed from then.
    c.advance(2.0)
    c.report(other.id, 0, TaskState.SUSPENDED)
    assert other.state is JobState.SUSPENDED
    assert c.state.sr_timings[other.id].suspension_s == 0.0


def test_observations_and_estimates_survive_a_controller_restart(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 1)
    job = first.submit(stopping=TARGET)
    first.cycle()
    first.report_all(job.id, TaskState.RUNNING)
    for i, t in enumerate([4.0, 0.5, 0.75], start=1):
        first.events.progress("n1", job.id, 0, 1, timed(i, t, t / 2))
    first.events.progress("n1", job.id, 0, 1, progress(10, 1.0, accuracy=0.5))  # 0.25 s
    suspend_by_policy(first, job)
    first.advance(2.0)
    first.report(job.id, 0, TaskState.SUSPENDED)
    first.scheduler.policy = FifoPolicy()
    first.cycle()
    first.advance(3.0)
    first.events.progress("n1", job.id, 0, 2, progress(11, 1.0, accuracy=0.625))
    assert job.sr_overheads_s == [5.0]
    assert job.speed_samples == [SpeedSample(1, 1, 0.5, 0.3125, 3)]
    estimate = JobEstimate("best-effort", 900, 0.5, 445.0, 0.25, "1 GPU on n1", 1_012.0)
    first.scheduler.policy = Scripted(Decision(estimates={job.id: estimate}))
    first.cycle()
    assert job.estimate == estimate

    second = make_cluster(path, clock=ManualClock(first.clock.now() + 5.0))
    restored = second.state.jobs[job.id]
    assert restored == job
    assert restored.speed_samples == job.speed_samples
    assert restored.metric_history == [(10, 0.5), (11, 0.625)]
    assert restored.sr_overheads_s == [5.0]
    assert restored.estimate == estimate
    with second.state.lock:
        [view] = build_snapshot(second.state).active
    assert view.speed_samples == (SpeedSample(1, 1, 0.5, 0.3125, 3),)
    assert view.metric_history == ((10, 0.5), (11, 0.625))
    assert view.sr_overhead_s == 5.0
