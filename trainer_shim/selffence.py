"""Self-fencing of a training process whose node agent fell silent.

An agent stopped by SIGSTOP (or on a stalled VM) cannot end its tasks, while the controller,
past its fencing deadline, starts the job again elsewhere. So the shim watches the agent: the
agent sends something at least every second (``AgentAlive``), and gives the shim two deadlines
at launch (``MLSCHED_FENCE_SUSPEND_AFTER_S``, ``MLSCHED_FENCE_EXIT_AFTER_S``; the arithmetic
is in ``nodeagent.selffence.shim_fence`` and docs/architecture.md). Silent for the first, the
training loop is told to suspend (checkpoint and exit); silent for the second, the process
exits at once, whatever it was doing (a save cut short leaves only its own temporary file).
"""

from __future__ import annotations

import enum
import logging
import math
import threading
from collections.abc import Callable

__all__ = ["FenceAction", "FenceThread", "SilenceWatch"]

log = logging.getLogger("trainer_shim")


class FenceAction(enum.Enum):
    NONE = "none"
    SUSPEND = "suspend"
    EXIT = "exit"


class SilenceWatch:
    """How long the agent has been silent, and what that calls for. Thread-safe."""

    def __init__(self, suspend_after_s: float, exit_after_s: float, now: float) -> None:
        if not (math.isfinite(suspend_after_s) and suspend_after_s > 0):
            raise ValueError(f"suspend_after_s must be a positive number, got {suspend_after_s}")
        if not (math.isfinite(exit_after_s) and exit_after_s >= suspend_after_s):
            raise ValueError(
                f"exit_after_s ({exit_after_s}) must be finite and >= suspend_after_s"
                f" ({suspend_after_s})"
            )
        self.suspend_after_s = suspend_after_s
        self.exit_after_s = exit_after_s
        self._lock = threading.Lock()
        self._last_heard = now

    def heard(self, now: float) -> None:
        """The agent sent something at ``now``."""
        with self._lock:
            self._last_heard = max(self._last_heard, now)

    def silence_s(self, now: float) -> float:
        with self._lock:
            return max(0.0, now - self._last_heard)

    def check(self, now: float) -> FenceAction:
        silence = self.silence_s(now)
        if silence >= self.exit_after_s:
            return FenceAction.EXIT
        if silence >= self.suspend_after_s:
            return FenceAction.SUSPEND
        return FenceAction.NONE


class FenceThread:
    """Checks a `SilenceWatch` every ``interval_s``: ``on_suspend(reason)`` once at the first
    deadline, ``on_exit(reason)`` at the second (expected not to return: it ends the process).
    ``stop()`` ends and joins the thread."""

    def __init__(
        self,
        watch: SilenceWatch,
        monotonic: Callable[[], float],
        on_suspend: Callable[[str], None],
        on_exit: Callable[[str], None],
        interval_s: float = 0.25,
    ) -> None:
        self._watch = watch
        self._monotonic = monotonic
        self._on_suspend = on_suspend
        self._on_exit = on_exit
        self._interval_s = min(interval_s, watch.suspend_after_s / 4)
        self._stop = threading.Event()
        self._suspended = False
        self._thread = threading.Thread(target=self._run, name="trainer-shim-fence", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None and self._thread is not threading.current_thread():
            self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            now = self._monotonic()
            action = self._watch.check(now)
            silence = self._watch.silence_s(now)
            if action is FenceAction.EXIT:
                self._on_exit(
                    f"self-fencing: no word from the node agent for {silence:.1f} s"
                    f" (exit deadline {self._watch.exit_after_s:g} s): exiting now"
                )
                return
            if action is FenceAction.SUSPEND and not self._suspended:
                self._suspended = True
                self._on_suspend(
                    f"self-fencing: no word from the node agent for {silence:.1f} s"
                    f" (deadline {self._watch.suspend_after_s:g} s)"
                )
