"""The scheduling cycle end to end: FIFO policy, lifecycle and simulated agents."""

from __future__ import annotations

import logging
import threading

import pytest

from controller.commands import (
    AckCommand,
    KillCommand,
    LaunchCommand,
    LeaseCommand,
    SuspendCommand,
    TaskRef,
)
from controller.fencing import assumed_margin_s
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, Launch, Renew, Suspend
from controller.policy.fifo import FifoPolicy
from controller.scheduler import Scheduler, SchedulerLoop
from controller.snapshot import build_snapshot
from mlsched.model import JobEstimate, JobState, Progress, ResumeRecord, TaskState

T0 = 1_000.0


def first_step(c, node: str, job_id: str) -> None:
    """Rank 0 reports the attempt's first training step now."""
    attempt = c.tasks(job_id)[0].attempt
    c.events.progress(node, job_id, 0, attempt, Progress(1, 1.0, {}, 0.25, 64, c.clock.now()))


def tp(rank: int, node: str, *gpus: int) -> TaskPlacement:
    return TaskPlacement(rank, node, tuple(gpus))


class StubPolicy:
    """Returns a fixed decision and remembers the snapshots it was shown."""

    name = "stub"

    def __init__(self, decision: Decision | None = None) -> None:
        self.decision = decision if decision is not None else Decision()
        self.snapshots: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.snapshots.append(snapshot)
        return self.decision


def launches(sink) -> list[tuple[str, LaunchCommand]]:
    return sink.of(LaunchCommand)


# --- the full flow ---------------------------------------------------------------------------


