"""PostgreSQL implementation of :class:`Store` (issue 12 #5): the same SQL as SQLite's.

Needs the ``postgres`` extra (psycopg 3). A durable commit waits for the WAL flush
(``synchronous_commit`` on, the server's default); a lazy one sets it off for its transaction
and reaches the disk with the next durable commit (PostgreSQL flushes the WAL in order).

A controller frozen inside a transaction (SIGSTOP, a paused VM, a long stall) would keep its
row locks, among them the ``FOR SHARE`` on the leader lease row that every leader transaction
takes, for as long as its connection lives, and a standby's takeover would wait on it forever.
So every connection asks the server to end a session left idle inside a transaction for
``FROZEN_TRANSACTION_S`` (``idle_in_transaction_session_timeout``): the locks go, the standby
takes over, and the frozen controller finds its connection gone when it wakes and steps down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.store.sql import SqlStore

try:
    import psycopg
    from psycopg.pq import TransactionStatus
except ImportError:  # pragma: no cover - the extra is not installed
    psycopg = None  # type: ignore[assignment]

# How long the server lets a session sit idle inside a transaction (module docstring). Our
# transactions run a few statements back to back; a controller idle in one this long has
# stalled, and with the default 15-s leader lease a standby is waiting for it.
FROZEN_TRANSACTION_S = 10.0


def connect(conninfo: str, frozen_transaction_s: float = FROZEN_TRANSACTION_S) -> Any:
    """An autocommit connection whose idle-in-transaction sessions the server ends after
    ``frozen_transaction_s`` (module docstring)."""
    if psycopg is None:
        raise RuntimeError("the PostgreSQL store needs psycopg 3: pip install 'mlsched[postgres]'")
    timeout_ms = max(1, round(frozen_transaction_s * 1000))
    return psycopg.connect(
        conninfo, autocommit=True, options=f"-c idle_in_transaction_session_timeout={timeout_ms}"
    )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, "user" TEXT NOT NULL, state TEXT NOT NULL,
    submit_time DOUBLE PRECISION NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, rank INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq BIGSERIAL PRIMARY KEY, time DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL, job_id TEXT NOT NULL, node_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events (time);
CREATE TABLE IF NOT EXISTS submit_requests (
    "user" TEXT NOT NULL, request_id TEXT NOT NULL, job_id TEXT NOT NULL,
    time DOUBLE PRECISION NOT NULL, PRIMARY KEY ("user", request_id));
CREATE INDEX IF NOT EXISTS submit_requests_by_time ON submit_requests (time);
CREATE TABLE IF NOT EXISTS jobs_archive (
    id TEXT PRIMARY KEY, "user" TEXT NOT NULL, state TEXT NOT NULL,
    submit_time DOUBLE PRECISION NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_archive_by_submit ON jobs_archive (submit_time, id);
CREATE TABLE IF NOT EXISTS tasks_archive (
    job_id TEXT NOT NULL, rank INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS events_archive (
    seq BIGINT PRIMARY KEY, time DOUBLE PRECISION NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL, job_id TEXT NOT NULL, node_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_archive_by_job ON events_archive (job_id, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (
    seq BIGSERIAL PRIMARY KEY, source TEXT NOT NULL, key TEXT NOT NULL,
    data TEXT NOT NULL, error TEXT NOT NULL);
"""


class PostgresStore(SqlStore):
    """One connection (``conninfo``: a libpq URL or key=value string) guarded by a lock."""

    postgres = True

    def __init__(self, conninfo: str, frozen_transaction_s: float = FROZEN_TRANSACTION_S) -> None:
        self._conn = connect(conninfo, frozen_transaction_s)
        super().__init__()
        self.write_errors = (psycopg.Error,)
        with self._lock, self.transaction():
            for statement in filter(str.strip, _SCHEMA.split(";")):
                self._conn.execute(statement)

    def _begin(self, durable: bool) -> None:
        self._conn.execute("BEGIN")
        if not durable:
            self._conn.execute("SET LOCAL synchronous_commit = off")

    def _commit_now(self) -> None:
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn.info.transaction_status != TransactionStatus.IDLE:
            self._conn.execute("ROLLBACK")

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql.replace("?", "%s"), tuple(args))

    def connection_lost(self) -> bool:
        return bool(self._conn.broken)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
