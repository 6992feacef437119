"""Which uid and groups a task runs under, so that jobs are isolated from each other (issue 13).

With ``--run-tasks-as job-user`` (the default) every task runs under an identity of the user who
submitted the job, never under the agent's: the local account of that name when one exists
(uid >= 1000, so shared storage sees the same owner), else a uid from the agent's pool
(``--task-uid-range``), the same one for the same user on every launch. Tasks of different
users then cannot read each other's environment (trainer tokens), checkpoints or run files, and
cannot signal each other. Switching uid needs root or CAP_SETUID + CAP_SETGID (+ CAP_CHOWN for
the checkpoint directories, CAP_KILL to signal the tasks): see deploy/systemd.

``--run-tasks-as agent`` runs every task under the agent's uid (no isolation between jobs); it
suits a single-user machine such as ``LocalCluster``.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from nodeagent.model import TaskRef
from nodeagent.paths import AgentPaths

RUN_AS_JOB_USER = "job-user"
RUN_AS_AGENT = "agent"
RUN_AS_CHOICES = (RUN_AS_JOB_USER, RUN_AS_AGENT)
DEFAULT_UID_RANGE = (1_500_000_000, 1_500_065_535)
FIRST_LOCAL_UID = 1000  # local accounts below this are system accounts, never a job's
NOBODY_UID = 65534

_CAP_CHOWN, _CAP_KILL, _CAP_SETGID, _CAP_SETUID = 0, 5, 6, 7
NEEDED_CAPS = {"CAP_SETUID": _CAP_SETUID, "CAP_SETGID": _CAP_SETGID, "CAP_CHOWN": _CAP_CHOWN}
NEEDED_CAPS["CAP_KILL"] = _CAP_KILL


class TaskUserError(Exception):
    """The agent cannot run tasks under their users' identities as configured."""


@dataclass(frozen=True)
class TaskIdentity:
    """The uid, gid and supplementary groups of a task's processes; ``home``: its HOME."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str  # empty: the task's run directory


def effective_capabilities(status_text: str) -> int:
    """The CapEff mask from the text of /proc/self/status (0 when absent)."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def missing_capabilities(euid: int, cap_mask: int) -> list[str]:
    """Capabilities the agent lacks to switch its tasks' uids (none for root)."""
    if euid == 0:
        return []
    return [name for name, bit in NEEDED_CAPS.items() if not cap_mask & (1 << bit)]


def parse_uid_range(text: str) -> tuple[int, int]:
    """``FIRST-LAST`` as a pair; ValueError naming the problem."""
    first, sep, last = text.partition("-")
    if not sep or not first.strip().isdigit() or not last.strip().isdigit():
        raise ValueError(
            f"--task-uid-range {text!r}: expected FIRST-LAST, e.g. 1500000000-1500065535"
        )
    low, high = int(first), int(last)
    if not FIRST_LOCAL_UID <= low <= high < 2**31 - 1 or NOBODY_UID in range(low, high + 1):
        raise ValueError(
            f"--task-uid-range {text!r}: must lie within {FIRST_LOCAL_UID}..{2**31 - 2} "
            f"and leave out nobody ({NOBODY_UID})"
        )
    return low, high


