"""Follows the controller's event log as it grows and hands each new event to its sinks: the
INFO log lines (with job_id/node_id fields) and the Prometheus counters that count events.

Events are what every launch, suspension, resume, migration, cancel and failure already records
(``ControllerState.emit``), so nothing in the scheduler has to call logging or metrics."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence

from controller.policy.base import Decision
from controller.state import ControllerState
from mlsched.logsetup import fields
from mlsched.model import Event, JobState

log = logging.getLogger("mlsched.events")

EventSink = Callable[[Event], None]
_TRANSITION = re.compile(r"^([A-Z]+) -> ([A-Z]+)\b")
# Event kinds logged at WARNING rather than INFO.
WARNING_KINDS = frozenset({"node_dead", "state_row_quarantined", "node_disk_full"})


def transition(event: Event) -> tuple[JobState, JobState] | None:
    """The (old, new) states of a ``job_state`` event (``ControllerState.set_job_state`` writes
    ``"OLD -> NEW[: message]"``); None for other events."""
    if event.kind != "job_state":
        return None
    found = _TRANSITION.match(event.message)
    if found is None:
        return None
    try:
        return JobState(found.group(1)), JobState(found.group(2))
    except ValueError:
        return None


def log_event(event: Event) -> None:
    """One log line for an event, its ids as structured fields."""
    level = logging.WARNING if event.kind in WARNING_KINDS else logging.INFO
    if event.kind == "job_state" and event.message.split(":", 1)[0].endswith("FAILED"):
        level = logging.WARNING
    extra = fields(job_id=event.job_id, node_id=event.node_id, event=event.kind)
    log.log(level, "%s: %s", event.kind, event.message, extra=extra)


def log_renewals(decision: Decision) -> None:
    """Renewals record no event (one per job and lease): logged from the decision itself."""
    for renew in decision.renew:
        extra = fields(job_id=renew.job_id, event="lease_renewed")
        log.info("lease_renewed: for %g s", renew.lease_s, extra=extra)


class EventFollower:
    """A thread that passes every event after ``start()`` to ``sinks``, in order."""

    def __init__(self, state: ControllerState, sinks: Sequence[EventSink]) -> None:
        self._state = state
        self._sinks = tuple(sinks)
        self._stop = threading.Event()
        with state.lock:
            self._after = state.last_event_seq
        self._thread = threading.Thread(target=self._run, name="event-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._state.lock:
            self._state.changed.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        state = self._state
        while not self._stop.is_set():
            for event in state.store.events_after(self._after):
                self._deliver(event)
                self._after = event.seq
            with state.lock:
                if state.last_event_seq <= self._after and not self._stop.is_set():
                    state.changed.wait(timeout=5.0)

    def _deliver(self, event: Event) -> None:
        for sink in self._sinks:
            try:
                sink(event)
            except Exception:  # a sink's bug must not stop the others or the follower
                log.exception("event sink failed on event %d (%s)", event.seq, event.kind)
