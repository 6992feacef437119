"""The task priorities the controller sent (``TaskPriority``; ``docs/overload.md``), and the
values the overload choice ranks tasks by (MLFS §3.3.3).

Higher is more important (under MLFS Eq. 6's priority, under other policies the policy's order,
``controller/policy/ranks.py``). A running task that never received one (the controller is
older, or this agent restarted and adopted the task) falls back to the old rule: ranked by the
start of its attempt, the oldest lowest, and below every task that has a received priority
(the controller vouched for those). The agent says so in its log once per task.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable, Sequence

from nodeagent.model import RunningTask, TaskRef

log = logging.getLogger(__name__)


class TaskPriorities:
    """Received priorities per task attempt; safe to use from the link and the sampler."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: dict[TaskRef, float] = {}
        self._warned: set[TaskRef] = set()

    def set(self, ref: TaskRef, priority: float) -> None:
        """The controller sent ``priority`` for ``ref``; a non-finite value is refused."""
        if not math.isfinite(priority):
            log.error("priority %r for task %s ignored: not a finite number", priority, ref)
            return
        with self._lock:
            first = ref not in self._received
            self._received[ref] = float(priority)
        log.log(
            logging.INFO if first else logging.DEBUG, "task %s priority %r", ref, float(priority)
        )

    def get(self, ref: TaskRef) -> float | None:
        with self._lock:
            return self._received.get(ref)

    def ranked(self, tasks: Sequence[RunningTask]) -> dict[TaskRef, float]:
        """The priority of each running task for the overload choice (module docstring);
        forgets the tasks no longer running."""
        live = {t.ref for t in tasks}
        with self._lock:
            self._received = {r: p for r, p in self._received.items() if r in live}
            received = dict(self._received)
            self._warned &= live
            missing = [t for t in tasks if t.ref not in received]
            new = [t.ref for t in missing if t.ref not in self._warned]
            self._warned.update(new)
        for ref in new:
            log.info(
                "task %s has no priority from the controller: ranked by the start of its"
                " attempt (oldest lowest), below the tasks that have one",
                ref,
            )
        return {**received, **fallback(missing, received.values())}


def fallback(missing: Sequence[RunningTask], received: Iterable[float]) -> dict[TaskRef, float]:
    """Values for tasks without a received priority: below the lowest received one (or 0),
    one apart, the oldest attempt lowest (ties: task)."""
    floor = min(received, default=0.0) - 1.0
    ordered = sorted(missing, key=lambda t: (t.launched_at, t.ref))
    return {t.ref: floor - (len(ordered) - 1 - i) for i, t in enumerate(ordered)}
