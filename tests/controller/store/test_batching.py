"""Batched store writes (issue 12 #2): lazy commits for agent reports, one durable commit for a
slice of launches, commands only after the commit that records them, a durable submit."""

from __future__ import annotations

import sqlite3

import pytest

from controller.commands import AckCommand, LaunchCommand
from controller.policy.fifo import FifoPolicy
from controller.scheduler import Scheduler
from controller.store import SqliteStore, StoreWriteError
from mlsched.model import Progress, TaskState
from tests.controller.conftest import Cluster, RecordingSink
from tests.controller.store.test_sqlite import simple_job


class CountingStore(SqliteStore):
    """Records every commit: (durable, wrote rows, commands sent before it)."""

    def __init__(self, path: str, sink: RecordingSink) -> None:
        super().__init__(path)
        self.sink = sink
        self.commits: list[tuple[bool, bool, int]] = []

    def _commit_now(self) -> None:
        self.commits.append((self._begun_durable, self._wrote, len(self.sink.sent)))
        super()._commit_now()

    def writes(self) -> list[tuple[bool, int]]:
        """(durable, commands sent before) of the commits that wrote something."""
        return [(durable, sent) for durable, wrote, sent in self.commits if wrote]


@pytest.fixture
def counted():
    sink = RecordingSink()
    store = CountingStore(":memory:", sink)
    c = Cluster(store=store)
    c.sink = sink
    c.state.send = sink
    c.scheduler = Scheduler(c.state, FifoPolicy(), launch_slice_s=3600.0)
    yield c
    store.close()


def test_a_cycle_launching_ten_jobs_commits_once_then_sends_the_launches(counted):
    c = counted
    c.add_node("n1", 10)
    jobs = [c.submit() for _ in range(10)]
    store: CountingStore = c.store  # type: ignore[assignment]
    store.commits.clear()
    c.cycle()
    assert [c.job(j.id).state.value for j in jobs] == ["STARTING"] * 10
    assert store.writes() == [(True, 0)]  # one durable commit, before any command
    assert len(c.sink.of(LaunchCommand)) == 10


def test_progress_commits_lazily_and_the_next_cycle_makes_it_durable(counted):
    c = counted
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    store: CountingStore = c.store  # type: ignore[assignment]
    store.commits.clear()
    for i in (1, 2, 3):
        c.events.progress("n1", job.id, 0, 1, Progress(10 * i, 1.0 / i, {}, 0.1, 32, 0.0))
    assert store.writes() == [(False, 1)] * 3
    assert c.store.load().jobs[job.id].iteration == 30  # committed, if not yet fsync'd
    c.cycle()
    assert store.writes()[-1][0] is True  # the cycle's flush


def test_an_ended_task_is_acknowledged_after_a_durable_commit(counted):
    c = counted
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.report(job.id, 0, TaskState.RUNNING)
    store: CountingStore = c.store  # type: ignore[assignment]
    store.commits.clear()
    sent_before = len(c.sink.sent)
    c.report(job.id, 0, TaskState.COMPLETED)
    assert c.job(job.id).state.value == "COMPLETED"
    assert [type(cmd) for _, cmd in c.sink.sent[sent_before:]] == [AckCommand]
    durable = [sent for is_durable, sent in store.writes() if is_durable]
    assert durable and durable[0] == sent_before  # on disk before the ack went out


def test_a_submit_is_durable_when_it_returns(counted):
    c = counted
    store: CountingStore = c.store  # type: ignore[assignment]
    c.submit()
    assert store.writes()[-1][0] is True


def test_a_lazy_transaction_that_raises_keeps_nothing():
    store = SqliteStore(":memory:")
    with pytest.raises(RuntimeError), store.transaction(durable=False):
        store.save_job(simple_job("j1", 1.0))
        raise RuntimeError("boom")
    assert store.load().jobs == {}
    store.close()


def test_a_full_disk_raises_store_write_error_and_keeps_the_old_state(tmp_path):
    store = SqliteStore(tmp_path / "s.db")
    store.save_job(simple_job("j1", 1.0))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full now
    big = simple_job("j2", 2.0)
    big.message = "x" * 200_000
    with pytest.raises(StoreWriteError) as caught:
        store.save_job(big)
    assert isinstance(caught.value, sqlite3.OperationalError)  # older handlers still catch it
    assert "full" in str(caught.value)
    assert list(store.load().jobs) == ["j1"]
    store.close()


def test_a_lazy_commit_is_visible_to_another_connection(tmp_path):
    """Committed, not pending: a crash of the controller process keeps it."""
    writer = SqliteStore(tmp_path / "s.db")
    with writer.transaction(durable=False):
        writer.save_job(simple_job("j1", 1.0))
    reader = SqliteStore(tmp_path / "s.db")
    assert list(reader.load().jobs) == ["j1"]
    writer.flush()
    reader.close()
    writer.close()
