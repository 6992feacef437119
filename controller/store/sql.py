"""The SQL both stores share (SQLite and PostgreSQL): queries, quarantine on load, and the
transaction bookkeeping behind lazy and durable commits (``controller.store.base``).

A backend connects, runs ``_begin`` / ``_commit_now`` / ``_rollback`` and ``_execute`` (``?``
placeholders), and names the errors that mean its database could not be written. Column
``"user"`` is quoted: a reserved word in PostgreSQL.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from controller.store import codec
from controller.store.base import (
    JobKey,
    LeaderFence,
    NotLeader,
    QuarantinedRow,
    Store,
    StoredState,
    StoreWriteError,
)
from controller.store.lease import epoch_check_sql
from mlsched.model import Event, Job, Node, Task

# What a row that does not decode raises (bad JSON, a missing key, a wrong type or enum value).
DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)
EVENT_COLUMNS = "seq, time, kind, message, job_id, node_id"


class SqlStore(Store):
    """Thread-safe: one connection guarded by one lock."""

    # The backend's errors that mean a write (or its commit) failed.
    write_errors: tuple[type[BaseException], ...] = ()
    postgres = False  # the SQL dialect where the two differ

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._durable = False  # a level of the open transaction asked for a durable commit
        self._begun_durable = True  # how the open transaction was begun
        self._wrote = False  # the open transaction changed a row
        self._unsynced = 0  # lazy commits that wrote since the last durable one

    # --- the backend -----------------------------------------------------------------------
    @abstractmethod
    def _begin(self, durable: bool) -> None:
        """Open a transaction that commits durably or lazily."""

    @abstractmethod
    def _commit_now(self) -> None: ...

    @abstractmethod
    def _rollback(self) -> None:
        """Roll back the open transaction, if the database has not already."""

    @abstractmethod
    def _execute(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """Run one statement (``?`` placeholders); a DB-API cursor."""

    # --- transactions ----------------------------------------------------------------------
    @contextmanager
    def transaction(self, durable: bool = True) -> Iterator[None]:
        with self._lock:
            outer = self._depth == 0
            if outer:
                self._durable = self._begun_durable = durable
                self._wrote = False
                try:
                    self._begin(durable)
                except self.write_errors as exc:  # e.g. the database went away
                    raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
                if self.fence is not None:
                    self._check_fence(self.fence)
            self._depth += 1
            self._durable = self._durable or durable
            try:
                yield
            except BaseException as exc:
                self._depth -= 1
                if outer:
                    self._safe_rollback()
                if isinstance(exc, self.write_errors) and not isinstance(exc, StoreWriteError):
                    raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
                raise
            self._depth -= 1
            if outer:
                self._commit()

    def _check_fence(self, fence: LeaderFence) -> None:
        """A leader writes only under its own epoch, proven now (controller.store.lease)."""
        try:
            fence.check()
            row = self._execute(epoch_check_sql(self.postgres), (fence.lease_name,)).fetchone()
            if row is None or int(row[0]) != fence.epoch:
                found = "no lease" if row is None else f"epoch {row[0]}"
                raise NotLeader(
                    f"not the leader: this controller's epoch is {fence.epoch}, "
                    f"the database's {found}; nothing written"
                )
        except BaseException as exc:
            self._safe_rollback()
            if isinstance(exc, self.write_errors) and not isinstance(exc, StoreWriteError):
                raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
            raise

    def _commit(self) -> None:
        try:
            self._commit_now()
        except self.write_errors as exc:  # e.g. a full disk at commit: leave none open
            self._safe_rollback()
            raise StoreWriteError(f"cannot write the controller state: {exc}") from exc
        if self._wrote:  # nothing written: nothing synced either
            self._unsynced = 0 if self._begun_durable else self._unsynced + 1
        if self._durable and self._unsynced > 0:  # upgraded inside, or it wrote nothing
            self.flush()

    def _safe_rollback(self) -> None:
        """Roll back after a failure; a connection that is gone has nothing open."""
        with suppress(self.write_errors):
            self._rollback()

    @contextmanager
    def _write(self) -> Iterator[None]:
        """A single save: part of the open transaction, or a durable one of its own."""
        with self._lock:
            if self._depth > 0:
                yield
                return
            with self.transaction():
                yield

    def _change(self, sql: str, args: Sequence[Any] = ()) -> Any:
        """``_execute`` for a statement that may change rows; notes whether it did."""
        cur = self._execute(sql, args)
        self._wrote = self._wrote or cur.rowcount != 0  # -1: not known, counted as written
        return cur

    def mark_durable(self) -> None:
        with self._lock:
            if self._depth > 0:
                self._durable = True

    def flush(self) -> None:
        with self._lock:
            if self._unsynced == 0:
                return
            with self._write():
                self._change(
                    "INSERT INTO meta (key, value) VALUES ('flushed', ?)"
                    " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (float(self._unsynced),),
                )

    # --- load --------------------------------------------------------------------------------
    def load(self) -> StoredState:
        """Everything that decodes. A row that does not is moved to the ``quarantine`` table
        (with the tasks of a job whose row is bad) and described in ``quarantined``."""
        state = StoredState()
        with self._lock, self.transaction():
            rows = self._execute("SELECT id, data FROM jobs ORDER BY submit_time, id").fetchall()
            for job_id, data in rows:
                try:
                    state.jobs[job_id] = codec.job_from_json(data)
                except DECODE_ERRORS as exc:
                    self._quarantine(state, "jobs", job_id, data, exc, job_id=job_id)
            bad_jobs = {q.key for q in state.quarantined if q.source == "jobs"}
            rows = self._execute("SELECT job_id, rank, data FROM tasks ORDER BY job_id, rank")
            for job_id, rank, data in rows.fetchall():
                key = f"{job_id}/{rank}"
                if job_id in bad_jobs:
                    self._quarantine(state, "tasks", key, data, "its job is quarantined", job_id)
                    continue
                try:
                    task = codec.task_from_json(data)
                except DECODE_ERRORS as exc:
                    self._quarantine(state, "tasks", key, data, exc, job_id=job_id)
                    continue
                state.tasks.setdefault(job_id, []).append(task)
            for node_id, data in self._execute("SELECT id, data FROM nodes ORDER BY id").fetchall():
                try:
                    state.nodes[node_id] = codec.node_from_json(data)
                except DECODE_ERRORS as exc:
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
        self._change(
            "INSERT INTO quarantine (source, key, data, error) VALUES (?, ?, ?, ?)",
            (source, key, data, reason),
        )
        if source == "tasks":
            job, rank = key.rsplit("/", 1)
            self._change("DELETE FROM tasks WHERE job_id = ? AND rank = ?", (job, int(rank)))
        else:
            self._change(f"DELETE FROM {source} WHERE id = ?", (key,))  # a fixed name
        state.quarantined.append(QuarantinedRow(source, key, reason, job_id, node_id))

    # --- saves -------------------------------------------------------------------------------
    def save_job(self, job: Job) -> None:
        with self._write():
            self._change(
                'INSERT INTO jobs (id, "user", state, submit_time, data) VALUES (?, ?, ?, ?, ?)'
                ' ON CONFLICT (id) DO UPDATE SET "user" = excluded."user",'
                " state = excluded.state, submit_time = excluded.submit_time,"
                " data = excluded.data",
                (job.id, job.user, job.state.value, job.submit_time, codec.job_to_json(job)),
            )

    def save_tasks(self, job_id: str, tasks: list[Task]) -> None:
        with self._write():
            self._change("DELETE FROM tasks WHERE job_id = ?", (job_id,))
            for t in tasks:
                self._change(
                    "INSERT INTO tasks (job_id, rank, data) VALUES (?, ?, ?)",
                    (job_id, t.rank, codec.task_to_json(t)),
                )

    def save_node(self, node: Node) -> None:
        with self._write():
            self._change(
                "INSERT INTO nodes (id, data) VALUES (?, ?)"
                " ON CONFLICT (id) DO UPDATE SET data = excluded.data",
                (node.id, codec.node_to_json(node)),
            )

    def save_submit_request(self, user: str, request_id: str, job_id: str, time: float) -> None:
        with self._write():
            self._change(
                'INSERT INTO submit_requests ("user", request_id, job_id, time)'
                ' VALUES (?, ?, ?, ?) ON CONFLICT ("user", request_id)'
                " DO UPDATE SET job_id = excluded.job_id, time = excluded.time",
                (user, request_id, job_id, time),
            )

    def submit_request_job(self, user: str, request_id: str, since: float) -> str | None:
        with self._lock:
            row = self._execute(
                'SELECT job_id FROM submit_requests WHERE "user" = ? AND request_id = ?'
                " AND time >= ?",
                (user, request_id, since),
            ).fetchone()
        return row[0] if row else None

    def forget_submit_requests(self, before: float) -> int:
        with self._write():
            cur = self._change("DELETE FROM submit_requests WHERE time < ?", (before,))
        return cur.rowcount

    # --- events ------------------------------------------------------------------------------
    def append_event(
        self, time: float, kind: str, message: str, job_id: str = "", node_id: str = ""
    ) -> Event:
        with self._write():
            self._wrote = True
            (seq,) = self._execute(
                "INSERT INTO events (time, kind, message, job_id, node_id)"
                " VALUES (?, ?, ?, ?, ?) RETURNING seq",
                (time, kind, message, job_id, node_id),
            ).fetchone()
        return Event(seq=seq, time=time, kind=kind, message=message, job_id=job_id, node_id=node_id)

    def events_after(self, seq: int, job_id: str = "", limit: int = 1000) -> list[Event]:
        where = "seq > ?" + (" AND job_id = ?" if job_id else "")
        args: list[object] = [seq, job_id] if job_id else [seq]
        query = (
            f"SELECT {EVENT_COLUMNS} FROM events_archive WHERE {where} UNION ALL "
            f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq LIMIT ?"
        )
        with self._lock:
            rows = self._execute(query, [*args, *args, limit]).fetchall()
        return [
            Event(seq=r[0], time=r[1], kind=r[2], message=r[3], job_id=r[4], node_id=r[5])
            for r in rows
        ]

    # --- retention ---------------------------------------------------------------------------
    def archive_jobs(self, job_ids: Sequence[str]) -> None:
        with self._write():
            for job_id in job_ids:
                for table, key in (("jobs", "id"), ("tasks", "job_id")):
                    self._change(f"DELETE FROM {table}_archive WHERE {key} = ?", (job_id,))
                    self._change(  # fixed names
                        f"INSERT INTO {table}_archive SELECT * FROM {table} WHERE {key} = ?",
                        (job_id,),
                    )
                    self._change(f"DELETE FROM {table} WHERE {key} = ?", (job_id,))

    def archive_events(self, before: float) -> int:
        with self._write():
            self._change(
                f"INSERT INTO events_archive ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS}"
                " FROM events WHERE time < ?",
                (before,),
            )
            cur = self._change("DELETE FROM events WHERE time < ?", (before,))
        return cur.rowcount

    def archived_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        with self._lock:
            row = self._execute("SELECT data FROM jobs_archive WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                return None
            return codec.job_from_json(row[0]), self._archived_tasks(job_id)

    def _archived_tasks(self, job_id: str) -> list[Task]:
        rows = self._execute(
            "SELECT data FROM tasks_archive WHERE job_id = ? ORDER BY rank", (job_id,)
        ).fetchall()
        return [codec.task_from_json(r[0]) for r in rows]

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
            query += ' AND "user" = ?'
            args.append(user)
        query += " ORDER BY submit_time, id LIMIT ?"
        args.append(limit)
        with self._lock:
            rows = self._execute(query, args).fetchall()
            return [(codec.job_from_json(d), self._archived_tasks(i)) for i, d in rows]
