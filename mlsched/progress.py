"""Progress of long commands (``simulate``, training runs): a tqdm bar with ETA on a terminal,
plain lines otherwise (a redirected stream gets no ``\\r``).

A reporter is called with ``(done, total)`` as work advances and closed when the work ends."""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

# Without a terminal: a line each time another 1/LINES of the work is done.
LINES = 10


class Progress:
    """``Progress(label, unit)(done, total)``; ``close()`` ends the bar or writes the last line."""

    def __init__(self, label: str, unit: str, stream: TextIO | None = None) -> None:
        self._label = label
        self._unit = unit
        self._stream = stream if stream is not None else sys.stderr
        self._bar: tqdm | None = None
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._next_tenth = 0  # the next plain line is due at this many tenths of the work

    def __call__(self, done: int, total: int) -> None:
        if self._tty:
            self._draw(done, total)
        elif total > 0 and done * LINES >= self._next_tenth * total:
            self._line(done, total)
            self._next_tenth = done * LINES // total + 1

    def _draw(self, done: int, total: int) -> None:
        if self._bar is None:
            self._bar = tqdm(
                total=total, desc=self._label, unit=self._unit, file=self._stream, leave=True
            )
        if self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def _line(self, done: int, total: int) -> None:
        percent = 100 * done // total
        print(f"{self._label}: {percent}% ({done}/{total} {self._unit})", file=self._stream)
        self._stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
