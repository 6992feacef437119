"""MLFS overload handling in the controller: agents' load reports and migration requests, the
snapshot's utilisation and usage, and executing ``Decision.migrate`` (suspend, reserve, resume
on the target)."""

from __future__ import annotations

import json
import logging

import pytest

from controller import lifecycle
from controller.clock import ManualClock
from controller.commands import LaunchCommand, SuspendCommand, TaskRef
from controller.dispatch import migration_request_from_proto, node_load_from_proto
from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, Decision, Launch, Migrate, Renew
from controller.snapshot import build_snapshot
from controller.store import codec
from mlsched.model import (
    JobState,
    MigrationRequest,
    MigrationTarget,
    NodeLoad,
    Progress,
    ResumeRecord,
    TaskState,
    TaskUsage,
)
from mlsched.v1 import agent_pb2

T0 = 1_000.0


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


class MoveRequested:
    """Test-only policy: a job whose agent asked to move it goes to the first free GPU of
    another node; everything else is left alone (leases renewed)."""

    name = "move-requested"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        free = {n.id: list(n.free_gpu_indices) for n in snapshot.nodes}
        moves, renewals = [], []
        for job in snapshot.active:
            here = {p.node_id for p in job.placement}
            target = next((n for n, gpus in sorted(free.items()) if n not in here and gpus), None)
            if job.migration_requested and target is not None:
                gpu = free[target].pop(0)
                reason = f"overloaded; usage {job.resource_usage.get('cpu', 0.0):.2f} cpu"
                moves.append(Migrate(job.id, (tp(0, target, gpu),), 50.0, reason))
            elif job.lease_expires_at is not None and job.lease_expires_at <= snapshot.now:
                renewals.append(Renew(job.id, 100.0))
        return Decision(renew=tuple(renewals), migrate=tuple(moves))


def running_job(c, gpus: int = 1, policy=None):
    job = c.submit(gpus=gpus)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    if policy is not None:
        c.scheduler.policy = policy
    return job


def load(*tasks: TaskUsage, cpu: float = 0.5, gpus: dict[int, float] | None = None) -> NodeLoad:
    return NodeLoad(
        utilization={"gpu": 0.5, "cpu": cpu, "memory": 0.25, "bandwidth": 0.0},
        gpu_utilization=gpus if gpus is not None else {0: 0.9, 1: 0.1},
        tasks=tasks,
        cpu_cores=8.0,
        memory_bytes=64 << 30,
    )


def usage(job_id: str, rank: int = 0, attempt: int = 1, cpu: float = 0.4) -> TaskUsage:
    demand = {"gpu": 0.45, "cpu": cpu, "memory": 0.2, "bandwidth": 0.0}
    return TaskUsage(job_id, rank, attempt, demand, 0, 0.9)


def request(job_id: str, rank: int = 0, attempt: int = 1) -> MigrationRequest:
    return MigrationRequest(job_id, rank, attempt, {"cpu": 0.97}, {"cpu": 0.6}, "cpu 0.97 > 0.90")


def events(c, job_id: str, kind: str) -> list[str]:
    return [e.message for e in c.store.events_after(0, job_id) if e.kind == kind]


# --- the agents' reports -----------------------------------------------------------------------


