"""Persistent controller state behind the :class:`Store` interface."""

from controller.store.base import Store, StoredState
from controller.store.sqlite import SqliteStore

__all__ = ["SqliteStore", "Store", "StoredState"]
