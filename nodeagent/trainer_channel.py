"""Per-task queue of commands for the trainer, drained by the trainer session."""

from __future__ import annotations

import threading
from collections import deque

from nodeagent.clock import Clock, SystemClock
from nodeagent.model import TrainerCommand


class ChannelClosed(Exception):
    """The session should end: the task ended, or a newer session took over."""


class TrainerChannel:
    """Commands waiting for one task's trainer.

    Commands queued while no trainer session is connected wait for the next one. A new session
    (a reconnecting shim) takes over from the previous one, which then ends. Sticky commands
    (suspend, stop) are delivered again to every new session, because a reconnecting shim may
    have missed them.
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or SystemClock()
        self._cond = threading.Condition()
        self._queue: deque[TrainerCommand] = deque()
        self._sticky: list[TrainerCommand] = []
        self._generation = 0
        self._closed = False

    def push(self, command: TrainerCommand, *, sticky: bool = False) -> None:
        """Queue a command; ``sticky`` ones are re-sent to later sessions too."""
        with self._cond:
            if self._closed:
                return
            if sticky:
                self._sticky.append(command)
            self._queue.append(command)
            self._cond.notify_all()

    def attach(self) -> int:
        """Start a session; returns its generation. Earlier sessions end at their next wait."""
        with self._cond:
            if self._closed:
                raise ChannelClosed("task is no longer running")
            self._generation += 1
            for command in reversed(self._sticky):
                if command not in self._queue:
                    self._queue.appendleft(command)
            self._cond.notify_all()
            return self._generation

    def next_command(self, generation: int, timeout_s: float) -> TrainerCommand | None:
        """Wait up to ``timeout_s`` for a command; ChannelClosed when the session must end."""
        deadline = self._clock.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._closed or generation != self._generation:
                    raise ChannelClosed("session ended")
                if self._queue:
                    return self._queue.popleft()
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def close(self) -> None:
        """End every session; later pushes are dropped."""
        with self._cond:
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """True once closed."""
        with self._cond:
            return self._closed
