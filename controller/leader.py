"""Leader election between active and standby controllers (issue 12 #5).

The controllers of one database compete for its lease row (``controller.store.lease``): the
winner serves, the others answer every call UNAVAILABLE with the leader's address
(``controller.standby``). The leader renews every third of the lease. It proves its lease by
its own monotonic clock: a grant asked at local time ``t`` holds until ``t + duration`` on the
database's clock at least (the row's expiry is set after ``t``), so the leader counts it good
until ``t + duration - margin`` (the margin covers clocks running at different rates) and
stops by itself then, before any standby may take over. Every store transaction checks the
local proof and the row's epoch (``LeaderFence``), so a deposed leader writes nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable

from controller.store.base import NotLeader
from controller.store.lease import LEASE_NAME, LeaseRecord, LeaseTable

log = logging.getLogger(__name__)

MARGIN_SHARE = 0.1  # of the lease: the leader stops this long before the row expires
RENEW_SHARE = 1 / 3  # renew every third of the lease
RETRY_SHARE = 1 / 10  # after a failed renewal (the database unreachable), retry this often
MIN_RETRY_S = 0.05  # a standby's shortest wait between claims


class LeaderLease:
    """One controller's claim on the lease; a :class:`LeaderFence` for its store.

    ``now`` is the clock the lease rows are written in (all candidates must share it: the
    database's by default); ``monotonic`` is this process's clock for its own proof.
    """

    lease_name = LEASE_NAME

    def __init__(
        self,
        table: LeaseTable,
        address: str,
        duration_s: float,
        *,
        now: Callable[[], float] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        holder: str = "",
    ) -> None:
        if not duration_s > 0:
            raise ValueError("the leader lease must be positive")
        self._table = table
        self.address = address
        self.duration_s = duration_s
        self.margin_s = duration_s * MARGIN_SHARE
        self.holder = holder or uuid.uuid4().hex
        self._now = now or table.db_now
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._epoch = 0
        self._valid_until = -math.inf
        self._deposed = False
        self.current: LeaseRecord | None = None  # the row as last seen
        self._last_now = -math.inf  # the lease clock when it was seen

    @property
    def epoch(self) -> int:
        """The epoch this controller leads (or led) under; 0 before it was elected."""
        return self._epoch

    @property
    def deposed(self) -> bool:
        """Another controller took the lease from this one (it never leads again)."""
        return self._deposed

    def proven(self) -> bool:
        with self._lock:
            return not self._deposed and self._monotonic() < self._valid_until

    def remaining_s(self) -> float:
        """How much longer the lease is proven (0 when it is not)."""
        with self._lock:
            if self._deposed:
                return 0.0
            return max(0.0, self._valid_until - self._monotonic())

    def check(self) -> None:
        """Raise :class:`NotLeader` unless this controller leads, proven by its own clock."""
        if not self.proven():
            raise NotLeader(
                f"not the leader: the lease (epoch {self._epoch}) is not proven; nothing written"
            )

    def leader_address(self) -> str:
        """Where the leader serves, as last seen ("" when unknown or expired)."""
        row = self.current
        return row.address if row is not None and row.epoch > 0 else ""

    def try_acquire(self) -> bool:
        """One attempt to become the leader (or, once leader, to renew). False when another
        holds the lease, or this one was deposed; a database error propagates."""
        if self._deposed:
            return False
        asked = self._monotonic()
        now = self._now()
        granted, row = self._table.claim(
            self.holder, self.address, now, self.duration_s, epoch=self._epoch
        )
        self.current, self._last_now = row, now
        with self._lock:
            if granted:
                if self._epoch == 0:
                    log.info("elected leader under epoch %d", row.epoch)
                self._epoch = row.epoch
                self._valid_until = asked + self.duration_s - self.margin_s
            elif self._epoch:
                self._deposed = True  # someone else's epoch now: never lead again
                log.error("deposed: the lease is held by %s (epoch %d)", row.address, row.epoch)
        return granted

    def retry_in_s(self) -> float:
        """A standby's wait before its next claim: until the holder's lease ends as last seen
        (so it takes over as soon as it may), at most a third of the lease."""
        most = self.duration_s * RENEW_SHARE
        if self.current is None:
            return most
        return min(most, max(MIN_RETRY_S, self.current.expires_at - self._last_now))

    def connection_lost(self) -> bool:
        """Whether the lease's own database connection ended (no claim can succeed again)."""
        return self._table.connection_lost()

    def release(self) -> None:
        """Give the lease up now (a clean stop), so a standby takes over at once."""
        with self._lock:
            epoch, self._valid_until = self._epoch, -math.inf
        if epoch and not self._deposed:
            self._table.release(self.holder, epoch)


class LeaseKeeper:
    """Renews a leader's lease in the background; calls ``on_lost`` once, when the lease can
    no longer be proven (deposed, or not renewed in time). ``store_lost`` says the store's own
    connection is gone for good: the leader could renew but not write, so it gives the lease
    up at once (a standby, with connections of its own, takes over); set by
    :meth:`watch_store` once the store is open."""

    def __init__(self, lease: LeaderLease, on_lost: Callable[[str], None]) -> None:
        self.lease = lease
        self._on_lost = on_lost
        self._store_lost: Callable[[], bool] = lambda: False
        self._released = False
        self._stop = threading.Event()
        self._losing = threading.Lock()
        self.lost_reason = ""
        self._threads: list[threading.Thread] = []

    def watch_store(self, store_lost: Callable[[], bool]) -> None:
        self._store_lost = store_lost

    def step(self) -> float | None:
        """One renewal; the wait before the next, or None when the lease is lost."""
        lease = self.lease
        if self._store_lost():
            lease.release()
            self._released = True
            return None
        try:
            renewed = lease.try_acquire()
        except Exception as exc:  # the database unreachable: retry while the lease holds
            log.warning("cannot renew the leader lease: %s", exc)
            renewed = False
        if lease.deposed:
            return None
        remaining = lease.remaining_s()
        if remaining <= 0:
            return None
        if renewed:
            return lease.duration_s * RENEW_SHARE
        return min(lease.duration_s * RETRY_SHARE, remaining)

    def start(self) -> None:
        for target, name in ((self._renew, "lease-renew"), (self._watch, "lease-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)

    def _renew(self) -> None:
        wait = self.lease.duration_s * RENEW_SHARE
        while not self._stop.wait(wait):
            next_wait = self.step()
            if next_wait is None:
                self._lose()
                return
            wait = next_wait

    def _watch(self) -> None:
        """Ends the leadership at the proof's end even while a renewal hangs."""
        while not self._stop.is_set():
            remaining = self.lease.remaining_s()
            if remaining <= 0:
                self._lose()
                return
            self._stop.wait(remaining)

    def _lose(self) -> None:
        with self._losing:
            if self._stop.is_set():
                return
            self._stop.set()
        lease = self.lease
        if self._released:
            self.lost_reason = "the store's database connection is lost; lease given up"
        elif lease.deposed:
            address = lease.current.address if lease.current else "?"
            self.lost_reason = f"deposed: {address} leads now"
        else:
            self.lost_reason = "the leader lease could not be renewed in time"
        log.error("stepping down: %s", self.lost_reason)
        self._on_lost(self.lost_reason)