def test_submit_run_suspend_resume_complete(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    c.sink.clear()

    # t=0: A (2 GPUs) goes to n1: both nodes have 2 free, the tie goes to n1.
    a = c.submit(gpus=2, name="a")
    assert a.state is JobState.PENDING
    decision = c.cycle()
    assert decision.launch == (Launch(a.id, (tp(0, "n1", 0), tp(1, "n1", 1)), 100.0),)
    assert a.state is JobState.STARTING
    assert [
        (
            n,
            cmd.task,
            cmd.gpu_indices,
            cmd.world_size,
            cmd.local_rank,
            cmd.local_world_size,
            cmd.master_addr,
            cmd.resume,
        )
        for n, cmd in launches(c.sink)
    ] == [
        ("n1", TaskRef(a.id, 0, 1), (0,), 2, 0, 2, "n1.cluster.local", False),
        ("n1", TaskRef(a.id, 1, 1), (1,), 2, 1, 2, "n1.cluster.local", False),
    ]
    port = a.master_port
    assert {cmd.master_port for _, cmd in launches(c.sink)} == {port}

    c.report(a.id, 0, TaskState.RUNNING)
    assert a.state is JobState.STARTING  # rank 1 has not reported yet
    c.report(a.id, 1, TaskState.RUNNING)
    assert a.state is JobState.RUNNING
    first_step(c, "n1", a.id)  # a lease counts training time: A trains from t=0

    # t=10: B goes to n2. t=50: C waits; nobody's lease has expired yet.
    c.advance(10.0, heartbeat=True)
    b = c.submit(gpus=2, name="b")
    c.cycle()
    assert [t.node_id for t in c.tasks(b.id)] == ["n2", "n2"]
    c.report_all(b.id, TaskState.RUNNING)
    first_step(c, "n2", b.id)
    c.advance(40.0, heartbeat=True)
    job_c = c.submit(gpus=2, name="c")
    c.sink.clear()
    assert c.cycle() == Decision()
    assert c.sink.sent == []

    # t=100: A's lease expires (B's at 110). C is the head and fits if A yields: A suspends.
    c.advance(50.0, heartbeat=True)
    c.cycle()
    assert a.state is JobState.SUSPENDING
    assert b.state is JobState.RUNNING
    reason = f"lease expired; yields to {job_c.id}"
    assert c.sink.sent == [
        ("n1", SuspendCommand(TaskRef(a.id, 0, 1), 10.0, reason)),
        ("n1", SuspendCommand(TaskRef(a.id, 1, 1), 10.0, reason)),
    ]
    c.report(a.id, 1, TaskState.SUSPENDED, checkpoint_step=500)
    c.report(a.id, 0, TaskState.SUSPENDED, checkpoint_step=500)
    assert a.state is JobState.SUSPENDED
    assert a.suspensions == 1
    assert a.checkpoint_step == 500
    assert a.resumes == [ResumeRecord(T0 + 100.0, 500, ("n1",))]
    assert c.sink.of(AckCommand) == [
        ("n1", AckCommand(TaskRef(a.id, 1, 1))),
        ("n1", AckCommand(TaskRef(a.id, 0, 1))),
    ]

    # t=101: C (queued at 50) goes before A (queued again at 100) onto n1.
    c.advance(1.0, heartbeat=True)
    c.sink.clear()
    c.cycle()
    assert job_c.state is JobState.STARTING
    assert [t.node_id for t in c.tasks(job_c.id)] == ["n1", "n1"]
    assert a.state is JobState.SUSPENDED
    c.report_all(job_c.id, TaskState.RUNNING)

    # t=110: B's lease expires and A is the head: B yields to A.
    c.advance(9.0, heartbeat=True)
    c.sink.clear()
    c.cycle()
    assert b.state is JobState.SUSPENDING
    assert [type(cmd).__name__ for _, cmd in c.sink.sent] == ["SuspendCommand"] * 2
    c.report_all(b.id, TaskState.SUSPENDED, checkpoint_step=200)
    assert b.state is JobState.SUSPENDED

    # t=111: A resumes on n2 from its checkpoint: attempt 2, resume=True.
    c.advance(1.0, heartbeat=True)
    c.sink.clear()
    c.cycle()
    assert a.state is JobState.STARTING
    assert a.attempt == 2
    assert a.node_history == ["n1", "n2"]
    assert [(n, cmd.task, cmd.resume, cmd.master_addr) for n, cmd in launches(c.sink)] == [
        ("n2", TaskRef(a.id, 0, 2), True, "n2.cluster.local"),
        ("n2", TaskRef(a.id, 1, 2), True, "n2.cluster.local"),
    ]
    assert a.resumes == [ResumeRecord(T0 + 100.0, 500, ("n1",), T0 + 111.0, None, ("n2",))]

    c.report(a.id, 0, TaskState.RUNNING, restored_step=500)
    c.report(a.id, 1, TaskState.RUNNING, restored_step=500)
    assert a.state is JobState.RUNNING
    assert a.restored_step == 500
    assert a.resumes[0].restored_step == 500
    assert "job_restored" in c.event_kinds(a.id)

    # A finishes: rank 1 then rank 0 exit after reaching the stopping criterion.
    c.advance(30.0, heartbeat=True)
    c.report(a.id, 1, TaskState.COMPLETED)
    assert a.state is JobState.RUNNING
    c.report(a.id, 0, TaskState.COMPLETED)
    assert a.state is JobState.COMPLETED
    assert a.end_time == T0 + 141.0
    assert a.first_start_time == T0

    # The history of A, as the events tell it.
    assert [e.message for e in c.store.events_after(0, a.id) if e.kind == "job_state"] == [
        "PENDING -> STARTING: launching attempt 1 on n1:[0], n1:[1]",
        "STARTING -> RUNNING: all tasks running",
        f"RUNNING -> SUSPENDING: {reason}",
        "SUSPENDING -> SUSPENDED: suspended with checkpoint at step 500",
        "SUSPENDED -> STARTING: resuming attempt 2 on n2:[0], n2:[1]",
        "STARTING -> RUNNING: all tasks running",
        "RUNNING -> COMPLETED: reached its stopping criterion",
    ]

    assert a.resumes == [ResumeRecord(T0 + 100.0, 500, ("n1",), T0 + 111.0, 500, ("n2",))]
    assert a.restored_step == 500
    # The store agrees with memory.
    assert c.store.load().jobs[a.id] == a


def test_single_task_job_completes(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.advance(20.0, heartbeat=True)
    c.sink.clear()
    c.report(job.id, 0, TaskState.COMPLETED, checkpoint_step=1000)
    assert job.state is JobState.COMPLETED
    assert job.checkpoint_step == 1000
    assert c.sink.sent == [("n1", AckCommand(TaskRef(job.id, 0, 1)))]
    # Its GPU is free again for the next job.
    nxt = c.submit()
    c.cycle()
    assert nxt.state is JobState.STARTING


def test_failure_without_retries(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.report(job.id, 0, TaskState.FAILED, exit_code=2, message="ImportError")
    assert job.state is JobState.FAILED
    assert job.failures == 1
    assert job.message == "rank 0 on n1 failed (exit 2): ImportError"
    c.sink.clear()
    c.cycle()
    assert c.sink.sent == []  # a failed job is never relaunched


def test_failure_with_retries_relaunches_then_fails(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit(max_retries=1)
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING, checkpoint_step=40)
    c.report(job.id, 0, TaskState.FAILED, exit_code=1, message="NaN loss")
    assert job.state is JobState.SUSPENDED
    assert (job.failures, job.suspensions) == (1, 1)
    assert job.resumes == [ResumeRecord(T0, 40, ("n1",))]

    c.sink.clear()
    c.cycle()
    [(node, launch)] = launches(c.sink)
    assert (node, launch.task, launch.resume) == ("n1", TaskRef(job.id, 0, 2), True)
    c.report(job.id, 0, TaskState.RUNNING)
    c.report(job.id, 0, TaskState.FAILED, exit_code=1, message="NaN loss")
    assert job.state is JobState.FAILED
    assert job.failures == 2


def test_cancel_pending_job(cluster):
    c = cluster
    job = c.submit(user="alice")
    cancelled = c.jobs.cancel("alice", job.id)
    assert cancelled is job
    assert job.state is JobState.CANCELLED
    assert job.message == "cancelled by alice"
    c.add_node("n1", 1)
    c.sink.clear()
    c.cycle()
    assert c.sink.sent == []


def test_cancel_running_job(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = c.submit(gpus=2, user="bob")
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    c.sink.clear()
    c.jobs.cancel("bob", job.id)
    assert job.state is JobState.CANCELLING
    assert c.sink.sent == [
        ("n1", KillCommand(TaskRef(job.id, 0, 1), "cancelled by bob")),
        ("n2", KillCommand(TaskRef(job.id, 1, 1), "cancelled by bob")),
    ]
    # While cancelling, its GPUs stay busy and the policy does not use them.
    other = c.submit()
    c.cycle()
    assert other.state is JobState.PENDING
    c.report(job.id, 0, TaskState.KILLED)
    assert job.state is JobState.CANCELLING
    c.report(job.id, 1, TaskState.KILLED)
    assert job.state is JobState.CANCELLED
    c.cycle()
    assert other.state is JobState.STARTING


# --- applying decisions ----------------------------------------------------------------------


def running_job(c, gpus: int = 1):
    job = c.submit(gpus=gpus)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    return job


def test_expired_lease_that_the_policy_ignores_is_suspended(make_cluster):
    c = make_cluster(policy=FifoPolicy())
    c.add_node("n1", 2)
    expired = running_job(c)
    c.advance(50.0, heartbeat=True)
    fresh = running_job(c)
    c.scheduler.policy = StubPolicy(Decision())
    c.advance(50.0, heartbeat=True)  # t=100: only the first lease has expired
    c.sink.clear()
    c.cycle()
    assert expired.state is JobState.SUSPENDING
    assert expired.message == "lease expired and was not renewed"
    assert fresh.state is JobState.RUNNING
    assert c.sink.sent == [
        ("n1", SuspendCommand(TaskRef(expired.id, 0, 1), 10.0, "lease expired and was not renewed"))
    ]


def test_renewal_extends_the_lease_from_now(make_cluster):
    c = make_cluster()
    c.add_node("n1", 1)
    job = running_job(c)
    c.advance(100.0, heartbeat=True)
    c.scheduler.policy = StubPolicy(Decision(renew=(Renew(job.id, 30.0),)))
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.RUNNING
    assert job.lease_expires_at == T0 + 130.0
    assert c.sink.sent == [("n1", LeaseCommand(TaskRef(job.id, 0, 1), True, T0 + 130.0))]


def test_suspend_wins_over_renew_of_the_same_job(make_cluster):
    c = make_cluster()
    c.add_node("n1", 1)
    job = running_job(c)
    c.advance(100.0, heartbeat=True)
    c.scheduler.policy = StubPolicy(
        Decision(renew=(Renew(job.id, 30.0),), suspend=(Suspend(job.id, "mine"),))
    )
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.SUSPENDING
    assert c.sink.kinds() == ["SuspendCommand"]


def test_decisions_about_jobs_that_are_not_active_are_ignored(make_cluster):
    c = make_cluster()
    c.add_node("n1", 1)
    queued = c.submit(gpus=2)  # never fits
    c.scheduler.policy = StubPolicy(
        Decision(
            renew=(Renew(queued.id, 30.0), Renew("j-missing", 30.0)),
            suspend=(Suspend(queued.id, "x"), Suspend("j-missing", "x")),
        )
    )
    c.sink.clear()
    c.cycle()
    assert queued.state is JobState.PENDING
    assert c.sink.sent == []


@pytest.mark.parametrize(
    ("placement", "why"),
    [
        ((tp(0, "n1", 0),), "GPU 0 of n1 is busy"),
        ((tp(0, "n1", 7),), "n1 has no GPU 7"),
        ((tp(0, "n9", 0),), "n9 is unknown"),
        ((tp(0, "off", 0),), "off is disconnected"),
        ((tp(0, "n1", 1), tp(1, "n1", 1)), "the wrong number of tasks"),
        ((), "an empty placement"),
    ],
)
def test_invalid_launches_are_skipped(make_cluster, placement, why):
    c = make_cluster()
    c.add_node("n1", 2)
    c.add_node("off", 2)
    c.events.disconnected("off")
    busy = running_job(c)
    assert [t.gpu_indices for t in c.tasks(busy.id)] == [(0,)]
    job = c.submit(gpus=1)
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, placement, 100.0),)))
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.PENDING, why
    assert c.sink.sent == []


