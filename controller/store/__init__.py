"""Persistent controller state behind the :class:`Store` interface."""

from pathlib import Path

from controller.store.base import QuarantinedRow, Store, StoredState, StoreWriteError
from controller.store.sqlite import SqliteStore


def open_store(url: str, state_dir: Path) -> Store:
    """The store a controller runs on: ``url`` empty for SQLite in ``state_dir``, else a
    PostgreSQL URL (``postgresql://user@host:port/db``)."""
    if not url:
        return SqliteStore(state_dir / "controller.db")
    if url.startswith(("postgresql://", "postgres://")):
        from controller.store.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"unknown store {url!r}: empty (SQLite in the state directory) or postgresql://"
    )


__all__ = [
    "QuarantinedRow",
    "SqliteStore",
    "Store",
    "StoreWriteError",
    "StoredState",
    "open_store",
]
