"""Configuration of a node agent."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from mlsched.httplisten import split_listen
from nodeagent.paths import AgentPaths, is_safe_component
from nodeagent.taskuser import (
    DEFAULT_UID_RANGE,
    RUN_AS_CHOICES,
    RUN_AS_JOB_USER,
    TaskUsers,
)


class ConfigError(ValueError):
    """The agent cannot start with this configuration."""


def default_state_base() -> Path:
    """``/var/lib/mlsched/agent`` for root, else ``$XDG_STATE_HOME/mlsched/agent``."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/mlsched/agent")
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "mlsched" / "agent"


@dataclass
class AgentConfig:
    """Settings of one node agent.

    Attributes:
        controller: gRPC target of the controller's AgentService (``host:port``).
        join_token: cluster join token, sent as ``mlsched-join-token`` metadata.
        node_id: this node's id; defaults to the hostname.
        state_dir: task records, logs and the trainer address file; defaults to
            ``<default_state_base()>/<node_id>`` so several agents can share one machine.
        checkpoint_root: directory every node mounts (job checkpoints live in
            ``<checkpoint_root>/<job_id>``); defaults to ``<state_dir>/checkpoints``, which is only
            right when the whole cluster is this one machine.
        advertise_address: address other nodes use to reach this one (MASTER_ADDR when a rank-0
            task runs here). The default 127.0.0.1 only works for a single-machine cluster.
        gpus: ``None``: use the GPUs NVML finds (error when there are none). ``N``: with NVML GPUs,
            use the first N of them; without, run N virtual slots (tasks train on CPU).
        gpu_slices: K, each GPU offered to the controller as K time-sliced slots (slot ``s`` is
            on GPU ``s // K``; docs/overload.md, "GPU sharing"). 1: every GPU whole.
        metrics_interval_s: MetricsReport period; the report is also the heartbeat.
        suspend_grace_s: default grace of a suspension when the controller gives none: SuspendNow,
            then SIGTERM after the grace, then SIGKILL after the same grace again.
        kill_grace_s: grace between SIGTERM and SIGKILL when killing a task.
        suspend_save_extension_s: how much longer than twice the grace a suspension waits for
            a checkpoint save the trainer reports in progress (then SIGKILL); counted in the
            self-fencing margin and the shim's own deadline.
        trainer_listen: where the TrainerService listens (``host:port``; port 0 picks one).
        reconnect_initial_s: first delay before reconnecting to the controller.
        reconnect_max_s: cap of the exponential reconnect backoff (jitter +-20 %). Once registered,
            the agent also keeps it below a third of the controller's heartbeat timeout, which
            the controller sends; this default is a third of the controller's default (30 s).
        progress_min_interval_s: at most one ProgressReport per task per this interval.
        task_poll_interval_s: how often task processes are checked for exits and escalations.
        cpu_capacity: cores counted as 100% CPU (None: every CPU of the machine).
        memory_capacity: bytes counted as 100% memory (None: the machine's memory).
        bandwidth_capacity: bytes/s counted as 100% network (None: the summed link speed).
        load_scope: ``tasks`` (the default: the node's load is only this agent's tasks, so load
            that is not mlsched's never counts as overload) or ``machine`` (the whole machine's,
            whoever uses it; the operator's explicit choice).
        overload_detection: look for overload and ask the controller to migrate tasks (MLFS).
        overload_threshold: h_r, the share above which a resource type or GPU is overloaded.
        migration_share: p_s, the lowest-priority share of tasks on overloaded GPUs to pick from.
        overload_samples: consecutive overloaded samples (metrics reports) before asking.
        migration_cooldown_s: before the same task may be asked for again.
        self_fence_after_s: cut off from the controller this long, the agent suspends its tasks
            itself (nodeagent/selffence.py); once registered, at most the controller's
            heartbeat timeout (the default is the controller's default timeout). Before the
            first registration a larger value than the controller's timeout is unsafe.
        overload_clear_threshold: after a request, no new one until what was above h_r has
            fallen to this share or less (hysteresis); in [0, h_r]. None: h_r - 0.1.
        verify_trainer_peer: accept a trainer session only from a process of the task it names
            (its own session; nodeagent/peercheck.py), not from anyone holding its token.
        min_free_disk_bytes: with less free space than this on the state disk, the agent tells
            the controller its disk is full and is given no new tasks (issue 11: a full disk
            degrades service; running tasks go on).
    """

    controller: str
    join_token: str = ""
    node_id: str = field(default_factory=socket.gethostname)
    state_dir: Path | None = None
    checkpoint_root: Path | None = None
    advertise_address: str = "127.0.0.1"
    gpus: int | None = None
    gpu_slices: int = 1
    metrics_interval_s: float = 5.0
    suspend_grace_s: float = 30.0
    kill_grace_s: float = 5.0
    suspend_save_extension_s: float = 30.0
    trainer_listen: str = "127.0.0.1:0"
    reconnect_initial_s: float = 0.5
    reconnect_max_s: float = 10.0
    progress_min_interval_s: float = 1.0
    task_poll_interval_s: float = 0.2
    cpu_capacity: float | None = None
    memory_capacity: int | None = None
    bandwidth_capacity: float | None = None
    load_scope: str = "tasks"
    overload_detection: bool = True
    overload_threshold: float = 0.9
    migration_share: float = 0.1
    overload_samples: int = 3
    migration_cooldown_s: float = 60.0
    overload_clear_threshold: float | None = None
    self_fence_after_s: float = 30.0
    verify_trainer_peer: bool = True
    min_free_disk_bytes: int = 64 * 1024 * 1024
    http_listen: str = ""  # "": no /metrics listener (nodeagent/http_metrics.py)
    run_tasks_as: str = RUN_AS_JOB_USER
    task_uid_range: tuple[int, int] = DEFAULT_UID_RANGE

    def validate(self) -> None:
        """Raise ConfigError when a setting is unusable."""
        if not self.controller:
            raise ConfigError("the controller address is required (--controller host:port)")
        if not is_safe_component(self.node_id):
            raise ConfigError(f"invalid node id {self.node_id!r}")
        if self.gpus is not None and self.gpus < 0:
            raise ConfigError("--gpus must be >= 0")
        if self.gpu_slices < 1:
            raise ConfigError("--gpu-slices must be >= 1")
        for name in (
            "metrics_interval_s",
            "task_poll_interval_s",
            "reconnect_initial_s",
            "self_fence_after_s",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        for name in (
            "suspend_grace_s",
            "kill_grace_s",
            "progress_min_interval_s",
            "suspend_save_extension_s",
        ):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ConfigError("reconnect_max_s must be >= reconnect_initial_s")
        if not self.trainer_listen or ":" not in self.trainer_listen:
            raise ConfigError("trainer_listen must be host:port")
        for name in ("cpu_capacity", "memory_capacity", "bandwidth_capacity"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be > 0")
        if self.load_scope not in ("machine", "tasks"):
            raise ConfigError("load_scope must be 'machine' or 'tasks'")
        if not 0 < self.overload_threshold <= 1:
            raise ConfigError("overload_threshold (h_r) must be in (0, 1]")
        if not 0 < self.migration_share <= 1:
            raise ConfigError("migration_share (p_s) must be in (0, 1]")
        if self.min_free_disk_bytes < 0:
            raise ConfigError("min_free_disk_bytes must be >= 0")
        if self.overload_samples < 1:
            raise ConfigError("overload_samples must be >= 1")
        if not self.migration_cooldown_s >= 0:
            raise ConfigError("migration_cooldown_s must be >= 0")
        if self.run_tasks_as not in RUN_AS_CHOICES:
            raise ConfigError(f"run_tasks_as must be one of {', '.join(RUN_AS_CHOICES)}")
        if self.http_listen:
            try:
                split_listen(self.http_listen)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        clear = self.overload_clear_threshold
        if clear is not None and not 0 <= clear <= self.overload_threshold:
            raise ConfigError("overload_clear_threshold must be in [0, overload_threshold]")

    def task_users(self) -> TaskUsers:
        """Which uid each job's tasks run under (nodeagent/taskuser.py)."""
        pool_file = self.paths().state_dir / "task-uids.json"
        return TaskUsers(self.run_tasks_as, pool_file, self.task_uid_range)

    def paths(self) -> AgentPaths:
        """The file layout, with the documented defaults filled in."""
        state_dir = Path(self.state_dir) if self.state_dir else default_state_base() / self.node_id
        state_dir = state_dir.expanduser().absolute()
        root = Path(self.checkpoint_root) if self.checkpoint_root else state_dir / "checkpoints"
        return AgentPaths(state_dir=state_dir, checkpoint_root=root.expanduser().absolute())