def test_launch_of_a_job_that_is_not_queued_is_skipped(make_cluster):
    c = make_cluster()
    c.add_node("n1", 2)
    job = running_job(c)
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, (tp(0, "n1", 1),), 100.0),)))
    c.sink.clear()
    c.cycle()
    assert job.attempt == 1
    assert c.sink.sent == []


def test_second_of_two_conflicting_launches_is_skipped(make_cluster):
    c = make_cluster()
    c.add_node("n1", 2)
    first, second = c.submit(), c.submit()
    c.scheduler.policy = StubPolicy(
        Decision(
            launch=(
                Launch(first.id, (tp(0, "n1", 1),), 100.0),
                Launch(second.id, (tp(0, "n1", 1),), 100.0),
            )
        )
    )
    c.cycle()
    assert first.state is JobState.STARTING
    assert second.state is JobState.PENDING


def test_a_multi_node_launch_is_skipped_as_a_whole(make_cluster):
    c = make_cluster()
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    blocker = running_job(c)
    assert c.task(blocker.id).node_id == "n1"
    job = c.submit(gpus=2)
    c.scheduler.policy = StubPolicy(
        Decision(launch=(Launch(job.id, (tp(0, "n2", 0), tp(1, "n1", 0)), 100.0),))
    )
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.PENDING
    assert c.tasks(job.id) == []
    assert c.sink.sent == []