def test_a_migration_request_marks_the_job_once_and_is_persisted(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = running_job(c)
    c.advance(3.0)
    assert c.events.migration_requested("n1", request(job.id))
    assert job.migration_requested_at == T0 + 3.0
    [message] = events(c, job.id, "migration_requested")
    assert message.startswith("requested by node n1 for rank 0 (demand cpu 0.60)")
    assert message.endswith(": cpu 0.97 > 0.90")
    assert c.store.load().jobs[job.id].migration_requested_at == T0 + 3.0
    c.advance(1.0)
    assert not c.events.migration_requested("n1", request(job.id))  # pending: no change
    assert job.migration_requested_at == T0 + 3.0
    assert len(events(c, job.id, "migration_requested")) == 1


class MovesOnItsOwn:
    """Moves every running job to n2 at once, as MLF-H's cycle may on a node's load alone."""

    name = "moves-on-its-own"

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        moves = tuple(
            Migrate(j.id, (tp(0, "n2", 0),), 50.0, "moved off overloaded n1")
            for j in snapshot.active
            if all(p.node_id == "n1" for p in j.placement)
        )
        return Decision(migrate=moves)


def test_a_request_for_a_job_already_being_moved_is_recorded_only(cluster):
    # the policy ordered the move before the agent's request arrived: nothing to mark, but
    # the agent's request shows in the events
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_job(c, policy=MovesOnItsOwn())
    c.cycle()
    assert job.migration_target is not None and job.state is JobState.SUSPENDING
    assert not c.events.migration_requested("n1", request(job.id))
    assert job.migration_requested_at is None
    [message] = events(c, job.id, "migration_requested")
    assert message == (
        "requested by node n1 for rank 0 (demand cpu 0.60): cpu 0.97 > 0.90;"
        " the job is already being moved"
    )


@pytest.mark.parametrize(
    ("node", "rank", "attempt", "why"),
    [
        ("n2", 0, 1, "the task runs on n1"),
        ("n1", 1, 1, "no such rank"),
        ("n1", 0, 2, "a future attempt"),
    ],
)
def test_a_migration_request_for_no_live_task_there_is_ignored(cluster, node, rank, attempt, why):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    assert not c.events.migration_requested(node, request(job.id, rank, attempt)), why
    assert job.migration_requested_at is None
    assert events(c, job.id, "migration_requested") == []


def test_a_migration_request_for_a_suspending_job_is_ignored(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_job(c, policy=StubPolicy())
    c.jobs.cancel("alice", job.id)
    assert not c.events.migration_requested("n1", request(job.id))


def test_the_mark_is_cleared_when_the_job_leaves_running(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_job(c)
    c.events.migration_requested("n1", request(job.id))
    c.advance(100.0, heartbeat=True)
    c.scheduler.policy = StubPolicy()  # the lease expires, nobody renews it
    c.cycle()
    assert job.state is JobState.SUSPENDING
    assert job.migration_requested_at is None
    assert c.store.load().jobs[job.id].migration_requested_at is None


def test_the_mark_is_cleared_when_the_job_completes(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_job(c)
    c.events.migration_requested("n1", request(job.id))
    c.report(job.id, 0, TaskState.COMPLETED)
    assert job.state is JobState.COMPLETED
    assert job.migration_requested_at is None


def test_losses_keep_the_first_previous_and_latest(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_job(c)

    def report(iteration: int, loss: float) -> None:
        c.events.progress("n1", job.id, 0, 1, Progress(iteration, loss, {}, 0.1, 32, T0))

    report(1, 2.0)
    assert job.losses == (2.0,)
    report(2, 1.5)
    assert job.losses == (2.0, 1.5)
    report(3, 1.25)
    report(4, 1.0)
    assert job.losses == (2.0, 1.25, 1.0)
    report(4, 0.5)  # the same iteration again: not a new loss
    report(5, float("nan"))
    assert job.losses == (2.0, 1.25, 1.0)
    assert c.store.load().jobs[job.id].losses == (2.0, 1.25, 1.0)


# --- the snapshot ------------------------------------------------------------------------------


def test_snapshot_carries_the_load_the_usage_and_the_request(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    c.events.heartbeat("n1", load=load(usage(job.id), usage("j-gone", cpu=0.3)))
    c.events.migration_requested("n1", request(job.id))
    with c.state.lock:
        snapshot = build_snapshot(c.state)
    n1, n2 = snapshot.nodes
    assert n1.utilization == {"gpu": 0.5, "cpu": 0.5, "memory": 0.25, "bandwidth": 0.0}
    assert n1.gpu_utilization == {0: 0.9, 1: 0.1}
    assert (n2.utilization, n2.gpu_utilization) == ({}, {})  # nothing reported yet
    [view] = snapshot.active
    assert view.migration_requested
    assert view.resource_usage == {"gpu": 0.45, "cpu": 0.4, "memory": 0.2, "bandwidth": 0.0}


def test_usage_sums_the_tasks_of_the_current_attempt_only(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = running_job(c, gpus=2)
    c.events.heartbeat(
        "n1",
        load=load(usage(job.id, 0, cpu=0.25), usage(job.id, 1, cpu=0.5), usage(job.id, 0, 7)),
    )
    with c.state.lock:
        [view] = build_snapshot(c.state).active
    assert view.resource_usage["cpu"] == pytest.approx(0.75)
    assert view.resource_usage["gpu"] == pytest.approx(0.9)


def test_load_reports_off_the_wire_are_clamped_and_optional():
    report = agent_pb2.MetricsReport()
    assert node_load_from_proto(report) is None
    report.load.utilization.update({"cpu": 1.7, "memory": float("nan"), "gpu": -0.5})
    report.load.gpu_utilization[3] = 0.5
    report.load.capacity.cpu_cores = 4.0
    task = report.load.tasks.add()
    task.task.job_id, task.task.rank, task.task.attempt = "j-1", 2, 3
    task.demand["cpu"] = 0.25
    task.gpu_index, task.gpu_utilization = 3, 2.0
    decoded = node_load_from_proto(report)
    assert decoded == NodeLoad(
        {"cpu": 1.0, "gpu": 0.0},
        {3: 0.5},
        (TaskUsage("j-1", 2, 3, {"cpu": 0.25}, 3, 1.0),),
        cpu_cores=4.0,
    )
    msg = agent_pb2.MigrationRequest(reason="hot", demand={"cpu": 0.5})
    msg.task.job_id, msg.task.rank, msg.task.attempt = "j-1", 0, 1
    assert migration_request_from_proto(msg) == MigrationRequest(
        "j-1", 0, 1, {}, {"cpu": 0.5}, "hot"
    )


# --- executing Migrate -----------------------------------------------------------------------


def test_migrate_suspends_reserves_the_target_and_resumes_there(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    c.events.migration_requested("n1", request(job.id))
    c.scheduler.policy = StubPolicy(
        Decision(migrate=(Migrate(job.id, (tp(0, "n2", 1),), 40.0, "hot"),))
    )
    c.sink.clear()
    c.advance(2.0)
    c.cycle()
    assert job.state is JobState.SUSPENDING
    assert job.migration_requested_at is None
    assert job.migration_target == MigrationTarget(((0, "n2", (1,)),), 40.0, "hot", ("n1",), T0 + 2)
    assert c.sink.sent == [
        ("n1", SuspendCommand(TaskRef(job.id, 0, 1), 10.0, "migrating to n2:[1]: hot"))
    ]
    assert events(c, job.id, "migration_ordered") == ["from n1 to n2:[1]: hot"]

    # n2's GPU 1 is reserved: not free for the policy, and a launch onto it is skipped
    other = c.submit(name="other")
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(other.id, (tp(0, "n2", 1),), 10.0),)))
    c.cycle()
    assert other.state is JobState.PENDING
    n1, n2 = c.scheduler.policy.snapshots[-1].nodes
    assert (n1.free_gpu_indices, n2.free_gpu_indices) == ((1,), (0,))

    # the checkpoint is written, the task exits: the job resumes on n2 at once
    c.sink.clear()
    c.advance(3.0)
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=120)
    assert job.state is JobState.STARTING
    assert job.migration_target is None
    [(node, launch)] = c.sink.of(LaunchCommand)
    assert (node, launch.task, launch.gpu_indices, launch.resume) == (
        "n2",
        TaskRef(job.id, 0, 2),
        (1,),
        True,
    )
    assert job.lease_expires_at == T0 + 5.0 + 40.0
    assert job.resumes == [ResumeRecord(T0 + 5.0, 120, ("n1",), T0 + 5.0, None, ("n2",))]
    assert events(c, job.id, "job_migrated") == ["n1 -> n2: hot"]
    kinds = [k for k in c.event_kinds(job.id) if k not in ("checkpoint_saved", "task_ended")]
    assert kinds[-6:] == [
        "migration_requested",
        "migration_ordered",
        "job_state",  # SUSPENDING
        "job_state",  # SUSPENDED
        "job_state",  # STARTING, on n2
        "job_migrated",
    ]
    c.report(job.id, 0, TaskState.RUNNING, restored_step=120)
    assert job.state is JobState.RUNNING
    assert job.resumes[-1].restored_step == 120


def test_when_the_target_is_gone_the_job_waits_in_the_queue(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_job(c)
    c.scheduler.policy = StubPolicy(
        Decision(migrate=(Migrate(job.id, (tp(0, "n2", 0),), 40.0, "hot"),))
    )
    c.cycle()
    c.scheduler.policy = StubPolicy()
    c.events.disconnected("n2")
    c.sink.clear()
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=50)
    assert job.state is JobState.SUSPENDED
    assert job.migration_target is None
    assert c.sink.of(LaunchCommand) == []
    [message] = events(c, job.id, "migration_abandoned")
    assert "n2 is not connected" in message and "waits in the queue" in message
    # an ordinary queued job again: any policy may place it
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, (tp(0, "n1", 0),), 10.0),)))
    c.cycle()
    assert job.state is JobState.STARTING and c.task(job.id).node_id == "n1"


