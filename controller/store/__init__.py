"""Persistent controller state behind the :class:`Store` interface."""

from controller.store.base import QuarantinedRow, Store, StoredState, StoreWriteError
from controller.store.sqlite import SqliteStore

__all__ = ["QuarantinedRow", "SqliteStore", "Store", "StoreWriteError", "StoredState"]
