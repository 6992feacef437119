"""The leader lease (controller.store.lease, controller.leader) on SQLite and PostgreSQL, with
an injected clock: acquisition, renewal, expiry, self-fencing and the store's epoch check.

Lease 30 s from t = 1,000,000: a grant asked at t holds in the row until t + 30 and, by the
leader's own clock, until t + 30 - 3 (the 10 % margin)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from controller.clock import ManualClock
from controller.leader import LeaderLease, LeaseKeeper
from controller.store import NotLeader, SqliteStore, Store, StoreWriteError
from controller.store.lease import LeaseRecord, LeaseTable, claim, open_lease_table
from mlsched.model import Job, JobState
from tests.controller.conftest import make_spec
from tests.controller.store import pg_server

T0 = 1_000_000.0
LEASE_S = 30.0


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path) -> Iterator[tuple[Callable[[], LeaseTable], Callable[[], Store]]]:
    """(open a lease table, open a store) on one database; each call a new connection."""
    opened: list[LeaseTable | Store] = []

    def remember(thing):  # type: ignore[no-untyped-def]
        opened.append(thing)
        return thing

    if request.param == "sqlite":
        yield (
            lambda: remember(open_lease_table("", tmp_path)),
            lambda: remember(SqliteStore(tmp_path / "controller.db")),
        )
    else:
        import psycopg

        from controller.store.postgres import PostgresStore

        admin = request.getfixturevalue("postgres_server")
        with pg_server.database(admin) as conninfo:
            yield (
                lambda: remember(LeaseTable(psycopg.connect(conninfo, autocommit=True), True)),
                lambda: remember(PostgresStore(conninfo)),
            )
            for thing in opened:
                thing.close()
            opened.clear()
    for thing in opened:
        thing.close()


def candidate(table: LeaseTable, name: str, clock: ManualClock) -> LeaderLease:
    return LeaderLease(table, f"{name}:1", LEASE_S, now=clock.now, monotonic=clock.now, holder=name)


def test_claim_takes_a_free_or_expired_lease_and_extends_its_own():
    mine = LeaseRecord("a", 3, T0 + 30, "a:1")
    assert claim(None, "a", "a:1", T0, 30) == LeaseRecord("a", 1, T0 + 30, "a:1")
    assert claim(mine, "a", "a:1", T0 + 10, 30) == LeaseRecord("a", 3, T0 + 40, "a:1")
    assert claim(mine, "b", "b:1", T0 + 29, 30) is None  # still held
    assert claim(mine, "b", "b:1", T0 + 30, 30) == LeaseRecord("b", 4, T0 + 60, "b:1")


def test_the_first_candidate_leads_the_other_waits_and_names_it(database):
    open_table, _ = database
    clock = ManualClock(T0)
    a, b = candidate(open_table(), "a", clock), candidate(open_table(), "b", clock)
    assert a.try_acquire()
    assert a.epoch == 1
    clock.advance(10)
    assert not b.try_acquire()
    assert b.epoch == 0
    assert b.leader_address() == "a:1"
    assert b.retry_in_s() == 10.0  # a third of the lease, less than the 20 s a has left
    clock.advance(15)
    assert b.retry_in_s() == 10.0
    assert not b.try_acquire()
    assert b.retry_in_s() == 5.0  # a's row expires at T0 + 30


def test_renewal_extends_the_lease_and_expiry_hands_it_over(database):
    open_table, _ = database
    clock = ManualClock(T0)
    a, b = candidate(open_table(), "a", clock), candidate(open_table(), "b", clock)
    assert a.try_acquire()
    clock.advance(10)
    assert a.try_acquire()  # renewed at T0 + 10: the row holds until T0 + 40
    assert a.epoch == 1
    clock.advance(25)  # T0 + 35: past the first grant, within the renewal
    assert not b.try_acquire()
    clock.advance(5)  # T0 + 40: expired
    assert b.try_acquire()
    assert b.epoch == 2
    assert not a.try_acquire()  # a's renewal is refused: deposed for good
    assert a.deposed
    assert not a.proven()


def test_the_leader_stops_proving_its_lease_before_the_row_expires(database):
    open_table, _ = database
    clock = ManualClock(T0)
    a = candidate(open_table(), "a", clock)
    assert a.try_acquire()
    clock.advance(26.9)
    assert a.proven()
    a.check()
    assert a.remaining_s() == pytest.approx(0.1)
    clock.advance(0.1)  # T0 + 27 = T0 + 30 - 3: the row still has 3 s, the proof none
    assert not a.proven()
    with pytest.raises(NotLeader):
        a.check()


def test_a_deposed_leaders_store_writes_nothing(database):
    open_table, open_store = database
    clock = ManualClock(T0)
    a, b = candidate(open_table(), "a", clock), candidate(open_table(), "b", clock)
    store_a, store_b = open_store(), open_store()
    store_a.fence, store_b.fence = a, b
    assert a.try_acquire()
    job = Job("j1", "alice", make_spec("one"), JobState.PENDING, T0, T0)
    store_a.save_job(job)
    clock.advance(LEASE_S)
    assert b.try_acquire()  # a paused through its whole lease (its clock says so too)
    with pytest.raises(NotLeader):
        store_a.save_job(replace(job, id="j2"))
    with pytest.raises(NotLeader):
        store_a.append_event(clock.now(), "kind", "from the deposed leader")
    store_b.save_job(replace(job, id="j3"))
    assert sorted(store_b.load().jobs) == ["j1", "j3"]
    assert store_b.events_after(0) == []


def test_the_epoch_check_refuses_a_leader_whose_clock_still_believes(database):
    """A leader's clock running slow (or a lease taken by hand): the row's epoch decides."""
    open_table, open_store = database
    a_clock, b_clock = ManualClock(T0), ManualClock(T0 + LEASE_S)
    a, b = candidate(open_table(), "a", a_clock), candidate(open_table(), "b", b_clock)
    store_a = open_store()
    store_a.fence = a
    assert a.try_acquire()
    assert b.try_acquire()
    assert a.proven()  # by a's clock
    with pytest.raises(NotLeader, match="epoch is 1, the database's epoch 2"):
        store_a.forget_submit_requests(T0)


def test_a_released_lease_is_taken_at_once(database):
    open_table, _ = database
    clock = ManualClock(T0)
    a, b = candidate(open_table(), "a", clock), candidate(open_table(), "b", clock)
    assert a.try_acquire()
    a.release()
    assert not a.proven()
    assert b.try_acquire()
    assert b.epoch == 2


def test_the_keeper_renews_retries_and_gives_up(database):
    open_table, _ = database
    clock = ManualClock(T0)
    a, b = candidate(open_table(), "a", clock), candidate(open_table(), "b", clock)
    lost: list[str] = []
    keeper = LeaseKeeper(a, lost.append)
    assert a.try_acquire()
    assert keeper.step() == 10.0  # renewed: next in a third of the lease
    clock.advance(LEASE_S)
    assert b.try_acquire()
    assert keeper.step() is None  # deposed
    assert a.deposed


def test_the_keeper_retries_while_the_database_is_away(tmp_path):
    clock = ManualClock(T0)
    table = open_lease_table("", tmp_path)
    a = candidate(table, "a", clock)
    keeper = LeaseKeeper(a, lambda _reason: None)
    assert a.try_acquire()
    table.close()  # every claim now fails
    clock.advance(20)
    assert keeper.step() == 3.0  # a tenth of the lease; 7 s of proof left
    clock.advance(5)
    assert keeper.step() == pytest.approx(2.0)  # no more than the proof left
    clock.advance(2)
    assert keeper.step() is None


def test_the_keepers_watch_steps_down_when_the_proof_ends(tmp_path):
    """The watch thread, with real time: a lease of 0.3 s never renewed (the renewal thread is
    not started) ends by itself."""
    table = open_lease_table("", tmp_path)
    lease = LeaderLease(table, "a:1", 0.3, holder="a")
    assert lease.try_acquire()
    lost = threading.Event()
    keeper = LeaseKeeper(lease, lambda _reason: lost.set())
    thread = threading.Thread(target=keeper._watch)
    thread.start()
    assert lost.wait(30)
    thread.join()
    assert keeper.lost_reason == "the leader lease could not be renewed in time"
    assert not lease.proven()
    table.close()


def test_a_takeover_waits_for_the_leaders_transaction_in_flight(postgres_server):
    """PostgreSQL: the leader's transaction holds the lease row FOR SHARE, so a standby's claim
    (FOR UPDATE) waits for it; the write lands before the takeover and the new leader loads it."""
    import psycopg

    from controller.store.postgres import PostgresStore

    with pg_server.database(postgres_server) as conninfo:
        a_clock, b_clock = ManualClock(T0), ManualClock(T0 + LEASE_S)  # b sees a's lease over
        a = candidate(LeaseTable(psycopg.connect(conninfo, autocommit=True), True), "a", a_clock)
        b = candidate(LeaseTable(psycopg.connect(conninfo, autocommit=True), True), "b", b_clock)
        store_a, store_b = PostgresStore(conninfo), PostgresStore(conninfo)
        store_a.fence = a
        watcher = psycopg.connect(conninfo, autocommit=True)
        try:
            assert a.try_acquire()
            won: list[bool] = []
            claimer = threading.Thread(target=lambda: won.append(b.try_acquire()))
            job = Job("j1", "alice", make_spec("one"), JobState.PENDING, T0, T0)
            with store_a.transaction():
                claimer.start()
                wait_for_a_blocked_lock(watcher)
                assert won == []
                store_a.save_job(job)
            claimer.join(timeout=60)
            assert won == [True]
            assert b.epoch == 2
            assert list(store_b.load().jobs) == ["j1"]
            with pytest.raises(NotLeader):
                store_a.save_job(replace(job, id="j2"))
        finally:
            for thing in (store_a, store_b, watcher):
                thing.close()


def wait_for_a_blocked_lock(conn, timeout_s: float = 60.0) -> None:
    """Until some session of this database waits for a lock (pg_locks: not granted)."""
    deadline = time.monotonic() + timeout_s
    query = "SELECT count(*) FROM pg_locks WHERE NOT granted"
    while conn.execute(query).fetchone()[0] == 0:
        assert time.monotonic() < deadline, "the claim never waited for the leader's lock"
        time.sleep(0.01)


def test_a_leader_whose_store_connection_ended_gives_the_lease_up(postgres_server):
    """PostgreSQL ended the store's backend (a restart of it, an idle timeout): the leader could
    renew but never write again, so it releases the lease and the standby takes over at once."""
    import psycopg

    from controller.store.postgres import PostgresStore

    with pg_server.database(postgres_server) as conninfo:
        clock = ManualClock(T0)
        tables = [LeaseTable(psycopg.connect(conninfo, autocommit=True), True) for _ in "ab"]
        a, b = candidate(tables[0], "a", clock), candidate(tables[1], "b", clock)
        store = PostgresStore(conninfo)
        store.fence = a
        admin = psycopg.connect(conninfo, autocommit=True)
        keeper = LeaseKeeper(a, lambda _reason: None)
        keeper.watch_store(store.connection_lost)
        try:
            assert a.try_acquire()
            assert keeper.step() == 10.0
            admin.execute("SELECT pg_terminate_backend(%s)", (store._conn.info.backend_pid,))
            with pytest.raises(StoreWriteError):
                store.forget_submit_requests(T0)
            assert store.connection_lost()
            assert keeper.step() is None
            assert not a.proven()
            assert b.try_acquire()  # the clock never moved: released, not expired
            assert b.epoch == 2
        finally:
            for thing in (store, admin):
                thing.close()


def test_a_lease_connection_the_database_ended_is_seen_as_lost(postgres_server):
    """What makes a standby exit for its service manager to start afresh (controller.standby)."""
    import psycopg

    with pg_server.database(postgres_server) as conninfo:
        table = LeaseTable(psycopg.connect(conninfo, autocommit=True), True)
        b = candidate(table, "b", ManualClock(T0))
        with psycopg.connect(conninfo, autocommit=True) as admin:
            assert b.try_acquire()
            assert not b.connection_lost()
            admin.execute("SELECT pg_terminate_backend(%s)", (table._conn.info.backend_pid,))
            with pytest.raises(psycopg.OperationalError):
                b.try_acquire()
            assert b.connection_lost()
        table.close()


def test_a_leader_frozen_inside_a_transaction_does_not_block_the_takeover(request):
    """A leader stopped mid-transaction (SIGSTOP, a paused VM) holds the lease row ``FOR
    SHARE`` while its connection lives; the server ends its session after the frozen-
    transaction limit (``postgres.FROZEN_TRANSACTION_S``, 0.5 s here), the standby takes
    over, and the leader finds its connection gone when it wakes."""
    import psycopg

    from controller.store.postgres import PostgresStore

    reason = pg_server.missing()
    if reason is not None:
        pytest.skip(reason)
    admin = request.getfixturevalue("postgres_server")
    with pg_server.database(admin) as conninfo:
        clock = ManualClock(T0)
        tables = [LeaseTable(psycopg.connect(conninfo, autocommit=True), True) for _ in "ab"]
        a, b = candidate(tables[0], "a", clock), candidate(tables[1], "b", clock)
        store_a = PostgresStore(conninfo, frozen_transaction_s=0.5)
        store_a.fence = a
        assert a.try_acquire()
        inside, wake = threading.Event(), threading.Event()
        outcome: list[BaseException | None] = []

        def frozen_leader() -> None:
            try:
                with store_a.transaction():  # reads the lease row FOR SHARE, then stalls
                    inside.set()
                    wake.wait(60)
                    store_a.append_event(clock.now(), "kind", "after the stall")
                outcome.append(None)
            except BaseException as exc:  # what the leader meets on waking
                outcome.append(exc)

        leader = threading.Thread(target=frozen_leader, daemon=True)
        leader.start()
        assert inside.wait(30)
        clock.advance(LEASE_S)
        claimed: list[bool] = []
        standby = threading.Thread(target=lambda: claimed.append(b.try_acquire()), daemon=True)
        standby.start()
        standby.join(30)  # without the limit it waits on a's row lock for as long as a sleeps
        assert claimed == [True] and b.epoch == 2
        wake.set()
        leader.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], StoreWriteError), outcome
        assert store_a.connection_lost()
        assert b.current is not None and b.current.holder == "b"
        for table in tables:
            table.close()
        store_a.close()
