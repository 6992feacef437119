"""The store interface. Contracts:

- every ``save_*`` call is durable when it returns (or when the enclosing ``transaction()``
  block exits without an exception; an exception rolls the whole block back);
  ``transaction(durable=False)`` makes a lazy commit: it survives a crash of the controller
  process and is on disk once a later durable commit or ``flush()`` returns (a power loss
  may take lazy commits since then, never a durable one, never part of a transaction);
  a block is durable when any of its nested levels asked (or called ``mark_durable()``);
- a write that fails (a full disk, an I/O error) raises :class:`StoreWriteError` and changes
  nothing;
- ``load()`` returns exactly what was last saved, so a controller killed at any point restarts
  from a consistent state; a row that cannot be decoded (corruption, a bad manual edit) is
  moved aside, never deleted, and listed in ``StoredState.quarantined`` instead of stopping
  the start (with it go the tasks of a quarantined job);
- event sequence numbers are assigned by the store, strictly increasing, never reused;
- a submit request id, once saved with its job in the same transaction, names that job until
  it is forgotten (``forget_submit_requests``); request ids are scoped to the submitting user.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol

from mlsched.model import Event, Job, Node, Task


class StoreWriteError(sqlite3.OperationalError):
    """The store could not write (a full disk, an I/O error, a lost database connection);
    nothing of the failed transaction was kept. A subclass of ``sqlite3.OperationalError``
    for the handlers written before other backends existed."""


class NotLeader(StoreWriteError):
    """This controller cannot prove it leads (its lease ran out, or another took it: the epoch
    in the database is not its own); nothing was written (controller.leader)."""


class LeaderFence(Protocol):
    """What a leader's store checks at the start of every transaction."""

    lease_name: str

    @property
    def epoch(self) -> int:
        """The epoch this controller leads under."""
        ...

    def check(self) -> None:
        """Raise :class:`NotLeader` unless the lease is proven by this process's clock."""
        ...


JobKey = tuple[float, str]
"""A job's place in listings: (submit time, id)."""


@dataclass(frozen=True)
class QuarantinedRow:
    """A stored row ``load()`` could not decode and moved aside."""

    source: str  # "jobs", "tasks" or "nodes"
    key: str  # job id, "<job id>/<rank>" or node id
    error: str
    job_id: str = ""
    node_id: str = ""


@dataclass
class StoredState:
    jobs: dict[str, Job] = field(default_factory=dict)
    tasks: dict[str, list[Task]] = field(default_factory=dict)  # job id → tasks by rank
    nodes: dict[str, Node] = field(default_factory=dict)
    quarantined: list[QuarantinedRow] = field(default_factory=list)


class Store(ABC):
    # A leader's lease: set, every transaction first checks it (controller.store.lease).
    fence: LeaderFence | None = None

    @abstractmethod
    def load(self) -> StoredState:
        """Everything saved so far."""

    @abstractmethod
    def transaction(self, durable: bool = True) -> AbstractContextManager[None]:
        """Group several saves into one atomic write (lazy with ``durable=False``)."""

    @abstractmethod
    def mark_durable(self) -> None:
        """The open transaction must be durable when it commits (no-op outside one)."""

    @abstractmethod
    def flush(self) -> None:
        """Make every lazy commit so far durable (returns at once when there is none)."""

    @abstractmethod
    def save_job(self, job: Job) -> None:
        """Insert or replace a job."""

    @abstractmethod
    def save_tasks(self, job_id: str, tasks: list[Task]) -> None:
        """Replace the tasks of a job (its current attempt)."""

    @abstractmethod
    def save_node(self, node: Node) -> None:
        """Insert or replace a node (metrics are not persisted)."""

    @abstractmethod
    def save_submit_request(self, user: str, request_id: str, job_id: str, time: float) -> None:
        """Remember that ``user``'s request ``request_id`` created ``job_id`` at ``time``."""

    @abstractmethod
    def submit_request_job(self, user: str, request_id: str, since: float) -> str | None:
        """The job ``user``'s request ``request_id`` created at ``since`` or later, if any."""

    @abstractmethod
    def forget_submit_requests(self, before: float) -> int:
        """Forget the request ids saved before ``before``; returns how many."""

    @abstractmethod
    def append_event(
        self, time: float, kind: str, message: str, job_id: str = "", node_id: str = ""
    ) -> Event:
        """Record an event and return it with its sequence number."""

    @abstractmethod
    def events_after(self, seq: int, job_id: str = "", limit: int = 1000) -> list[Event]:
        """Events with a larger sequence number, oldest first, optionally for one job."""

    # --- retention (issue 12 #3): the archive is not loaded at start -----------------------
    @abstractmethod
    def archive_jobs(self, job_ids: Sequence[str]) -> None:
        """Move these jobs and their tasks to the archive (``load()`` no longer returns them)."""

    @abstractmethod
    def archive_events(self, before: float) -> int:
        """Move the events older than ``before`` to the archive; returns how many.
        ``events_after`` still returns them."""

    @abstractmethod
    def archived_job(self, job_id: str) -> tuple[Job, list[Task]] | None:
        """An archived job and its tasks; None when it is not archived."""

    @abstractmethod
    def archived_jobs(
        self, after: JobKey | None, limit: int, states: Collection[str] = (), user: str = ""
    ) -> list[tuple[Job, list[Task]]]:
        """Up to ``limit`` archived jobs past ``after`` in (submit time, id) order, of these
        states (``JobState`` values; empty: any) and this user (empty: any)."""

    @abstractmethod
    def close(self) -> None:
        """Release the store."""

    def connection_lost(self) -> bool:
        """Whether the store's connection to its database is gone for good (a PostgreSQL
        backend ended); every write fails until the controller restarts."""
        return False

    def iter_events(self, after: int = 0, job_id: str = "") -> Iterator[Event]:
        """Every event after ``after``, page by page."""
        while batch := self.events_after(after, job_id):
            yield from batch
            after = batch[-1].seq
