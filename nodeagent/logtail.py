"""Reading the end of task log files."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_FETCH_BYTES = 64 * 1024
MAX_FETCH_BYTES = 1024 * 1024


def tail_bytes(path: Path, max_bytes: int) -> tuple[str, bool]:
    """Return the last ``max_bytes`` of a file as text and whether earlier bytes were left out.

    When the file is cut, the partial first line is dropped (if the tail has a line break).
    Undecodable bytes are replaced. Raises OSError when the file cannot be read.
    """
    max_bytes = max(0, max_bytes)
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(size - start)
    truncated = start > 0
    if truncated:
        newline = data.find(b"\n")
        if 0 <= newline < len(data) - 1:
            data = data[newline + 1 :]
    return data.decode("utf-8", errors="replace"), truncated


def tail_lines(path: Path, lines: int, max_bytes: int = 4096) -> str:
    """The last ``lines`` lines (read from at most ``max_bytes``); empty when unreadable."""
    try:
        text, _ = tail_bytes(path, max_bytes)
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) if lines > 0 else ""


def fetch_size(requested: int) -> int:
    """The byte count of a log fetch: 64 KiB when unset, capped at 1 MiB."""
    if requested <= 0:
        return DEFAULT_FETCH_BYTES
    return min(requested, MAX_FETCH_BYTES)