# --- profiling launches on fewer GPUs -----------------------------------------------------------


def test_a_profiling_launch_runs_2_of_4_gpus_and_counts_only_those(make_cluster):
    c = make_cluster()
    c.add_node("n1", 4)
    job = c.submit(gpus=4)
    placement = (tp(1, "n1", 3), tp(0, "n1", 2))  # any order; ranks 0..k-1
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, placement, 100.0),)))
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.STARTING
    assert [(t.rank, t.gpu_indices) for t in c.tasks(job.id)] == [(0, (2,)), (1, (3,))]
    assert [
        (cmd.task.rank, cmd.gpu_indices, cmd.world_size, cmd.local_rank, cmd.local_world_size)
        for _, cmd in launches(c.sink)
    ] == [(0, (2,), 2, 0, 2), (1, (3,), 2, 1, 2)]
    assert c.state.busy_gpus() == {"n1": {2, 3}}
    assert job.message == "launching attempt 1 on n1:[2], n1:[3] (2 of 4 GPUs)"

    c.scheduler.policy = StubPolicy()
    c.report_all(job.id, TaskState.RUNNING)
    c.advance(10.0, heartbeat=True)
    with c.state.lock:
        [view] = build_snapshot(c.state).active
    assert view.attained_gpu_s == 20.0  # 10 s on 2 GPUs, not on the 4 asked for
    c.report_all(job.id, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED
    assert job.attained_gpu_s == 20.0


def test_a_profiling_launch_of_whole_processes_of_two_gpus(make_cluster):
    c = make_cluster()
    c.add_node("n1", 4)
    job = c.submit(gpus=4, gpus_per_process=2)
    placement = (tp(0, "n1", 2, 3),)
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, placement, 100.0),)))
    c.sink.clear()
    c.cycle()
    assert job.state is JobState.STARTING
    [(_, cmd)] = launches(c.sink)
    assert (cmd.gpu_indices, cmd.world_size, cmd.local_world_size) == ((2, 3), 1, 1)