def test_restart_while_suspending_keeps_the_target(tmp_path, make_cluster):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 1)
    first.add_node("n2", 1)
    job = running_job(first)
    first.scheduler.policy = StubPolicy(
        Decision(migrate=(Migrate(job.id, (tp(0, "n2", 0),), 40.0, "hot"),))
    )
    first.cycle()
    assert job.state is JobState.SUSPENDING

    second = make_cluster(path, clock=ManualClock(first.clock.now() + 5.0))
    second.scheduler.policy = StubPolicy()
    restored = second.state.jobs[job.id]
    assert restored.migration_target == job.migration_target
    # the target node comes back first, then the source reports the task suspended
    second.add_node("n2", 1)
    second.cycle()
    [only_n2] = second.scheduler.policy.snapshots[-1].nodes
    assert only_n2.id == "n2" and only_n2.free_gpu_indices == ()  # still reserved
    suspended = second.report_of(job.id, 0, TaskState.SUSPENDED, checkpoint_step=70)
    second.add_node("n1", 1, reports=[suspended])
    assert restored.state is JobState.STARTING
    assert second.task(job.id).node_id == "n2"
    assert [n for n, _ in second.sink.of(LaunchCommand)] == ["n2"]


def test_a_job_found_suspended_with_a_target_is_resumed_at_the_next_cycle(
    tmp_path, make_cluster, monkeypatch
):
    path = tmp_path / "controller.db"
    first = make_cluster(path)
    first.add_node("n1", 1)
    first.add_node("n2", 1)
    job = running_job(first)
    move = Migrate(job.id, (tp(0, "n2", 0),), 40.0, "hot")
    first.scheduler.policy = StubPolicy(Decision(migrate=(move,)))
    first.cycle()
    # the controller dies between the job's SUSPENDED and its launch on the target
    monkeypatch.setattr(lifecycle, "resume_migration", lambda state, job: False)
    first.report(job.id, 0, TaskState.SUSPENDED)
    assert job.state is JobState.SUSPENDED and job.migration_target is not None
    monkeypatch.undo()

    second = make_cluster(path, clock=ManualClock(first.clock.now() + 5.0))
    second.scheduler.policy = StubPolicy()
    second.add_node("n1", 1)
    second.add_node("n2", 1)
    second.cycle()
    restored = second.state.jobs[job.id]
    assert restored.state is JobState.STARTING
    assert restored.migration_target is None
    assert second.task(job.id).node_id == "n2"
    assert second.scheduler.policy.snapshots[-1].queued == ()  # resumed before the policy ran


