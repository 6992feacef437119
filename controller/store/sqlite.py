"""SQLite (WAL) implementation of :class:`Store`: the controller's default."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from controller.store import codec
from controller.store.base import JobKey, QuarantinedRow, Store, StoredState, StoreWriteError
from mlsched.model import Event, Job, Node, Task

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, state TEXT NOT NULL,
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
    user TEXT NOT NULL, request_id TEXT NOT NULL, job_id TEXT NOT NULL, time REAL NOT NULL,
    PRIMARY KEY (user, request_id));
CREATE INDEX IF NOT EXISTS submit_requests_by_time ON submit_requests (time);
CREATE TABLE IF NOT EXISTS jobs_archive (
    id TEXT PRIMARY KEY, user TEXT NOT NULL, state TEXT NOT NULL,
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

# What a row that does not decode raises (bad JSON, a missing key, a wrong type or enum value).
_DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


class SqliteStore(Store):
    """Thread-safe; one connection guarded by a lock. ``path=":memory:"`` for tests."""

    def __init__(self, path: str | Path) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._durable = False  # a level of the open transaction asked for a durable commit
        self._unsynced = 0  # lazy commits since the last durable one
        self._begun_durable = True
        self._changes_at_begin = 0
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

    def load(self) -> StoredState:
        """Everything that decodes. A row that does not is moved to the ``quarantine`` table
        (with the tasks of a job whose row is bad) and described in ``quarantined``."""
        state = StoredState()
        with self._lock, self.transaction():
            for job_id, data in self._conn.execute(
                "SELECT id, data FROM jobs ORDER BY submit_time, id"
            ).fetchall():
                try:
                    state.jobs[job_id] = codec.job_from_json(data)
                except _DECODE_ERRORS as exc:
                    self._quarantine(state, "jobs", job_id, data, exc, job_id=job_id)
            rows = self._conn.execute("SELECT job_id, rank, data FROM tasks ORDER BY job_id, rank")
            for job_id, rank, data in rows.fetchall():
                key = f"{job_id}/{rank}"
                if any(q.source == "jobs" and q.key == job_id for q in state.quarantined):
                    self._quarantine(state, "tasks", key, data, "its job is quarantined", job_id)
                    continue
                try:
                    task = codec.task_from_json(data)
                except _DECODE_ERRORS as exc:
                    self._quarantine(state, "tasks", key, data, exc, job_id=job_id)
                    continue
                state.tasks.setdefault(job_id, []).append(task)
            for node_id, data in self._conn.execute("SELECT id, data FROM nodes ORDER BY id"):
                try:
                    state.nodes[node_id] = codec.node_from_json(data)
                except _DECODE_ERRORS as exc:
                    self._quarantine(state, "nodes", node_id, data, exc, node_id=node_id)
        return state

    def _quarantine(
        self,
        state: StoredState,
        source: str,
        key: str,
        data: str,
        error: object,
        job_id: str = "",
        node_id: str = "",
    ) -> None:
        reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._conn.execute(
            "INSERT INTO quarantine (source, key, data, error) VALUES (?, ?, ?, ?)",
            (source, key, data, reason),
        )
        if source == "tasks":
            job, rank = key.rsplit("/", 1)
            self._conn.execute("DELETE FROM tasks WHERE job_id = ? AND rank = ?", (job, int(rank)))
        else:
            self._conn.execute(f"DELETE FROM {source} WHERE id = ?", (key,))  # a fixed name
        state.quarantined.append(QuarantinedRow(source, key, reason, job_id, node_id))

    @contextmanager
    def transaction(self, durable: bool = True) -> Iterator[None]:
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._durable = self._begun_durable = durable
                self._set_sync(durable)  # not allowed inside a transaction
                self._conn.execute("BEGIN IMMEDIATE")
                self._changes_at_begin = self._conn.total_changes
            self._depth += 1
            self._durable = self._durable or durable
            try:
                yield
            except BaseException as exc:
                self._depth -= 1
                if outer and self._conn.in_transaction:  # SQLITE_FULL has rolled it back
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error) and not isinstance(exc, StoreWriteError):
                    raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
                raise
            self._depth -= 1
            if outer:
                self._commit()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """A single save: part of the open transaction, or a durable one of its own."""
        with self._lock:
            if self._depth > 0:
                yield
                return
            with self.transaction():
                yield

    def _set_sync(self, durable: bool) -> None:
        if durable != self._sync_full:
            self._conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._sync_full = durable

    def _commit(self) -> None:
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:  # e.g. SQLITE_FULL at commit: leave no open transaction
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
        if self._conn.total_changes != self._changes_at_begin:  # no rows, no WAL, no fsync
            self._unsynced = 0 if self._begun_durable else self._unsynced + 1
        if self._durable and self._unsynced > 0:  # upgraded inside, or it wrote nothing
            self.flush()

    def mark_durable(self) -> None:
        with self._lock:
            if self._depth > 0:
                self._durable = True

    def flush(self) -> None:
        with self._lock:
            if self._unsynced == 0:
                return
            with self._write():
                self._conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('flushed', ?)",
                    (float(self._unsynced),),
                )

    def save_job(self, job: Job) -> None:
        with self._write():
            self._conn.execute(
                "INSERT OR REPLACE INTO jobs (id, user, state, submit_time, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (job.id, job.user, job.state.value, job.submit_time, codec.job_to_json(job)),
            )

    def save_tasks(self, job_id: str, tasks: list[Task]) -> None:
        with self._write():
            self._conn.execute("DELETE FROM tasks WHERE job_id = ?", (job_id,))
            self._conn.executemany(
                "INSERT INTO tasks (job_id, rank, data) VALUES (?, ?, ?)",
                [(job_id, t.rank, codec.task_to_json(t)) for t in tasks],
            )

    def save_node(self, node: Node) -> None:
        with self._write():
            self._conn.execute(
                "INSERT OR REPLACE INTO nodes (id, data) VALUES (?, ?)",
                (node.id, codec.node_to_json(node)),
            )

    def save_submit_request(self, user: str, request_id: str, job_id: str, time: float) -> None:
        with self._write():
            self._conn.execute(
                "INSERT OR REPLACE INTO submit_requests (user, request_id, job_id, time) "
                "VALUES (?, ?, ?, ?)",
                (user, request_id, job_id, time),
            )

    def submit_request_job(self, user: str, request_id: str, since: float) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT job_id FROM submit_requests"
                " WHERE user = ? AND request_id = ? AND time >= ?",
                (user, request_id, since),
            ).fetchone()
        return row[0] if row else None

    def forget_submit_requests(self, before: float) -> int:
        with self._write():
            cur = self._conn.execute("DELETE FROM submit_requests WHERE time < ?", (before,))
        return cur.rowcount

    def append_event(
        self, time: float, kind: str, message: str, job_id: str = "", node_id: str = ""
    ) -> Event:
        with self._write():
            cur = self._conn.execute(
                "INSERT INTO events (time, kind, message, job_id, node_id) VALUES (?, ?, ?, ?, ?)",
                (time, kind, message, job_id, node_id),
            )
            seq = cur.lastrowid
        assert seq is not None
        return Event(seq=seq, time=time, kind=kind, message=message, job_id=job_id, node_id=node_id)

    def events_after(self, seq: int, job_id: str = "", limit: int = 1000) -> list[Event]:
        where = "seq > ?" + (" AND job_id = ?" if job_id else "")
        args: list[object] = [seq, job_id] if job_id else [seq]
        columns = "seq, time, kind, message, job_id, node_id"
        query = (
            f"SELECT {columns} FROM events_archive WHERE {where} UNION ALL "
            f"SELECT {columns} FROM events WHERE {where} ORDER BY seq LIMIT ?"
        )
        with self._lock:
            rows = self._conn.execute(query, [*args, *args, limit]).fetchall()
        return [
            Event(seq=r[0], time=r[1], kind=r[2], message=r[3], job_id=r[4], node_id=r[5])
            for r in rows
        ]

    # --- retention --------------------------------------------------------------------------
    def archive_jobs(self, job_ids: Sequence[str]) -> None:
        with self._write():
            for job_id in job_ids:
                for table in ("jobs", "tasks"):
                    key = "id" if table == "jobs" else "job_id"
                    self._conn.execute(  # fixed names
                        f"INSERT OR REPLACE INTO {table}_archive SELECT * FROM {table}"
                        f" WHERE {key} = ?",
                        (job_id,),
                    )
                    self._conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (job_id,))

    def archive_events(self, before: float) -> int:
        with self._write():
            self._conn.execute(
                "INSERT OR REPLACE INTO events_archive SELECT * FROM events WHERE time < ?",
                (before,),
            )
            cur = self._conn.execute("DELETE FROM events WHERE time < ?", (before,))
        return cur.rowcount

    def archived_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT data FROM jobs_archive WHERE id = ?", (job_id,)
            ).fetchone()
            if row is None:
                return None
            tasks = self._conn.execute(
                "SELECT data FROM tasks_archive WHERE job_id = ? ORDER BY rank", (job_id,)
            ).fetchall()
        return codec.job_from_json(row[0]), [codec.task_from_json(t[0]) for t in tasks]

    def archived_jobs(
        self, after: JobKey | None, limit: int, states: Collection[str] = (), user: str = ""
    ) -> list[tuple[Job, list[Task]]]:
        query = "SELECT id, data FROM jobs_archive WHERE 1 = 1"
        args: list[object] = []
        if after is not None:
            query += " AND (submit_time > ? OR (submit_time = ? AND id > ?))"
            args += [after[0], after[0], after[1]]
        if states:
            query += f" AND state IN ({', '.join('?' for _ in states)})"
            args += list(states)
        if user:
            query += " AND user = ?"
            args.append(user)
        query += " ORDER BY submit_time, id LIMIT ?"
        args.append(limit)
        with self._lock:
            rows = self._conn.execute(query, args).fetchall()
            out = []
            for job_id, data in rows:
                tasks = self._conn.execute(
                    "SELECT data FROM tasks_archive WHERE job_id = ? ORDER BY rank", (job_id,)
                ).fetchall()
                out.append((codec.job_from_json(data), [codec.task_from_json(t[0]) for t in tasks]))
        return out

    def close(self) -> None:
        with self._lock:
            self._conn.close()