@pytest.mark.parametrize(
    ("gpus", "per_process", "placement", "message"),
    [
        (
            4,
            1,
            tuple(tp(r, "n1", r) for r in range(5)),
            "5 processes placed; the job runs 1 to 4 (4 GPUs, 1 per process)",
        ),
        (4, 1, (), "0 processes placed; the job runs 1 to 4 (4 GPUs, 1 per process)"),
        (
            4,
            2,
            (tp(0, "n1", 0),),
            "rank 0 holds GPUs [0]; every process needs 2 distinct GPU(s)",
        ),
        (
            4,
            2,
            (tp(0, "n1", 0, 0),),
            "rank 0 holds GPUs [0, 0]; every process needs 2 distinct GPU(s)",
        ),
        (
            4,
            2,
            (tp(0, "n1", 0, 1, 2),),
            "rank 0 holds GPUs [0, 1, 2]; every process needs 2 distinct GPU(s)",
        ),
        (4, 1, (tp(1, "n1", 0),), "ranks [1] are not 0..0"),
        (4, 1, (tp(0, "n1", 0), tp(0, "n1", 1)), "ranks [0, 0] are not 0..1"),
        (
            4,
            1,
            (tp(0, "n1", 0), tp(1, "n1", 0)),
            "GPU 0 of n1 is given to more than one process",
        ),
    ],
)
def test_placements_that_do_not_fit_the_job_are_refused(
    make_cluster, caplog, gpus, per_process, placement, message
):
    c = make_cluster()
    c.add_node("n1", 8)
    job = c.submit(gpus=gpus, gpus_per_process=per_process)
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, placement, 100.0),)))
    c.sink.clear()
    with caplog.at_level(logging.ERROR, logger="controller.scheduler"):
        c.cycle()
    assert job.state is JobState.PENDING
    assert c.sink.sent == []
    assert [r.getMessage() for r in caplog.records] == [f"launch of {job.id} refused: {message}"]


# --- estimates -------------------------------------------------------------------------------


def test_estimates_are_kept_on_their_jobs_without_events(make_cluster):
    c = make_cluster()
    c.add_node("n1", 1)
    queued, done = c.submit(gpus=2), c.submit(gpus=1)
    c.jobs.cancel("alice", done.id)
    first = JobEstimate("profiling", 0, 0.0, 300.0, 1.0, "", T0)
    c.scheduler.policy = StubPolicy(
        Decision(estimates={queued.id: first, done.id: first, "j-missing": first})
    )
    events = len(c.store.events_after(0))
    c.cycle()
    assert queued.estimate == first
    assert done.estimate is None  # ended: nothing more to predict
    assert len(c.store.events_after(0)) == events
    assert c.store.load().jobs[queued.id].estimate == first

    second = JobEstimate("best-effort", 1000, 0.5, 500.0, 0.002, "cells 0/1/0/0", T0 + 5)
    c.scheduler.policy = StubPolicy(Decision(estimates={queued.id: second}))
    c.cycle()
    assert queued.estimate == second
    c.scheduler.policy = StubPolicy()
    c.cycle()
    assert queued.estimate == second  # a cycle without one keeps the last
    assert c.store.load().jobs[queued.id].estimate == second