@pytest.mark.parametrize(
    ("placement", "lease_s", "why"),
    [
        ((tp(0, "n2", 0), tp(1, "n2", 1)), 40.0, "2 processes placed"),
        ((tp(1, "n2", 0),), 40.0, "ranks [1] are not 0..0"),
        ((tp(0, "n2", 0),), 0.0, "lease of 0.0 s"),
        ((tp(0, "n2", 0),), float("nan"), "lease of nan s"),
        ((tp(0, "n1", 0),), 40.0, "the target is where the job runs now"),
    ],
)
def test_malformed_migrations_are_refused_with_a_reason(cluster, caplog, placement, lease_s, why):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    c.scheduler.policy = StubPolicy(Decision(migrate=(Migrate(job.id, placement, lease_s, "x"),)))
    c.sink.clear()
    with caplog.at_level(logging.ERROR, logger="controller.scheduler"):
        c.cycle()
    assert job.state is JobState.RUNNING and job.migration_target is None
    assert c.sink.sent == []
    assert f"migration of {job.id} refused: {why}" in caplog.text


@pytest.mark.parametrize(
    ("placement", "why"),
    [
        ((tp(0, "n1", 1),), "held by another job"),
        ((tp(0, "n2", 5),), "n2 has no GPU [5]"),
        ((tp(0, "n9", 0),), "node n9 is not connected"),
    ],
)
def test_migrations_onto_gpus_not_free_are_skipped(cluster, caplog, placement, why):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    running_job(c)  # holds n1:1
    c.scheduler.policy = StubPolicy(Decision(migrate=(Migrate(job.id, placement, 40.0, "x"),)))
    c.sink.clear()
    with caplog.at_level(logging.INFO, logger="controller.scheduler"):
        c.cycle()
    assert job.state is JobState.RUNNING and c.sink.sent == []
    assert why in caplog.text


