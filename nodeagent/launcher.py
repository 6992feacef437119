"""Task processes: starting them, signalling their process group, noticing their exit."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from nodeagent.records import CREATE_TIME_TOLERANCE_S
from nodeagent.taskuser import TaskIdentity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExitStatus:
    """A task process has exited; ``returncode`` is None when it cannot be known."""

    returncode: int | None


class TaskProcess(Protocol):
    """A running task process (our child, or adopted after an agent restart)."""

    @property
    def pid(self) -> int:
        """Process id (also the id of its process group)."""
        ...

    @property
    def create_time(self) -> float:
        """Start time as psutil reports it (identifies the process across pid reuse)."""
        ...

    def poll(self) -> ExitStatus | None:
        """None while running, else how it exited."""
        ...

    def terminate(self) -> None:
        """Send SIGTERM to the task's process group."""
        ...

    def kill(self) -> None:
        """SIGKILL the task's process group and every descendant."""
        ...


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class ChildProcess:
    """A task started by this agent: ``Popen`` in a new session (process group id == pid)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        try:
            self._create_time = psutil.Process(popen.pid).create_time()
        except psutil.Error:
            self._create_time = 0.0

    @property
    def pid(self) -> int:
        """Process id."""
        return self._popen.pid

    @property
    def create_time(self) -> float:
        """psutil create time (0 when it exited before it could be read)."""
        return self._create_time

    def poll(self) -> ExitStatus | None:
        """Check for exit; on exit, SIGKILL what is left of the process group, then reap.

        The exited leader is looked at without reaping it first (``WNOWAIT``): while it is a
        zombie its pid cannot be reused, so signalling its group cannot hit an unrelated process.
        """
        if self._popen.returncode is not None:
            return ExitStatus(self._popen.returncode)
        waitid = getattr(os, "waitid", None)
        if waitid is None:  # platform without waitid: reap directly
            return None if self._popen.poll() is None else ExitStatus(self._popen.returncode)
        try:
            exited = waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped elsewhere: the pid may be reused, signal nothing
            self._popen.poll()
            return ExitStatus(self._popen.returncode if self._popen.returncode is not None else 0)
        if exited is None:
            return None
        _signal_group(self.pid, signal.SIGKILL)  # leftovers (e.g. data loader workers)
        return ExitStatus(self._popen.wait())

    def terminate(self) -> None:
        """SIGTERM the process group."""
        if self._popen.returncode is None:
            _signal_group(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the process group and descendants that left it."""
        if self._popen.returncode is not None:
            return
        stray = _descendants(self.pid)
        _signal_group(self.pid, signal.SIGKILL)
        for proc in stray:
            with contextlib.suppress(psutil.Error):
                proc.kill()


class AdoptedProcess:
    """A task process left running by a previous agent run; watched through psutil.

    It is not our child, so its exit status is unknown.
    """

    def __init__(self, proc: psutil.Process, create_time: float) -> None:
        self._proc = proc
        self._create_time = create_time

    @property
    def pid(self) -> int:
        """Process id."""
        return self._proc.pid

    @property
    def create_time(self) -> float:
        """The recorded create time."""
        return self._create_time

    def _alive(self) -> bool:
        try:
            if abs(self._proc.create_time() - self._create_time) > CREATE_TIME_TOLERANCE_S:
                return False
            return self._proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def poll(self) -> ExitStatus | None:
        """None while alive, else an unknown exit status."""
        return None if self._alive() else ExitStatus(None)

    def _group_signal(self, sig: signal.Signals) -> None:
        if not self._alive():
            return
        try:
            if os.getpgid(self.pid) == self.pid:
                _signal_group(self.pid, sig)
            else:
                self._proc.send_signal(sig)
        except (OSError, psutil.Error):
            pass

    def terminate(self) -> None:
        """SIGTERM the process group."""
        self._group_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the process group and descendants that left it."""
        stray = _descendants(self.pid) if self._alive() else []
        self._group_signal(signal.SIGKILL)
        for proc in stray:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def adopt_process(pid: int, create_time: float) -> AdoptedProcess | None:
    """Re-attach to a task process after an agent restart; None when it is gone (or pid reused)."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return None
    adopted = AdoptedProcess(proc, create_time)
    return adopted if adopted.poll() is None else None


def spawn_task(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    header: str,
    identity: TaskIdentity | None = None,
) -> ChildProcess:
    """Start a task: new session, stdout and stderr appended to ``log_path`` after ``header``;
    under ``identity``'s uid, gid and groups (umask 077) when given, else the agent's.

    The new session keeps the task out of the agent's process group, so signals meant for the
    agent (and its exit) do not reach it. Raises OSError when the process cannot be started,
    ValueError when Popen refuses the arguments (a NUL byte in the command or environment).

    The identity switch happens in ``setpriv`` after the exec (``identity_prefix``), not in
    Popen's child: asked for a uid, gid or groups, Popen forks instead of vforking, and the fork
    runs the gRPC library's fork handlers, which start threads in the child between fork and
    exec; with the agent's gRPC threads busy, such a child died by SIGABRT or SIGBUS before the
    task began (tests/nodeagent/test_task_users.py, 2 runs in 21). Without those arguments
    Popen vforks, and no fork handler runs.
    """
    if identity is not None:
        argv = [*identity_prefix(identity), *argv]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        out.write(header.encode() + b"\n")
        out.flush()
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            umask=0o077 if identity is not None else -1,
        )
    return ChildProcess(popen)


def identity_prefix(identity: TaskIdentity) -> list[str]:
    """The ``setpriv`` command that runs a task as ``identity`` with no capabilities.

    It takes the uid, gid and supplementary groups, and empties the inheritable and ambient
    capability sets: a root agent's task loses every capability when its uid becomes nonzero,
    but an agent running as a plain user with CAP_SETUID and friends in its ambient set
    (deploy/systemd) would otherwise pass them on through the exec.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise OSError("setpriv (util-linux) is needed to start tasks as their users")
    groups = ",".join(str(g) for g in identity.groups)
    return [
        setpriv,
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        f"--groups={groups}" if groups else "--clear-groups",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--",
    ]


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for single-process tasks without a MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
