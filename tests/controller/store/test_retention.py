"""Retention and paging (issue 12 #3): finished jobs past the retention age leave memory for the
archive and are still found; ListJobs pages stay small and list every job once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller import paging
from controller.errors import InvalidArgument
from controller.state import ControllerState
from controller.store import SqliteStore
from mlsched import serde
from mlsched.model import JobState, TaskState
from tests.controller.conftest import SETTINGS, Cluster, RecordingSink, make_spec
from tests.controller.store.test_sqlite import simple_job, tasks_of

DAY = 24 * 3600.0


# --- the store's archive ---------------------------------------------------------------------
def test_archived_jobs_leave_load_and_are_found_with_their_tasks():
    store = SqliteStore(":memory:")
    for i, state in enumerate([JobState.COMPLETED, JobState.RUNNING, JobState.FAILED]):
        store.save_job(simple_job(f"j{i}", float(i), state))
        store.save_tasks(f"j{i}", tasks_of(f"j{i}"))
    store.archive_jobs(["j0", "j2"])
    loaded = store.load()
    assert list(loaded.jobs) == ["j1"] and list(loaded.tasks) == ["j1"]
    job, tasks = store.archived_job("j2")
    assert job == simple_job("j2", 2.0, JobState.FAILED)
    assert tasks == tasks_of("j2")
    assert store.archived_job("j1") is None
    store.close()


def test_archived_jobs_page_in_submit_order_with_filters():
    store = SqliteStore(":memory:")
    for i in range(6):
        state = JobState.COMPLETED if i % 2 else JobState.CANCELLED
        store.save_job(replace(simple_job(f"j{i}", float(i // 2), state), user=f"u{i % 3}"))
    store.archive_jobs([f"j{i}" for i in range(6)])
    # submit times 0,0,1,1,2,2: ties ordered by id
    ids = [j.id for j, _ in store.archived_jobs(None, 10)]
    assert ids == ["j0", "j1", "j2", "j3", "j4", "j5"]
    assert [j.id for j, _ in store.archived_jobs((1.0, "j2"), 2)] == ["j3", "j4"]
    assert [j.id for j, _ in store.archived_jobs(None, 10, ["COMPLETED"])] == ["j1", "j3", "j5"]
    assert [j.id for j, _ in store.archived_jobs(None, 10, (), "u0")] == ["j0", "j3"]
    store.close()


def test_archived_events_are_still_returned_in_order():
    store = SqliteStore(":memory:")
    for t in (1.0, 2.0, 3.0, 4.0):
        store.append_event(t, "k", f"at {t}", job_id="j1" if t != 2.0 else "j2")
    assert store.archive_events(before=3.0) == 2
    assert [e.time for e in store.events_after(0)] == [1.0, 2.0, 3.0, 4.0]
    assert [e.seq for e in store.events_after(1, limit=2)] == [2, 3]
    assert [e.time for e in store.events_after(0, "j1")] == [1.0, 3.0, 4.0]
    assert store.append_event(5.0, "k", "new").seq == 5  # numbers are never reused
    store.close()


# --- the controller's retention -------------------------------------------------------------
def finished_job(c: Cluster) -> str:
    c.advance(1.0, heartbeat=True)  # one submit time each
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    c.report(job.id, 0, TaskState.COMPLETED)
    assert c.job(job.id).state is JobState.COMPLETED
    return job.id


def test_a_finished_job_moves_to_the_archive_after_the_retention_age(make_cluster):
    c = make_cluster(settings=replace(SETTINGS, retain_finished_s=DAY))
    c.add_node("n1", 1)
    done = finished_job(c)
    c.advance(1.0)
    live = c.submit()
    c.advance(DAY - 2.0, heartbeat=True)
    c.cycle()
    assert done in c.state.jobs  # not old enough yet
    c.advance(2.0, heartbeat=True)
    c.cycle()
    assert done not in c.state.jobs and done not in c.state.tasks
    assert live.id in c.state.jobs
    job, tasks = c.jobs.get(done)  # `mlsched describe` still finds it
    assert job.state is JobState.COMPLETED and [t.state for t in tasks] == [TaskState.COMPLETED]
    assert [j.id for j, _ in c.jobs.list()] == [done, live.id]  # and `jobs --all`
    assert [j.id for j, _ in c.jobs.list([JobState.COMPLETED])] == [done]
    kinds = [e.kind for e in c.store.events_after(0, done)]
    assert kinds[0] == "job_submitted" and "job_state" in kinds


def test_a_restarted_controller_loads_only_live_jobs(make_cluster, tmp_path):
    path = tmp_path / "state.db"
    c = make_cluster(path, settings=replace(SETTINGS, retain_finished_s=60.0))
    c.add_node("n1", 1)
    done = finished_job(c)
    c.advance(61.0, heartbeat=True)
    c.cycle()
    c.store.close()
    store = SqliteStore(path)
    state = ControllerState(store, c.clock, RecordingSink(), SETTINGS)
    assert done not in state.jobs
    assert store.archived_job(done)[0].state is JobState.COMPLETED
    store.close()


def test_without_retention_finished_jobs_stay_live(make_cluster):
    c = make_cluster(settings=replace(SETTINGS, retain_finished_s=None))
    c.add_node("n1", 1)
    done = finished_job(c)
    c.advance(365 * DAY, heartbeat=True)
    c.cycle()
    assert done in c.state.jobs


# --- paging ----------------------------------------------------------------------------------
def all_pages(c: Cluster, size: int, user: str = "") -> list[list[str]]:
    """What a client following next_page_token receives, page by page."""
    pages, token = [], ""
    while True:
        page_size = paging.page_size(size)
        jobs = c.jobs.list_page((), user, paging.decode_token(token), page_size + 1)
        msgs, token = paging.fill(jobs, page_size, serde.job_to_proto)
        assert sum(m.ByteSize() for m in msgs) <= paging.MAX_PAGE_BYTES or len(msgs) == 1
        pages.append([m.id for m in msgs])
        if not token:
            return pages


def test_pages_list_live_and_archived_jobs_once_in_submit_order(make_cluster):
    c = make_cluster(settings=replace(SETTINGS, retain_finished_s=60.0))
    c.add_node("n1", 1)
    done = [finished_job(c) for _ in range(3)]
    c.advance(61.0, heartbeat=True)
    c.cycle()
    live = []
    for _ in range(4):
        c.advance(1.0)
        live.append(c.submit().id)
    assert all(j not in c.state.jobs for j in done)
    assert all_pages(c, 3) == [done, live[:3], live[3:]]
    assert all_pages(c, 0) == [done + live]  # 0: the default size


def test_a_page_stops_below_the_byte_budget_whatever_the_jobs_sizes(cluster):
    env = tuple((f"K{i}", "v" * 1000) for i in range(300))  # ~300 KB per job
    ids = [cluster.jobs.submit("alice", replace(make_spec(), env=env)).id for _ in range(10)]
    pages = all_pages(cluster, 1000)
    assert [j for page in pages for j in page] == sorted(ids)  # one submit time: by id
    assert all(1 <= len(page) <= 3 for page in pages)  # 3 x 300 KB < 1 MiB < 4 x 300 KB


@pytest.mark.parametrize("token", ["nonsense", "W10=", "WyJhIiwgMV0="])  # junk, [], ["a", 1]
def test_a_page_token_the_server_did_not_make_is_invalid(token):
    with pytest.raises(InvalidArgument, match="page_token"):
        paging.decode_token(token)


def test_a_negative_page_size_is_invalid():
    with pytest.raises(InvalidArgument, match="page_size"):
        paging.page_size(-1)
