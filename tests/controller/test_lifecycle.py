"""controller.lifecycle called directly: launch, renew, suspend, cancel, task_ended, settle."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import lifecycle
from controller.commands import (
    KillCommand,
    LaunchCommand,
    LeaseCommand,
    SuspendCommand,
    TaskRef,
)
from controller.placement import TaskPlacement
from controller.state import ControllerSettings
from mlsched.model import JobState, ResumeRecord, TaskState

T0 = 1_000.0  # the cluster fixture's clock starts here


def tp(rank: int, node: str, *gpus: int) -> TaskPlacement:
    return TaskPlacement(rank, node, tuple(gpus))


def launch(cluster, job, *placement: TaskPlacement, lease_s: float = 100.0) -> None:
    with cluster.state.lock:
        lifecycle.launch(cluster.state, job, tuple(placement), lease_s)


def end(cluster, job, rank: int, new_state: TaskState, exit_code: int = 0, msg: str = "") -> None:
    with cluster.state.lock:
        lifecycle.task_ended(cluster.state, cluster.task(job.id, rank), new_state, exit_code, msg)


def mark_running(cluster, job) -> None:
    for task in cluster.tasks(job.id):
        task.state = TaskState.RUNNING
    with cluster.state.lock:
        cluster.state.set_job_state(job, JobState.RUNNING)


@pytest.fixture
def two_nodes(cluster):
    cluster.add_node("n1", 2)
    cluster.add_node("n2", 2)
    cluster.sink.clear()
    return cluster


# --- launch ----------------------------------------------------------------------------------


def test_launch_single_node_job(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    c.advance(7.0)
    launch(c, job, tp(0, "n1", 0), tp(1, "n1", 1))

    assert job.state is JobState.STARTING
    assert job.attempt == 1
    assert job.first_start_time == T0 + 7.0
    assert job.attempt_started_at == T0 + 7.0
    assert job.lease_expires_at == T0 + 107.0
    assert job.node_history == ["n1"]
    assert job.message == "launching attempt 1 on n1:[0], n1:[1]"
    assert 29500 <= job.master_port <= 29999
    assert [(t.rank, t.attempt, t.node_id, t.gpu_indices, t.state) for t in c.tasks(job.id)] == [
        (0, 1, "n1", (0,), TaskState.LAUNCHING),
        (1, 1, "n1", (1,), TaskState.LAUNCHING),
    ]
    assert c.sink.sent == [
        (
            "n1",
            LaunchCommand(
                task=TaskRef(job.id, 0, 1),
                spec=job.spec,
                user="alice",
                gpu_indices=(0,),
                world_size=2,
                local_rank=0,
                local_world_size=2,
                master_addr="n1.cluster.local",
                master_port=job.master_port,
                resume=False,
            ),
        ),
        (
            "n1",
            LaunchCommand(
                task=TaskRef(job.id, 1, 1),
                spec=job.spec,
                user="alice",
                gpu_indices=(1,),
                world_size=2,
                local_rank=1,
                local_world_size=2,
                master_addr="n1.cluster.local",
                master_port=job.master_port,
                resume=False,
            ),
        ),
    ]
    # The tasks and the job are persisted before the commands go out.
    stored = c.store.load()
    assert stored.jobs[job.id] == job
    assert stored.tasks[job.id] == c.tasks(job.id)


def test_launch_spanning_nodes_sets_world_and_local_ranks(cluster):
    cluster.add_node("n1", 2, address="10.0.0.1")
    cluster.add_node("n2", 4, address="10.0.0.2")
    cluster.sink.clear()
    job = cluster.submit(gpus=5)
    launch(
        cluster,
        job,
        tp(0, "n2", 0),
        tp(1, "n2", 1),
        tp(2, "n2", 3),
        tp(3, "n1", 0),
        tp(4, "n1", 1),
    )
    sent = [
        (n, c.task.rank, c.gpu_indices, c.local_rank, c.local_world_size)
        for n, c in cluster.sink.sent
    ]
    assert sent == [
        ("n2", 0, (0,), 0, 3),
        ("n2", 1, (1,), 1, 3),
        ("n2", 2, (3,), 2, 3),
        ("n1", 3, (0,), 0, 2),
        ("n1", 4, (1,), 1, 2),
    ]
    commands = [c for _, c in cluster.sink.sent]
    assert {c.world_size for c in commands} == {5}
    assert {c.master_addr for c in commands} == {"10.0.0.2"}  # rank 0's node
    assert {c.master_port for c in commands} == {job.master_port}
    assert job.node_history == ["n2", "n1"]


def test_launch_with_two_gpus_per_process(two_nodes):
    c = two_nodes
    job = c.submit(gpus=4, gpus_per_process=2)
    launch(c, job, tp(0, "n1", 0, 1), tp(1, "n2", 0, 1))
    sent = [
        (n, cmd.gpu_indices, cmd.world_size, cmd.local_rank, cmd.local_world_size)
        for n, cmd in c.sink.sent
    ]
    assert sent == [("n1", (0, 1), 2, 0, 1), ("n2", (0, 1), 2, 0, 1)]
    assert [t.gpu_indices for t in c.tasks(job.id)] == [(0, 1), (0, 1)]


def test_relaunch_resumes_and_completes_the_resume_record(two_nodes):
    c = two_nodes
    job = c.submit(gpus=1)
    launch(c, job, tp(0, "n1", 0))
    mark_running(c, job)
    job.checkpoint_step = 300
    c.advance(10.0)
    end(c, job, 0, TaskState.SUSPENDED)  # the job yields its GPUs (e.g. node lost)
    assert job.state is JobState.SUSPENDED
    assert job.resumes == [ResumeRecord(T0 + 10.0, 300, ("n1",))]
    c.sink.clear()

    c.advance(5.0)
    launch(c, job, tp(0, "n2", 1))
    assert job.attempt == 2
    assert job.state is JobState.STARTING
    assert job.message == "resuming attempt 2 on n2:[1]"
    assert job.node_history == ["n1", "n2"]
    assert job.first_start_time == T0  # unchanged by a resumption
    assert job.attempt_started_at == T0 + 15.0
    assert job.resumes == [ResumeRecord(T0 + 10.0, 300, ("n1",), T0 + 15.0, None, ("n2",))]
    [(node, command)] = c.sink.sent
    assert node == "n2"
    assert command.resume is True and command.task == TaskRef(job.id, 0, 2)

    # Back on n1 later: node_history keeps each node once.
    end(c, job, 0, TaskState.SUSPENDED)
    launch(c, job, tp(0, "n1", 1))
    assert job.node_history == ["n1", "n2"]
    assert job.attempt == 3
    assert [r.to_nodes for r in job.resumes] == [("n2",), ("n1",)]


# --- renew -----------------------------------------------------------------------------------


def test_renew_extends_the_lease_and_tells_every_live_task(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    c.advance(100.0)
    with c.state.lock:
        lifecycle.renew(c.state, job, 50.0)
    assert job.lease_expires_at == T0 + 150.0
    assert c.store.load().jobs[job.id].lease_expires_at == T0 + 150.0
    assert c.sink.sent == [
        ("n1", LeaseCommand(TaskRef(job.id, 0, 1), True, T0 + 150.0)),
        ("n2", LeaseCommand(TaskRef(job.id, 1, 1), True, T0 + 150.0)),
    ]
    assert job.state is JobState.RUNNING


# --- suspend ---------------------------------------------------------------------------------


def test_suspend_asks_every_live_task_to_checkpoint(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    with c.state.lock:
        lifecycle.suspend(c.state, job, "lease expired; yields to j-x")
    assert job.state is JobState.SUSPENDING
    assert job.message == "lease expired; yields to j-x"
    assert [t.state for t in c.tasks(job.id)] == [TaskState.SUSPENDING] * 2
    assert c.sink.sent == [
        ("n1", SuspendCommand(TaskRef(job.id, 0, 1), 10.0, "lease expired; yields to j-x")),
        ("n2", SuspendCommand(TaskRef(job.id, 1, 1), 10.0, "lease expired; yields to j-x")),
    ]
    assert job.suspensions == 0  # only counted once the job has settled

    job.checkpoint_step = 700
    c.advance(3.0)
    end(c, job, 1, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDING  # rank 0 still checkpointing
    c.advance(2.0)
    end(c, job, 0, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED
    assert job.suspensions == 1
    assert job.queued_since == T0 + 5.0
    assert job.lease_expires_at is None
    assert job.message == "suspended with checkpoint at step 700"
    assert job.resumes == [ResumeRecord(T0 + 5.0, 700, ("n1", "n2"))]
    assert c.state.busy_gpus() == {}


def test_suspend_uses_the_configured_grace_period(make_cluster):
    c = make_cluster(settings=ControllerSettings(suspend_grace_s=42.5))
    c.add_node("n1", 1)
    c.sink.clear()
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    c.sink.clear()
    with c.state.lock:
        lifecycle.suspend(c.state, job, "why")
    assert c.sink.sent == [("n1", SuspendCommand(TaskRef(job.id, 0, 1), 42.5, "why"))]


# --- task_ended ------------------------------------------------------------------------------


def test_rank_0_completed_completes_the_job(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    mark_running(c, job)
    c.advance(60.0)
    end(c, job, 0, TaskState.COMPLETED, 0, "done")
    assert job.state is JobState.COMPLETED
    assert job.end_time == T0 + 60.0
    assert job.lease_expires_at is None
    assert job.message == "reached its stopping criterion"
    task = c.task(job.id)
    assert (task.state, task.exit_code, task.message) == (TaskState.COMPLETED, 0, "done")
    assert c.store.load().jobs[job.id].state is JobState.COMPLETED


def test_gang_completes_only_when_every_task_has_ended(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    end(c, job, 0, TaskState.COMPLETED)
    assert job.state is JobState.RUNNING
    end(c, job, 1, TaskState.COMPLETED)
    assert job.state is JobState.COMPLETED


def test_only_rank_0_completing_counts_as_completion(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    end(c, job, 1, TaskState.COMPLETED)
    assert job.state is JobState.RUNNING
    c.sink.clear()
    end(c, job, 0, TaskState.SUSPENDED)
    # rank 0 checkpointed instead of finishing: the job is requeued, not completed.
    assert job.state is JobState.SUSPENDED
    assert job.suspensions == 1
    assert c.sink.sent == []  # nothing live was left to suspend


def test_failure_without_retries_fails_the_job_and_kills_the_gang(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    c.advance(20.0)
    end(c, job, 1, TaskState.FAILED, 3, "CUDA error")
    assert job.state is JobState.FAILED
    assert job.failures == 1
    assert job.end_time == T0 + 20.0
    assert job.message == "rank 1 on n2 failed (exit 3): CUDA error"
    assert c.sink.sent == [
        ("n1", KillCommand(TaskRef(job.id, 0, 1), "another task of the job failed"))
    ]
    # The surviving rank reports being killed later: the job stays FAILED.
    end(c, job, 0, TaskState.KILLED)
    assert job.state is JobState.FAILED
    assert c.task(job.id, 0).state is TaskState.KILLED


def test_failure_with_retries_left_requeues_then_fails(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2, max_retries=1)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    end(c, job, 0, TaskState.FAILED, 1, "oops")
    assert job.state is JobState.SUSPENDING
    assert job.failures == 1
    assert job.message == "retry 1/1 after rank 0 on n1 failed (exit 1): oops"
    assert c.sink.sent == [
        ("n2", SuspendCommand(TaskRef(job.id, 1, 1), 10.0, job.message)),
    ]
    end(c, job, 1, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED
    assert job.suspensions == 1

    launch(c, job, tp(0, "n2", 1), tp(1, "n1", 1))
    mark_running(c, job)
    end(c, job, 1, TaskState.FAILED, 2, "again")
    assert job.state is JobState.FAILED
    assert job.failures == 2


def test_failure_during_suspension_is_not_counted(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    with c.state.lock:
        lifecycle.suspend(c.state, job, "lease expired")
    end(c, job, 0, TaskState.FAILED, 9, "crashed while saving")
    assert job.failures == 0
    assert job.state is JobState.SUSPENDING
    end(c, job, 1, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED


@pytest.mark.parametrize("how", [TaskState.LOST, TaskState.KILLED, TaskState.SUSPENDED])
def test_a_task_lost_killed_or_suspended_suspends_the_job(two_nodes, how):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    end(c, job, 1, how, 0, "gone")
    assert job.state is JobState.SUSPENDING
    assert job.message == f"rank 1 on n2 {how.value.lower()}: gone"
    assert c.task(job.id, 0).state is TaskState.SUSPENDING
    assert c.sink.sent == [("n1", SuspendCommand(TaskRef(job.id, 0, 1), 10.0, job.message))]
    end(c, job, 0, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED
    assert job.failures == 0


def test_task_ended_while_starting(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    end(c, job, 0, TaskState.LOST, 0, "node died")
    assert job.state is JobState.SUSPENDED
    assert [e.message for e in c.store.events_after(0, job.id)][-3:] == [
        "rank 0 on n1: LOST node died",
        "STARTING -> SUSPENDING: rank 0 on n1 lost: node died",
        "SUSPENDING -> SUSPENDED: suspended with checkpoint at step 0",
    ]


def test_task_of_a_terminal_job_is_recorded_without_changing_the_job(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    end(c, job, 0, TaskState.FAILED, 1)
    assert job.state is JobState.FAILED
    before = len(c.store.events_after(0))
    end(c, job, 1, TaskState.COMPLETED)
    assert job.state is JobState.FAILED
    assert c.task(job.id, 1).state is TaskState.COMPLETED
    assert [e.kind for e in c.store.events_after(0)][before:] == ["task_ended"]


# --- cancel ----------------------------------------------------------------------------------


@pytest.mark.parametrize("queued_state", ["pending", "suspended"])
def test_cancel_of_a_queued_job_is_immediate(two_nodes, queued_state):
    c = two_nodes
    job = c.submit()
    if queued_state == "suspended":
        launch(c, job, tp(0, "n1", 0))
        end(c, job, 0, TaskState.SUSPENDED)
        assert job.state is JobState.SUSPENDED
    c.sink.clear()
    c.advance(4.0)
    with c.state.lock:
        lifecycle.cancel(c.state, job, "cancelled by alice")
    assert job.state is JobState.CANCELLED
    assert job.end_time == T0 + 4.0
    assert job.message == "cancelled by alice"
    assert c.sink.sent == []


def test_cancel_of_a_running_job_kills_and_waits_for_the_tasks(two_nodes):
    c = two_nodes
    job = c.submit(gpus=2)
    launch(c, job, tp(0, "n1", 0), tp(1, "n2", 0))
    mark_running(c, job)
    c.sink.clear()
    with c.state.lock:
        lifecycle.cancel(c.state, job, "cancelled by alice")
    assert job.state is JobState.CANCELLING
    assert c.sink.sent == [
        ("n1", KillCommand(TaskRef(job.id, 0, 1), "cancelled by alice")),
        ("n2", KillCommand(TaskRef(job.id, 1, 1), "cancelled by alice")),
    ]
    end(c, job, 0, TaskState.KILLED)
    assert job.state is JobState.CANCELLING
    end(c, job, 1, TaskState.KILLED)
    assert job.state is JobState.CANCELLED
    assert job.message == "cancelled by alice"
    assert job.end_time is not None


def test_cancel_again_while_cancelling_resends_the_kills(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    with c.state.lock:
        lifecycle.cancel(c.state, job, "first")
    c.sink.clear()
    with c.state.lock:
        lifecycle.cancel(c.state, job, "second")
    assert job.state is JobState.CANCELLING
    assert c.sink.sent == [("n1", KillCommand(TaskRef(job.id, 0, 1), "second"))]


def test_cancel_while_suspending(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    with c.state.lock:
        lifecycle.suspend(c.state, job, "lease expired")
        c.sink.clear()
        lifecycle.cancel(c.state, job, "cancelled by alice")
    assert job.state is JobState.CANCELLING
    assert c.sink.sent == [("n1", KillCommand(TaskRef(job.id, 0, 1), "cancelled by alice"))]
    end(c, job, 0, TaskState.SUSPENDED)  # it had checkpointed before the kill arrived
    assert job.state is JobState.CANCELLED
    assert job.suspensions == 0


def test_task_completing_during_cancellation_still_cancels(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    with c.state.lock:
        lifecycle.cancel(c.state, job, "cancelled by alice")
    end(c, job, 0, TaskState.COMPLETED)
    assert job.state is JobState.CANCELLED


# --- settle ----------------------------------------------------------------------------------


def test_settle_does_nothing_while_tasks_are_live(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    with c.state.lock:
        lifecycle.settle(c.state, job)
    assert job.state is JobState.STARTING


def test_settle_completes_a_suspending_job_whose_rank_0_finished(two_nodes):
    c = two_nodes
    job = c.submit()
    launch(c, job, tp(0, "n1", 0))
    mark_running(c, job)
    with c.state.lock:
        lifecycle.suspend(c.state, job, "lease expired")
    end(c, job, 0, TaskState.COMPLETED)  # it finished before it could checkpoint
    assert job.state is JobState.COMPLETED
    assert job.suspensions == 0


# --- master port -----------------------------------------------------------------------------


def test_master_ports_avoid_other_live_jobs_with_rank_0_on_the_same_node(make_cluster):
    # Only two ports to choose from: two live jobs with rank 0 on n1 never share one. Each
    # round ends the older job and launches a new one next to the survivor (a random draw
    # that would collide is caught with probability 1/2 per round).
    c = make_cluster(settings=ControllerSettings(master_port_range=(29500, 29501)))
    c.add_node("n1", 2)
    older = c.submit()
    launch(c, older, tp(0, "n1", 0))
    for _ in range(12):
        newer = c.submit()
        gpu = 1 - c.task(older.id).gpu_indices[0]
        launch(c, newer, tp(0, "n1", gpu))
        assert {older.master_port, newer.master_port} == {29500, 29501}
        end(c, older, 0, TaskState.COMPLETED)
        older = newer


def test_master_ports_may_repeat_across_nodes(make_cluster):
    c = make_cluster(settings=ControllerSettings(master_port_range=(29500, 29500)))
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    first, second = c.submit(), c.submit()
    launch(c, first, tp(0, "n1", 0))
    launch(c, second, tp(0, "n2", 0))
    assert first.master_port == second.master_port == 29500


def test_master_port_is_in_range_and_shared_by_all_tasks(make_cluster):
    c = make_cluster(settings=ControllerSettings(master_port_range=(40000, 40009)))
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    c.sink.clear()
    job = c.submit(gpus=4)
    launch(c, job, tp(0, "n1", 0), tp(1, "n1", 1), tp(2, "n2", 0), tp(3, "n2", 1))
    assert 40000 <= job.master_port <= 40009
    assert {cmd.master_port for _, cmd in c.sink.sent} == {job.master_port}


def test_the_default_rendezvous_ports_lie_below_the_kernels_ephemeral_ports():
    # A listener on port 0 (a controller, an agent's trainer service) or an outgoing connection
    # gets an ephemeral port; one inside the rendezvous range once took a job's port.
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if not ephemeral.exists():
        pytest.skip("no Linux ephemeral port range here")
    first_ephemeral = int(ephemeral.read_text().split()[0])
    low, high = ControllerSettings().master_port_range
    assert (low, high) == (29500, 32767)
    assert high < first_ephemeral
