"""JobOperations: submit, get, list, cancel, nodes and log locations."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace

import pytest

from controller.commands import AckCommand
from controller.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from controller.store import SqliteStore
from mlsched.model import Deadline, JobClass, JobState, Progress, TaskState

T0 = 1_000.0


class FailingEventsStore(SqliteStore):
    """A store whose event log fails once armed (e.g. disk full)."""

    fail = False
    error = "database or disk is full"

    def append_event(self, *args, **kwargs):
        if self.fail:
            raise sqlite3.OperationalError(self.error)
        return super().append_event(*args, **kwargs)


# --- submit ----------------------------------------------------------------------------------


def test_submit_creates_a_durable_pending_job(cluster):
    c = cluster
    c.advance(5.0)
    job = c.jobs.submit("alice", c.spec("mnist", 2))
    assert re.fullmatch(r"j-[0-9a-f]{8}", job.id)
    assert job.state is JobState.PENDING
    assert job.user == "alice"
    assert job.submit_time == job.queued_since == T0 + 5.0
    assert (job.attempt, job.suspensions, job.failures) == (0, 0, 0)
    assert c.state.jobs[job.id] is job
    assert c.store.load().jobs == {job.id: job}
    [event] = c.store.events_after(0, job.id)
    assert (event.kind, event.message, event.time) == (
        "job_submitted",
        "mnist by alice: 2 GPU(s), best-effort",
        T0 + 5.0,
    )


def test_submitted_jobs_get_distinct_ids(cluster):
    ids = {cluster.submit().id for _ in range(50)}
    assert len(ids) == 50


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": 3, "gpus_per_process": 2}, "gpus_per_process"),
        ({"name": "bad name!"}, "name"),
        ({"command": ()}, "command"),
        ({"job_class": JobClass.STRICT_SLO}, "deadlines"),
        ({"deadlines": (Deadline(60.0, 1.0),)}, "deadlines"),
        ({"max_retries": -1}, "max_retries"),
        ({"env": (("MLSCHED_TOKEN", "x"),)}, "env"),
    ],
)
def test_submit_rejects_invalid_specs(cluster, change, field):
    spec = replace(cluster.spec(), **change)
    with pytest.raises(InvalidArgument, match=field):
        cluster.jobs.submit("alice", spec)
    assert cluster.state.jobs == {}
    assert cluster.store.load().jobs == {}
    assert cluster.store.events_after(0) == []


def test_a_submit_that_cannot_be_stored_leaves_no_job_behind(make_cluster):
    store = FailingEventsStore(":memory:")
    c = make_cluster(store=store)
    store.fail = True
    with pytest.raises(ResourceExhausted, match="state disk is full"):  # RESOURCE_EXHAUSTED
        c.submit()
    assert c.store.load().jobs == {}  # rolled back...
    assert c.state.jobs == {}  # ...and not left in memory either
    store.fail = False
    c.submit()  # room again: accepted


def test_a_store_error_other_than_a_full_disk_is_not_called_one(make_cluster):
    store = FailingEventsStore(":memory:")
    store.error = "disk I/O error"
    c = make_cluster(store=store)
    store.fail = True
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):  # UNAVAILABLE
        c.submit()


# --- get and list ----------------------------------------------------------------------------


def test_get_returns_the_job_and_a_copy_of_its_tasks(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = c.submit(gpus=2)
    c.cycle()
    got, tasks = c.jobs.get(job.id)
    assert got is job
    assert [(t.rank, t.node_id) for t in tasks] == [(0, "n1"), (1, "n1")]
    tasks.clear()
    assert len(c.tasks(job.id)) == 2


def test_get_unknown_job(cluster):
    with pytest.raises(NotFound, match="no job 'j-nope'"):
        cluster.jobs.get("j-nope")


def test_list_orders_by_submission_and_filters(cluster):
    c = cluster
    c.add_node("n1", 1)
    a = c.submit(user="alice")
    c.advance(1.0)
    b = c.submit(user="bob")
    c.advance(1.0)
    d = c.submit(user="alice")
    c.cycle()  # a starts
    c.jobs.cancel("alice", d.id)

    def ids(**kw):
        return [job.id for job, _ in c.jobs.list(**kw)]

    assert ids() == [a.id, b.id, d.id]
    assert ids(user="alice") == [a.id, d.id]
    assert ids(states=[JobState.PENDING]) == [b.id]
    assert ids(states={JobState.STARTING, JobState.CANCELLED}) == [a.id, d.id]
    assert ids(states=[JobState.CANCELLED], user="bob") == []
    [(job, tasks)] = c.jobs.list(states=[JobState.STARTING])
    assert job is a and [t.node_id for t in tasks] == ["n1"]


def test_list_breaks_submit_time_ties_by_id(cluster):
    jobs = [cluster.submit() for _ in range(5)]
    assert [j.id for j, _ in cluster.jobs.list()] == sorted(j.id for j in jobs)


# --- cancel ----------------------------------------------------------------------------------


def test_cancel_checks_the_owner(cluster):
    job = cluster.submit(user="alice")
    with pytest.raises(PermissionDenied, match="belongs to 'alice', not 'mallory'"):
        cluster.jobs.cancel("mallory", job.id)
    assert job.state is JobState.PENDING


def test_cancel_unknown_job(cluster):
    with pytest.raises(NotFound):
        cluster.jobs.cancel("alice", "j-nope")


@pytest.mark.parametrize("final", [JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED])
def test_cancel_of_an_ended_job_is_a_failed_precondition(cluster, final):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    if final is JobState.CANCELLED:
        c.jobs.cancel("alice", job.id)
    else:
        c.cycle()
        c.report(job.id, 0, TaskState.RUNNING)
        c.report(
            job.id, 0, TaskState.COMPLETED if final is JobState.COMPLETED else TaskState.FAILED
        )
    assert job.state is final
    with pytest.raises(FailedPrecondition, match=f"already ended: {final.value}"):
        c.jobs.cancel("alice", job.id)


def test_cancel_while_cancelling_is_allowed(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.jobs.cancel("alice", job.id)
    c.sink.clear()
    assert c.jobs.cancel("alice", job.id) is job
    assert job.state is JobState.CANCELLING
    assert c.sink.kinds() == ["KillCommand"]


# --- nodes and logs --------------------------------------------------------------------------


def test_nodes_lists_busy_gpus_per_node(cluster):
    c = cluster
    c.add_node("n2", 4)
    c.add_node("n1", 2)
    c.submit(gpus=3)
    c.cycle()  # best fit: only n2 has 3 free
    assert [(n.id, busy) for n, busy in c.jobs.nodes()] == [("n1", []), ("n2", [0, 1, 2])]


def test_log_location(cluster):
    c = cluster
    c.add_node("n1", 1)
    c.add_node("n2", 1)
    job = c.submit(gpus=2)
    with pytest.raises(FailedPrecondition, match="has not run yet"):
        c.jobs.log_location(job.id, 0)
    c.cycle()
    node, task = c.jobs.log_location(job.id, 1)
    assert (node, task.rank) == ("n2", 1)
    with pytest.raises(NotFound, match=r"has no rank 2 \(ranks 0-1\)"):
        c.jobs.log_location(job.id, 2)
    with pytest.raises(NotFound):
        c.jobs.log_location("j-nope", 0)


# --- idempotent submit (issue 11 #10) -------------------------------------------------------


def test_a_repeated_request_id_returns_the_same_job(cluster):
    c = cluster
    first = c.jobs.submit("alice", c.spec("mnist"), request_id="req-1")
    again = c.jobs.submit("alice", c.spec("mnist"), request_id="req-1")
    assert again.id == first.id
    assert len(c.state.jobs) == 1
    assert c.event_kinds().count("job_submitted") == 1
    # Another request id, no request id, or another user's same id: new jobs.
    other = c.jobs.submit("alice", c.spec("mnist"), request_id="req-2")
    plain = [c.jobs.submit("alice", c.spec("mnist")) for _ in range(2)]
    bobs = c.jobs.submit("bob", c.spec("mnist"), request_id="req-1")
    assert len({first.id, other.id, bobs.id, *(j.id for j in plain)}) == 5


def test_request_ids_survive_a_restart_and_are_forgotten_after_the_retention(
    make_cluster, tmp_path
):
    path = tmp_path / "controller.db"
    c = make_cluster(path)
    first = c.jobs.submit("alice", c.spec(), request_id="req-1")
    c.store.close()
    retention_s = c.state.settings.submit_request_retention_s

    restarted = make_cluster(path, clock=c.clock)
    assert restarted.jobs.submit("alice", c.spec(), request_id="req-1").id == first.id
    restarted.advance(retention_s + 1.0)
    late = restarted.jobs.submit("alice", c.spec(), request_id="req-1")
    assert late.id != first.id
    rows = restarted.store._conn.execute("SELECT job_id FROM submit_requests").fetchall()
    assert rows == [(late.id,)]  # the expired row was pruned


@pytest.mark.parametrize("request_id", ["x" * 129, "a\x00b", "line\n"])
def test_a_bad_request_id_is_invalid_argument(cluster, request_id):
    with pytest.raises(InvalidArgument, match="request_id"):
        cluster.jobs.submit("alice", cluster.spec(), request_id=request_id)
    assert cluster.state.jobs == {}


# --- a full disk (issue 11 #6) ----------------------------------------------------------------


def test_a_cancel_that_cannot_be_stored_changes_nothing_and_kills_nothing(make_cluster):
    store = FailingEventsStore(":memory:")
    c = make_cluster(store=store)
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    c.sink.clear()
    store.fail = True
    with pytest.raises(sqlite3.OperationalError):
        c.jobs.cancel("alice", job.id)
    assert job.state is JobState.RUNNING  # memory as on disk
    assert c.store.load().jobs[job.id].state is JobState.RUNNING
    assert c.sink.sent == []  # no kill went out for a cancel that did not happen
    store.fail = False
    c.jobs.cancel("alice", job.id)  # the retry works
    assert job.state is JobState.CANCELLING
    assert c.sink.kinds() == ["KillCommand"]


def test_a_stop_that_cannot_be_stored_changes_nothing(make_cluster):
    store = FailingEventsStore(":memory:")
    c = make_cluster(store=store)
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    store.fail = True
    with pytest.raises(sqlite3.OperationalError):
        c.jobs.stop("alice", job.id)
    assert job.stop_requested == ""


class FullDiskStore(FailingEventsStore):
    """Every write fails once armed."""

    def _check(self) -> None:
        if self.fail:
            raise sqlite3.OperationalError("database or disk is full")

    def save_job(self, job):
        self._check()
        super().save_job(job)

    def save_tasks(self, job_id, tasks):
        self._check()
        super().save_tasks(job_id, tasks)

    def save_node(self, node):
        self._check()
        super().save_node(node)


def test_an_agent_stays_registered_while_the_disk_is_full(make_cluster):
    store = FullDiskStore(":memory:")
    c = make_cluster(store=store)
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    store.fail = True
    running = c.report_of(job.id, 0, TaskState.RUNNING)
    c.events.register(c.node("n1", 1), [running])  # no exception: the session goes on
    assert c.state.nodes["n1"].alive and "n1" in c.state.connected
    c.sink.clear()
    c.report(job.id, 0, TaskState.COMPLETED)  # cannot be stored...
    assert c.task(job.id).state is TaskState.RUNNING  # ...so memory did not move either
    assert c.sink.of(AckCommand) == []  # and the agent keeps the end to report it again
    c.events.progress("n1", job.id, 0, 1, Progress(5, 1.0, {}, 0.1, 32, c.clock.now()))
    assert job.iteration == 0
    store.fail = False
    c.report(job.id, 0, TaskState.COMPLETED)
    assert job.state is JobState.COMPLETED
    assert c.sink.of(AckCommand)