class TaskUsers:
    """Maps a job's user to the identity its tasks run under (None: the agent's own)."""

    def __init__(
        self, mode: str, pool_file: Path, uid_range: tuple[int, int] = DEFAULT_UID_RANGE
    ) -> None:
        """``pool_file``: where the pool's user -> uid assignments persist (the agent's state)."""
        if mode not in RUN_AS_CHOICES:
            raise TaskUserError(f"--run-tasks-as {mode!r}: expected one of {RUN_AS_CHOICES}")
        self._mode = mode
        self._pool_file = pool_file
        self._low, self._high = uid_range
        self._lock = threading.Lock()

    @property
    def isolating(self) -> bool:
        """True when tasks run under their users' identities."""
        return self._mode == RUN_AS_JOB_USER

    def check_privileges(self) -> None:
        """Raise TaskUserError naming what is missing when tasks cannot switch uid."""
        if not self.isolating:
            return
        try:
            status = Path("/proc/self/status").read_text(encoding="utf-8")
        except OSError:
            status = ""
        missing = missing_capabilities(os.geteuid(), effective_capabilities(status))
        if not missing and os.geteuid() != 0 and shutil.which("setpriv") is None:
            missing = ["setpriv (util-linux), to start tasks without those capabilities"]
        if missing:
            raise TaskUserError(
                "tasks run as their job's user by default, which needs root or "
                f"{', '.join(missing)} (deploy/systemd/mlsched-agent.service grants them); "
                "pass --run-tasks-as agent to run every job under this agent's uid instead "
                "(no isolation between jobs)"
            )

    def identity(self, user: str) -> TaskIdentity | None:
        """The identity for ``user``'s tasks; None when tasks run as the agent."""
        if not self.isolating:
            return None
        if not user:
            raise TaskUserError("the launch names no user, so its tasks have no identity")
        local = _local_account(user)
        if local is not None:
            return local
        uid = self._pool_uid(user)
        return TaskIdentity(uid=uid, gid=uid, groups=(), home="")

    def _pool_uid(self, user: str) -> int:
        with self._lock:
            assigned = self._load()
            if user in assigned:
                return assigned[user]
            used = set(assigned.values())
            uid = next((u for u in range(self._low, self._high + 1) if u not in used), None)
            if uid is None:
                raise TaskUserError(
                    f"the task uid pool {self._low}-{self._high} is exhausted "
                    f"({len(used)} users); widen --task-uid-range"
                )
            assigned[user] = uid
            tmp = self._pool_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(assigned, indent=1, sort_keys=True), encoding="utf-8")
            os.chmod(tmp, 0o600)
            os.replace(tmp, self._pool_file)
            return uid

    def _load(self) -> dict[str, int]:
        try:
            data = json.loads(self._pool_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise TaskUserError(f"cannot read the task uid pool {self._pool_file}: {exc}") from exc
        if not isinstance(data, dict):
            raise TaskUserError(f"the task uid pool {self._pool_file} is not a JSON object")
        return {str(k): int(v) for k, v in data.items()}


def _local_account(user: str) -> TaskIdentity | None:
    """The local (non-system) account named ``user``, with its groups."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    if entry.pw_uid < FIRST_LOCAL_UID or entry.pw_uid == NOBODY_UID:
        return None
    groups = tuple(g for g in os.getgrouplist(user, entry.pw_gid) if g != entry.pw_gid)
    return TaskIdentity(uid=entry.pw_uid, gid=entry.pw_gid, groups=groups, home=entry.pw_dir)


def hand_over(path: Path, identity: TaskIdentity, mode: int = 0o700) -> None:
    """Make ``path`` (a directory) the task identity's own: owner, group and ``mode``."""
    os.chown(path, identity.uid, identity.gid)
    os.chmod(path, mode)


def prepare_task_dirs(
    paths: AgentPaths, ref: TaskRef, identity: TaskIdentity, checkpoint_dir: Path
) -> None:
    """Give a task running as ``identity`` what it must write, and nothing else: its job's
    checkpoint directory and its own run directory (0700, its owner); the state directory and
    the run root only searchable (0711), so it reaches the trainer address file (0644) and its
    run directory but lists nothing. Raises OSError naming the directory that failed (e.g. a
    checkpoint root on NFS with root squash)."""
    try:
        hand_over(checkpoint_dir, identity)
    except OSError as exc:
        raise OSError(
            f"cannot give the checkpoint directory {checkpoint_dir} to uid {identity.uid}: {exc}"
        ) from exc
    for searchable in (paths.state_dir, paths.run_root, paths.run_root / ref.job_id):
        searchable.mkdir(parents=True, exist_ok=True)
        os.chmod(searchable, 0o711)
    run_dir = paths.run_dir(ref)
    run_dir.mkdir(exist_ok=True)
    hand_over(run_dir, identity)
