"""SQLite (WAL) implementation of :class:`Store`: the controller's default."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.store.sql import SqlStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, "user" TEXT NOT NULL, state TEXT NOT NULL,
    submit_time REAL NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL, rank INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL, job_id TEXT NOT NULL, node_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, seq);
CREATE TABLE IF NOT EXISTS submit_requests (
    "user" TEXT NOT NULL, request_id TEXT NOT NULL, job_id TEXT NOT NULL, time REAL NOT NULL,
    PRIMARY KEY ("user", request_id));
CREATE INDEX IF NOT EXISTS submit_requests_by_time ON submit_requests (time);
CREATE TABLE IF NOT EXISTS jobs_archive (
    id TEXT PRIMARY KEY, "user" TEXT NOT NULL, state TEXT NOT NULL,
    submit_time REAL NOT NULL, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_archive_by_submit ON jobs_archive (submit_time, id);
CREATE TABLE IF NOT EXISTS tasks_archive (
    job_id TEXT NOT NULL, rank INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (job_id, rank));
CREATE TABLE IF NOT EXISTS events_archive (
    seq INTEGER PRIMARY KEY, time REAL NOT NULL, kind TEXT NOT NULL,
    message TEXT NOT NULL, job_id TEXT NOT NULL, node_id TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_archive_by_job ON events_archive (job_id, seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events (time);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL);
CREATE TABLE IF NOT EXISTS quarantine (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, key TEXT NOT NULL,
    data TEXT NOT NULL, error TEXT NOT NULL);
"""


class SqliteStore(SqlStore):
    """One connection guarded by a lock. ``path=":memory:"`` for tests."""

    write_errors = (sqlite3.Error,)

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL for a durable commit: on disk when it returns, across power loss too; NORMAL (a
        # lazy commit) in WAL mode survives process crashes and reaches the disk with the next
        # FULL commit's fsync of the WAL. Measured on this ext4 disk: ~4 ms a FULL commit
        # against ~0.02 ms.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._sync_full = True
        self._conn.execute("PRAGMA busy_timeout=5000")
        self._conn.executescript(_SCHEMA)

    def _begin(self, durable: bool) -> None:
        if durable != self._sync_full:  # not allowed inside a transaction
            self._conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._sync_full = durable
        self._conn.execute("BEGIN IMMEDIATE")

    def _commit_now(self) -> None:
        self._conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn.in_transaction:  # SQLITE_FULL has rolled it back already
            self._conn.execute("ROLLBACK")

    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        return self._conn.execute(sql, args)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
