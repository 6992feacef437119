"""Persistent controller state behind the :class:`Store` interface."""

from pathlib import Path

from controller.store.base import (
    LeaderFence,
    NotLeader,
    QuarantinedRow,
    Store,
    StoredState,
    StoreWriteError,
)
from controller.store.sql import SqlStore
from controller.store.sqlite import SqliteStore


def open_store(url: str, state_dir: Path, fence: LeaderFence | None = None) -> Store:
    """The store a controller runs on: ``url`` empty for SQLite in ``state_dir``, else a
    PostgreSQL URL (``postgresql://user@host:port/db``). With ``fence`` (a leader's lease)
    every transaction first checks the lease's epoch (controller.store.lease)."""
    store: SqlStore
    if not url:
        store = SqliteStore(state_dir / "controller.db")
    elif url.startswith(("postgresql://", "postgres://")):
        from controller.store.postgres import PostgresStore

        store = PostgresStore(url)
    else:
        raise ValueError(
            f"unknown store {url!r}: empty (SQLite in the state directory) or postgresql://"
        )
    store.fence = fence
    return store


__all__ = [
    "LeaderFence",
    "NotLeader",
    "QuarantinedRow",
    "SqliteStore",
    "Store",
    "StoreWriteError",
    "StoredState",
    "open_store",
]
