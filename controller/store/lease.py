"""The leader lease row (issue 12 #5): who leads the controllers of one database, until when,
and under which epoch (the fencing token, which only grows).

One row per lease name in table ``leader_lease``. A claim runs in a transaction that locks the
row (PostgreSQL ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` locks the whole database), so two
candidates never both win. A store transaction of the leader reads the row ``FOR SHARE``
(``epoch_check_sql``): a takeover waits for it to end, and a deposed leader's transaction sees
the new epoch and writes nothing. Times are seconds on one clock all candidates read: in
production the database's (``LeaseTable.db_now``), so the hosts' clocks never meet.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

LEASE_NAME = "controller"
LEASE_DDL = (
    "CREATE TABLE IF NOT EXISTS leader_lease (name TEXT PRIMARY KEY, holder TEXT NOT NULL,"
    " epoch BIGINT NOT NULL, expires_at DOUBLE PRECISION NOT NULL, address TEXT NOT NULL)"
)


@dataclass(frozen=True)
class LeaseRecord:
    holder: str  # a controller process's id (new at every start)
    epoch: int  # +1 at every change of holder
    expires_at: float
    address: str  # where the holder serves clients


def claim(
    current: LeaseRecord | None, holder: str, address: str, now: float, duration_s: float
) -> LeaseRecord | None:
    """The row after ``holder`` asks for the lease at ``now``; None while another holds it.
    Its own lease is extended under the same epoch (a renewal); a free or expired one is taken
    under the next epoch."""
    if current is None:
        return LeaseRecord(holder, 1, now + duration_s, address)
    if current.holder == holder:
        return replace(current, expires_at=now + duration_s, address=address)
    if current.expires_at > now:
        return None
    return LeaseRecord(holder, current.epoch + 1, now + duration_s, address)


def epoch_check_sql(postgres: bool) -> str:
    """A store transaction's read of the current epoch (``?``: the lease name); on PostgreSQL
    it holds the row so no takeover commits before the transaction ends."""
    return "SELECT epoch FROM leader_lease WHERE name = ?" + (" FOR SHARE" if postgres else "")


class LeaseTable:
    """The lease row on its own autocommit connection (a renewal never queues behind the
    store's transactions in this process, only behind their row lock)."""

    def __init__(self, conn: Any, postgres: bool, name: str = LEASE_NAME) -> None:
        self._conn = conn
        self._postgres = postgres
        self.name = name
        self._run(LEASE_DDL)

    def _run(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        if self._postgres:
            sql = sql.replace("?", "%s")
        return self._conn.execute(sql, args)

    def db_now(self) -> float:
        """The database's clock, seconds since the epoch."""
        if self._postgres:
            sql = "SELECT extract(epoch FROM clock_timestamp())::double precision"
        else:
            sql = "SELECT (julianday('now') - 2440587.5) * 86400.0"
        return float(self._run(sql).fetchone()[0])

    def read(self) -> LeaseRecord | None:
        row = self._run(
            "SELECT holder, epoch, expires_at, address FROM leader_lease WHERE name = ?",
            (self.name,),
        ).fetchone()
        return LeaseRecord(row[0], int(row[1]), float(row[2]), row[3]) if row else None

    def claim(
        self, holder: str, address: str, now: float, duration_s: float, epoch: int = 0
    ) -> tuple[bool, LeaseRecord]:
        """Take or extend the lease (see :func:`claim`); with ``epoch`` only a renewal of that
        epoch. Returns whether it was granted and the row as it stands after the call."""
        self._run("BEGIN" if self._postgres else "BEGIN IMMEDIATE")
        try:
            current = self._read_locked()
            new = claim(current, holder, address, now, duration_s)
            if new is not None and epoch and new.epoch != epoch:
                new = None  # deposed, or a renewal of a lease this holder lost
            if new is not None:
                self._write(new, insert=current is None)
        except BaseException:
            self._run("ROLLBACK")
            raise
        self._run("COMMIT")
        if new is not None:
            return True, new
        assert current is not None  # claim() grants a missing row
        return False, current

    def release(self, holder: str, epoch: int) -> None:
        """End ``holder``'s lease now (a clean stop: a standby need not wait for expiry)."""
        self._run(
            "UPDATE leader_lease SET expires_at = 0 WHERE name = ? AND holder = ? AND epoch = ?",
            (self.name, holder, epoch),
        )

    def connection_lost(self) -> bool:
        """Whether the database ended this connection (psycopg's ``broken``)."""
        return bool(getattr(self._conn, "broken", False))

    def close(self) -> None:
        self._conn.close()

    def _read_locked(self) -> LeaseRecord | None:
        row = self._run(
            "SELECT holder, epoch, expires_at, address FROM leader_lease WHERE name = ?"
            + (" FOR UPDATE" if self._postgres else ""),
            (self.name,),
        ).fetchone()
        return LeaseRecord(row[0], int(row[1]), float(row[2]), row[3]) if row else None

    def _write(self, record: LeaseRecord, insert: bool) -> None:
        values = (record.holder, record.epoch, record.expires_at, record.address, self.name)
        if insert:  # a racing first insert fails on the key: the transaction rolls back
            self._run(
                "INSERT INTO leader_lease (holder, epoch, expires_at, address, name)"
                " VALUES (?, ?, ?, ?, ?)",
                values,
            )
        else:
            self._run(
                "UPDATE leader_lease SET holder = ?, epoch = ?, expires_at = ?, address = ?"
                " WHERE name = ?",
                values,
            )


def open_lease_table(url: str, state_dir: Path) -> LeaseTable:
    """The lease in the store's database (``controller.store.open_store``'s arguments)."""
    if url.startswith(("postgresql://", "postgres://")):
        from controller.store.postgres import connect  # a renewal frozen mid-claim: same rule

        return LeaseTable(connect(url), postgres=True)
    if url:
        raise ValueError(f"unknown store {url!r}")
    conn = sqlite3.connect(
        str(state_dir / "controller.db"), check_same_thread=False, isolation_level=None
    )
    conn.execute("PRAGMA busy_timeout=5000")
    return LeaseTable(conn, postgres=False)
