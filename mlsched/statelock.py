"""One writer per state directory: an exclusive ``flock`` held for a process's life.

Shared by the controller and the node agent (which must not import each other). The lock is
taken before anything in the directory is opened or written, so a second process on the same
directory refuses to start having touched nothing but the (empty) lock file.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class StateDirInUse(OSError):
    """Another live process holds the lock on this state directory."""

    def __init__(self, state_dir: Path, holder: str) -> None:
        self.state_dir = state_dir
        self.holder = holder
        super().__init__(f"another {holder} is using the state directory {state_dir}")


class StateDirLock:
    """An exclusive, non-blocking ``flock`` on ``<state_dir>/<name>``; released by :meth:`release`
    or when the process dies (the kernel drops it with the last descriptor)."""

    def __init__(self, state_dir: Path, name: str, holder: str) -> None:
        self.path = state_dir / name
        fd = open(self.path, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(fd.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fd.close()
            raise StateDirInUse(state_dir, holder) from None
        fd.seek(0)
        fd.truncate()
        fd.write(f"{os.getpid()}\n")  # for the operator; the flock is the authority
        fd.flush()
        self._fd: IO[str] | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            self._fd.close()
            self._fd = None