def test_run_cycle_returns_the_decision_and_times_it(make_cluster):
    decision = Decision()
    c = make_cluster(policy=StubPolicy(decision))
    assert c.cycle() is decision
    assert c.scheduler.last_decision_s >= 0.0


# --- liveness --------------------------------------------------------------------------------


def test_silent_node_is_declared_dead_and_its_job_suspended(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING, checkpoint_step=80)

    c.advance(30.0)  # exactly the timeout: still alive
    c.cycle()
    assert c.state.nodes["n1"].alive
    assert c.disconnected == []

    c.advance(0.5)
    c.cycle()
    node = c.state.nodes["n1"]
    assert not node.alive
    assert "n1" not in c.state.connected
    assert c.store.load().nodes["n1"].alive is False
    assert c.disconnected == ["n1"]
    assert c.task(job.id).state is TaskState.LOST
    assert c.task(job.id).message == "node died"
    assert job.state is JobState.SUSPENDED
    assert job.resumes == [ResumeRecord(T0 + 30.5, 80, ("n1",))]
    dead_events = [e for e in c.store.events_after(0) if e.kind == "node_dead"]
    assert [(e.node_id, e.message) for e in dead_events] == [("n1", "no heartbeat for 30 s")]

    # A dead node is declared dead once, and is not used.
    c.advance(100.0)
    c.cycle()
    assert len([e for e in c.store.events_after(0) if e.kind == "node_dead"]) == 1
    assert job.state is JobState.SUSPENDED


def test_job_on_a_dead_node_resumes_elsewhere_after_the_agents_self_fencing_deadline(cluster):
    # Issue 11 #2: the dead node's agent may still run attempt 1 until it fences itself; the
    # job waits for that deadline (here the assumed one: the agent did not say) before
    # attempt 2 starts elsewhere.
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = c.submit(gpus=2)
    c.cycle()
    assert {t.node_id for t in c.tasks(job.id)} == {"n1"}
    c.report_all(job.id, TaskState.RUNNING)
    last_seen = c.state.nodes["n1"].last_seen
    c.advance(31.0)
    c.events.heartbeat("n2")
    c.sink.clear()
    c.cycle()
    assert not c.state.nodes["n1"].alive and c.state.nodes["n2"].alive
    assert job.state is JobState.SUSPENDED and job.attempt == 1  # held: attempt 1 may run
    settings = c.state.settings
    fence_until = (
        last_seen + settings.heartbeat_timeout_s + assumed_margin_s(settings.suspend_grace_s)
    )
    c.clock.advance(fence_until - c.clock.now() - 0.5)
    c.events.heartbeat("n2")
    c.cycle()
    assert job.attempt == 1
    c.advance(0.5, heartbeat=True)
    c.cycle()
    assert "task_fence_expired" in c.event_kinds(job.id)
    assert job.state is JobState.STARTING
    assert job.attempt == 2
    assert job.node_history == ["n1", "n2"]
    # The suspend for the second lost task went to the dead node; the relaunch to n2.
    assert [(n, type(cmd).__name__) for n, cmd in c.sink.sent] == [
        ("n1", "SuspendCommand"),
        ("n2", "LaunchCommand"),
        ("n2", "LaunchCommand"),
    ]
    assert all(cmd.resume for _, cmd in launches(c.sink))