def test_two_migrations_to_the_same_gpu_only_the_first_is_ordered(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    a, b = running_job(c), running_job(c)
    target = (tp(0, "n2", 0),)
    c.scheduler.policy = StubPolicy(
        Decision(migrate=(Migrate(a.id, target, 40.0, "x"), Migrate(b.id, target, 40.0, "x")))
    )
    c.cycle()
    assert a.state is JobState.SUSPENDING and b.state is JobState.RUNNING


def test_a_migrated_job_is_not_also_renewed(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = running_job(c)
    c.advance(100.0, heartbeat=True)
    move = Migrate(job.id, (tp(0, "n2", 0),), 40.0, "x")
    c.scheduler.policy = StubPolicy(Decision(migrate=(move,), renew=(Renew(job.id, 10.0),)))
    c.sink.clear()
    c.cycle()
    assert c.sink.kinds() == ["SuspendCommand"]
    assert job.message == "migrating to n2:[0]: x"


def test_cancelling_a_migrating_job_drops_its_target(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_job(c)
    c.scheduler.policy = StubPolicy(
        Decision(migrate=(Migrate(job.id, (tp(0, "n2", 0),), 40.0, "x"),))
    )
    c.cycle()
    c.jobs.cancel("alice", job.id)
    assert job.migration_target is None
    c.report(job.id, 0, TaskState.KILLED)
    assert job.state is JobState.CANCELLED
    assert c.sink.of(LaunchCommand)[-1][0] == "n1"  # the only launch was the first one


def test_request_to_resume_elsewhere_end_to_end_with_a_test_policy(cluster):
    """Agent request -> the policy's Migrate -> checkpoint -> resume on the other node."""
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = running_job(c, policy=MoveRequested())
    c.events.heartbeat("n1", load=load(usage(job.id, cpu=0.62), cpu=0.97))
    c.cycle()
    assert job.state is JobState.RUNNING  # nobody asked yet
    c.events.migration_requested("n1", request(job.id))
    c.cycle()
    assert job.state is JobState.SUSPENDING
    assert job.message == "migrating to n2:[0]: overloaded; usage 0.62 cpu"
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=300)
    c.report(job.id, 0, TaskState.RUNNING, restored_step=300)
    assert job.state is JobState.RUNNING
    assert c.task(job.id).node_id == "n2"
    assert job.resumes[-1].from_nodes == ("n1",) and job.resumes[-1].to_nodes == ("n2",)
    assert job.resumes[-1].checkpoint_step == job.resumes[-1].restored_step == 300


@pytest.mark.parametrize("name", ["fifo", "tiresias"])
def test_a_baseline_from_the_registry_moves_the_requested_job_to_the_euclidean_host(cluster, name):
    """Agent request -> controller/policy/overload.py's Migrate (MLFS host choice) ->
    checkpoint -> resume there. The task's demand (gpu 0.45, cpu 0.62, memory 0.2) fits both
    free nodes (cpu 0.82 and 0.72); the ideal virtual host is (0, 0.1, 0.1, 0): n3 itself,
    n2 is 0.1 away."""
    c = cluster
    c.add_node("n1", 2)
    job = running_job(c, policy=make_policy(name))
    c.add_node("n2", 1)
    c.add_node("n3", 1)
    c.events.heartbeat("n1", load=load(usage(job.id, cpu=0.62), cpu=0.97))
    for node_id, cpu in (("n2", 0.2), ("n3", 0.1)):
        idle = NodeLoad({"gpu": 0.0, "cpu": cpu, "memory": 0.1, "bandwidth": 0.0}, {0: 0.0}, ())
        c.events.heartbeat(node_id, load=idle)
    c.cycle()
    assert job.state is JobState.RUNNING  # overloaded, but nobody asked: nothing moves
    c.events.migration_requested("n1", request(job.id))
    c.cycle()
    assert job.state is JobState.SUSPENDING
    (ordered,) = events(c, job.id, "migration_ordered")
    assert ordered.startswith("from n1 to n3:[0]") and "overloaded n1" in ordered
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=300)
    c.report(job.id, 0, TaskState.RUNNING, restored_step=300)
    assert job.state is JobState.RUNNING and c.task(job.id).node_id == "n3"
    assert job.resumes[-1].checkpoint_step == job.resumes[-1].restored_step == 300


# --- persistence -------------------------------------------------------------------------------


def test_codec_round_trips_the_mlfs_fields_and_never_stores_a_load(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = running_job(c)
    job.losses = (2.0, 1.5, 1.0)
    job.migration_requested_at = 1234.5
    job.migration_target = MigrationTarget(
        ((0, "n1", (0,)), (1, "n2", (2, 3))), 9.0, "r", ("n0",), 7.0
    )
    assert codec.job_from_json(codec.job_to_json(job)) == job
    node = c.state.nodes["n1"]
    node.load = load()
    assert codec.node_from_json(codec.node_to_json(node)).load is None
    row = json.loads(codec.job_to_json(job))
    for name in ("losses", "migration_requested_at", "migration_target"):
        del row[name]  # a row written before these fields existed
    old = codec.job_from_json(json.dumps(row))
    assert (old.losses, old.migration_requested_at, old.migration_target) == ((), None, None)