def test_a_dead_nodes_reported_self_fencing_time_is_waited_for(cluster):
    c = cluster
    c.events.register(c.node("n1", 1), [], fence_margin_s=15.0)
    c.add_node("n2", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    last_seen = c.state.nodes["n1"].last_seen
    c.advance(31.0, heartbeat=False)
    c.events.heartbeat("n2")
    c.cycle()
    assert job.state is JobState.SUSPENDED
    c.clock.advance(last_seen + 30.0 + 15.0 - c.clock.now())
    c.events.heartbeat("n2")
    c.cycle()
    assert job.state is JobState.STARTING
    assert c.task(job.id).node_id == "n2"


def test_gpus_of_a_lost_task_wait_for_the_agent_to_report_the_process_gone(cluster):
    # Issue 11 #4: the agent of a node declared dead comes back still running attempt 1; its
    # GPU is not given to attempt 2 until the agent reports that process ended.
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    old = c.task(job.id)
    c.advance(31.0)
    c.cycle()
    assert old.state is TaskState.LOST
    c.sink.clear()
    c.events.register(c.node("n1", 1), [c.report_of(job.id, 0, TaskState.RUNNING)])
    assert c.sink.of(KillCommand)  # the stale attempt is told to stop
    c.cycle()
    assert job.attempt == 1 and c.state.busy_gpus() == {"n1": {0}}
    c.report(job.id, 0, TaskState.KILLED)
    assert "task_fence_released" in c.event_kinds(job.id)
    c.cycle()
    assert job.attempt == 2 and job.state is JobState.STARTING


def test_a_restarted_controller_fences_a_dead_nodes_lost_tasks_again(make_cluster, tmp_path):
    path = tmp_path / "controller.db"
    c = make_cluster(path)
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.advance(31.0)
    c.cycle()
    assert len(c.state.fences) == 1
    c.store.close()

    restarted = make_cluster(path, clock=c.clock)
    restarted.add_node("n2", 1)
    assert restarted.state.busy_gpus() == {"n1": {0}}
    restarted.cycle()
    assert restarted.job(job.id).attempt == 1  # attempt 1 may still run on n1
    settings = restarted.state.settings
    restarted.advance(settings.heartbeat_timeout_s + assumed_margin_s(settings.suspend_grace_s))
    restarted.events.heartbeat("n2")
    restarted.cycle()
    assert restarted.job(job.id).attempt == 2
    assert restarted.task(job.id).node_id == "n2"


def test_a_returning_agent_that_no_longer_runs_the_task_releases_it_at_once(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.advance(31.0)
    c.cycle()
    c.events.register(c.node("n1", 1), [])
    assert "task_fence_released" in c.event_kinds(job.id)
    c.cycle()
    assert job.attempt == 2 and job.state is JobState.STARTING


def test_heartbeats_keep_a_node_alive(cluster):
    c = cluster
    c.add_node("n1", 1)
    for _ in range(5):
        c.advance(25.0, heartbeat=True)
        c.cycle()
    assert c.state.nodes["n1"].alive


# --- the loop --------------------------------------------------------------------------------


class CountingScheduler:
    def __init__(self, fail_first: bool = False) -> None:
        self.cycles = 0
        self.fail_first = fail_first
        self.ran = threading.Event()

    def run_cycle(self):
        self.cycles += 1
        self.ran.set()
        if self.fail_first and self.cycles == 1:
            raise RuntimeError("bad cycle")
        return Decision()


def test_loop_runs_a_cycle_when_triggered_and_stops():
    fake = CountingScheduler()
    loop = SchedulerLoop(fake, interval_s=3600.0)  # type: ignore[arg-type]
    loop.start()
    loop.trigger()
    assert fake.ran.wait(5.0)
    loop.stop()
    assert fake.cycles == 1


def test_loop_survives_a_failing_cycle():
    fake = CountingScheduler(fail_first=True)
    loop = SchedulerLoop(fake, interval_s=3600.0)  # type: ignore[arg-type]
    loop.start()
    loop.trigger()
    assert fake.ran.wait(5.0)
    fake.ran.clear()
    loop.trigger()
    assert fake.ran.wait(5.0)
    loop.stop()
    assert fake.cycles == 2


def test_loop_runs_on_its_interval():
    fake = CountingScheduler()
    loop = SchedulerLoop(fake, interval_s=0.01)  # type: ignore[arg-type]
    loop.start()
    assert fake.ran.wait(5.0)
    loop.stop()
    assert fake.cycles >= 1


def test_scheduler_disconnect_callback_defaults_to_nothing(cluster):
    scheduler = Scheduler(cluster.state, FifoPolicy())
    cluster.add_node("n1", 1)
    cluster.advance(31.0)
    scheduler.run_cycle()
    assert not cluster.state.nodes["n1"].alive
