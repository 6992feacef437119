"""NodeAgent: composes the task table, trainer service, controller link and periodic events."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import threading
from collections.abc import Mapping

import grpc
import psutil

import mlsched
from mlsched.statelock import StateDirInUse, StateDirLock
from nodeagent.clock import Clock, SystemClock
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.controller_link import ControllerLink
from nodeagent.events import EventLoop, PeriodicEvent
from nodeagent.gpus import GpuBackend, SlicedGpus, detect_gpus
from nodeagent.http_metrics import AgentMetrics
from nodeagent.metrics import NodeMetricsSampler, TaskMetricsSampler
from nodeagent.model import (
    LaunchRequest,
    LeaseCommand,
    LogsResult,
    ProgressInfo,
    Registration,
    RegroupRequest,
    TaskRef,
    TaskStatusInfo,
    TrainerCommand,
)
from nodeagent.overload import (
    Capacity,
    NodeLoadReport,
    OverloadDetector,
    OverloadSettings,
    machine_capacity,
    measure_load,
)
from nodeagent.priorities import TaskPriorities
from nodeagent.selffence import SelfFence, ShimFence, self_fence_margin_s, shim_fence
from nodeagent.tasks import NodeShape, TaskManager
from nodeagent.taskuser import TaskUserError
from nodeagent.trainer_service import TrainerServer

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FATAL = 2
PROGRESS_FLUSH_INTERVAL_S = 0.25


class NodeAgent:
    """One node agent.

    ``run()`` blocks until ``stop()`` (call it from a signal handler or another thread) or a
    fatal controller error, and returns the process exit code. Stopping is a drain: the
    controller session and the trainer service close, but task processes keep running; the next
    agent run re-adopts them from the records in the state directory.
    """

    def __init__(
        self,
        config: AgentConfig,
        *,
        clock: Clock | None = None,
        gpus: GpuBackend | None = None,
        channel_credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``gpus`` replaces GPU detection (tests); ``clock`` replaces the real clock;
        ``channel_credentials``: mutual TLS to the controller (None: plaintext, --insecure)."""
        config.validate()
        self._config = config
        self._paths = config.paths()
        self._clock = clock or SystemClock()
        self._gpus_override = gpus
        self._channel_credentials = channel_credentials
        self._stop_requested = threading.Event()
        self._fatal: str | None = None
        self._started = False
        self._lock: StateDirLock | None = None
        self._gpus: GpuBackend | None = None
        self._tasks: TaskManager | None = None
        self._trainer: TrainerServer | None = None
        self._link: ControllerLink | None = None
        self._fence: SelfFence | None = None
        self._loop: EventLoop | None = None
        self._node_sampler: NodeMetricsSampler | None = None
        self._task_sampler: TaskMetricsSampler | None = None
        self._capacity: Capacity | None = None
        self._detector: OverloadDetector | None = None
        self.priorities = TaskPriorities()  # from the controller (docs/overload.md)
        self.last_load: NodeLoadReport | None = None  # the latest load measured
        # /metrics and the health service (docs/observability.md)
        self.observability = AgentMetrics(config.node_id)
        self.observability.view.registered = lambda: (
            self._link is not None and (self._link.cut_off_s() == 0.0)
        )
        self.observability.view.task_states = lambda: (
            [s.state.name for s in self._tasks.statuses()] if self._tasks is not None else []
        )

    # ------------------------------------------------------------- lifecycle

    @property
    def fatal_error(self) -> str | None:
        """Why the agent gave up, if it did."""
        return self._fatal

    @property
    def tasks(self) -> TaskManager:
        """The task table (after start)."""
        if self._tasks is None:
            raise RuntimeError("the agent is not started")
        return self._tasks

    def start(self) -> None:
        """Start every component; raises ConfigError/GpuConfigError/OSError when it cannot."""
        cfg, paths = self._config, self._paths
        paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.tasks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.logs_dir.mkdir(parents=True, exist_ok=True)
        task_users = cfg.task_users()
        try:
            task_users.check_privileges()
        except TaskUserError as exc:
            raise ConfigError(str(exc)) from None
        self._lock_state_dir()
        try:
            self._gpus = self._gpus_override or detect_gpus(cfg.gpus)
            if cfg.gpu_slices > 1:  # docs/overload.md, "GPU sharing"
                self._gpus = SlicedGpus(self._gpus, cfg.gpu_slices)
            infos = self._gpus.infos()
            node = NodeShape(
                node_id=cfg.node_id,
                virtual_gpu_indices=self._gpus.virtual_indices(),
                gpu_slots=len(infos),
                cpu_count=os.cpu_count() or 1,
                gpu_slices=cfg.gpu_slices,
            )
            self._tasks = TaskManager(
                paths=paths,
                node=node,
                events=_LinkEvents(self),
                suspend_grace_s=cfg.suspend_grace_s,
                kill_grace_s=cfg.kill_grace_s,
                progress_min_interval_s=cfg.progress_min_interval_s,
                clock=self._clock,
                save_extension_s=cfg.suspend_save_extension_s,
                shim_fence=self._shim_fence,
                task_users=task_users if task_users.isolating else None,
            )
            adopted = self._tasks.adopt_existing()
            if adopted:
                log.info("re-adopted %d running task(s) from a previous run", adopted)
            self._trainer = TrainerServer(
                self._tasks,
                cfg.trainer_listen,
                paths.trainer_address_file,
                verify_peer=cfg.verify_trainer_peer,
                interceptors=(self.observability.interceptor,),
                setup=self.observability.add_health,
            )
            self._tasks.set_trainer_address(self._trainer.start())
            if cfg.http_listen:  # before registering: once registered, it is there
                self.observability.start_http(cfg.http_listen, paths.state_dir)
            self._node_sampler = NodeMetricsSampler(
                self._gpus,
                self._clock,
                disk_free=lambda: shutil.disk_usage(paths.state_dir).free,
                min_free_disk_bytes=cfg.min_free_disk_bytes,
            )
            self._task_sampler = TaskMetricsSampler(self._gpus, self._clock)
            self._capacity = machine_capacity(
                cfg.cpu_capacity, cfg.memory_capacity, cfg.bandwidth_capacity
            )
            self._detector = OverloadDetector(
                cfg.node_id,
                OverloadSettings(
                    enabled=cfg.overload_detection,
                    h_r=cfg.overload_threshold,
                    p_s=cfg.migration_share,
                    samples=cfg.overload_samples,
                    cooldown_s=cfg.migration_cooldown_s,
                    clear_below=cfg.overload_clear_threshold,
                ),
                self._clock,
            )
            self._loop = EventLoop(
                [
                    PeriodicEvent("task-poll", cfg.task_poll_interval_s, self._tasks.poll),
                    PeriodicEvent(
                        "progress-flush", PROGRESS_FLUSH_INTERVAL_S, self._tasks.flush_progress
                    ),
                    PeriodicEvent("metrics", cfg.metrics_interval_s, self._report_metrics),
                    PeriodicEvent("self-fence", cfg.task_poll_interval_s, self._self_fence),
                ],
                self._clock,
            )
            self._loop.start()
            self._link = ControllerLink(
                cfg.controller,
                cfg.join_token,
                _LinkHandler(self),
                self._on_fatal,
                reconnect_initial_s=cfg.reconnect_initial_s,
                reconnect_max_s=cfg.reconnect_max_s,
                clock=self._clock,
                credentials=self._channel_credentials,
            )
            self._fence = SelfFence(
                self._tasks, self._link.cut_off_s, self._fence_after_s, cfg.suspend_grace_s
            )
            self._link.start()
        except BaseException:
            self._shutdown()
            raise
        self._started = True
        log.info(
            "node agent %s started: %d GPU slot(s) (%d virtual, %d per GPU), controller %s, "
            "state in %s",
            cfg.node_id,
            len(infos),
            len(self._gpus.virtual_indices()),
            cfg.gpu_slices,
            cfg.controller,
            paths.state_dir,
        )

    def run(self) -> int:
        """Start (unless started), block until stopped, drain; returns the exit code."""
        if not self._started:
            self.start()
        try:
            while not self._stop_requested.wait(0.5):
                pass
        finally:
            self._shutdown()
        return EXIT_FATAL if self._fatal else EXIT_OK

    def stop(self) -> None:
        """Ask ``run()`` to return (safe from a signal handler)."""
        self._stop_requested.set()

    def close(self) -> None:
        """Stop and drain without ``run()`` (when started with ``start()``)."""
        self._stop_requested.set()
        self._shutdown()

    def _shutdown(self) -> None:
        """The drain hook: stop talking, leave task processes running, release the state dir."""
        self._fence = None
        self.observability.stop()
        if self._link is not None:
            self._link.stop()
            self._link = None
        if self._loop is not None:
            self._loop.stop()
            self._loop = None
        if self._trainer is not None:
            self._trainer.stop()
            self._trainer = None
        if self._tasks is not None and self._started:
            running = len(self._tasks.running())
            if running:
                log.info("agent stopping; %d task(s) left running for the next agent run", running)
        if self._gpus is not None and self._gpus_override is None:
            self._gpus.close()
        self._gpus = None
        self._started = False
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _lock_state_dir(self) -> None:
        try:
            self._lock = StateDirLock(self._paths.state_dir, self._paths.lock_file.name, "agent")
        except StateDirInUse as exc:
            raise ConfigError(str(exc)) from None

    def _on_fatal(self, message: str) -> None:
        self._fatal = message
        self._stop_requested.set()

    # ------------------------------------------------------------- reporting

    def _report_metrics(self) -> None:
        """Sample node and tasks, report them with the load, then look for overload."""
        if (
            self._tasks is None
            or self._node_sampler is None
            or self._task_sampler is None
            or self._gpus is None
            or self._capacity is None
        ):
            return
        node = self._node_sampler.sample(self._tasks.busy_gpus())
        self.observability.view.node = node
        self.observability.set_registered(self.observability.view.registered())
        running = self._tasks.running_tasks()
        tasks = self._task_sampler.sample([(t.ref, t.pid) for t in running])
        by_ref = {m.ref: m for m in tasks}
        load = measure_load(
            node,
            [(t, by_ref[t.ref]) for t in running if t.ref in by_ref],
            self._capacity,
            scope=self._config.load_scope,
            virtual_gpus=self._gpus.virtual_indices(),
            priorities=self.priorities.ranked(running),
            gpu_slices=self._config.gpu_slices,
        )
        self.last_load = load
        link = self._link
        if link is None or not link.connected:
            return
        link.send_metrics(node, tasks, load)
        if self._detector is None:
            return
        for wish in self._detector.observe(load):
            if link.send_migration_request(wish):
                self._detector.requested(wish.ref)
                self.observability.overload_requests.inc()
                log.warning(
                    "asked the controller to migrate task %s (demand %s): %s",
                    wish.ref,
                    _shares(wish.demand),
                    wish.reason,
                )

    def _fence_after_s(self) -> float:
        """Self-fencing delay: the configured one, lowered to the controller's timeout (so never
        more than the timeout, which the reported margin counts on)."""
        learnt = self._link.heartbeat_timeout_s if self._link is not None else 0.0
        configured = self._config.self_fence_after_s
        return min(configured, learnt) if learnt > 0 else configured

    def _shim_fence(self) -> ShimFence:
        """The deadlines a new task's shim gets for when this agent falls silent."""
        cfg = self._config
        return shim_fence(self._fence_after_s(), cfg.suspend_grace_s, cfg.suspend_save_extension_s)

    def _self_fence(self) -> None:
        if self._fence is not None:
            self._fence.check()

    def _registration(self) -> Registration:
        assert self._tasks and self._gpus
        cfg = self._config
        return Registration(
            node_id=cfg.node_id,
            address=cfg.advertise_address,
            hostname=socket.gethostname(),
            gpus=tuple(self._gpus.infos()),
            cpu_count=os.cpu_count() or 1,
            memory_total_bytes=int(psutil.virtual_memory().total),
            tasks=tuple(self._tasks.statuses()),
            agent_version=mlsched.__version__,
            self_fence_margin_s=self_fence_margin_s(
                cfg.metrics_interval_s,
                cfg.suspend_grace_s,
                cfg.task_poll_interval_s,
                cfg.suspend_save_extension_s,
            ),
        )

    def _on_registered(self, heartbeat_interval_s: float) -> None:
        if heartbeat_interval_s > 0 and self._loop is not None:
            interval = min(self._config.metrics_interval_s, heartbeat_interval_s)
            self._loop.set_interval("metrics", interval)
        self.observability.set_registered(True)


def _shares(values: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.2f}" for k, v in values.items())


class _LinkEvents:
    """TaskEvents that go to the controller link."""

    def __init__(self, agent: NodeAgent) -> None:
        self._agent = agent

    def task_status(self, status: TaskStatusInfo) -> None:
        link = self._agent._link
        if link is not None:
            link.send_status(status)

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        link = self._agent._link
        if link is not None:
            link.send_progress(ref, progress)


class _LinkHandler:
    """ControllerHandler that acts on the agent's task table."""

    def __init__(self, agent: NodeAgent) -> None:
        self._agent = agent

    def registration(self) -> Registration:
        return self._agent._registration()

    def on_registered(self, node_id: str, heartbeat_interval_s: float) -> None:
        if node_id and node_id != self._agent._config.node_id:
            log.warning("the controller registered this agent as %s", node_id)
        self._agent._on_registered(heartbeat_interval_s)

    def launch(self, request: LaunchRequest) -> None:
        self._agent.observability.commands.labels("launch").inc()
        self._agent.tasks.launch(request)

    def suspend(self, ref: TaskRef, grace_s: float, reason: str) -> None:
        self._agent.observability.commands.labels("suspend").inc()
        self._agent.tasks.suspend(ref, grace_s, reason)

    def kill(self, ref: TaskRef, reason: str) -> None:
        self._agent.observability.commands.labels("kill").inc()
        self._agent.tasks.kill(ref, reason)

    def trainer_command(self, ref: TaskRef, command: TrainerCommand) -> None:
        kind = "lease" if isinstance(command, LeaseCommand) else "trainer"
        self._agent.observability.commands.labels(kind).inc()
        self._agent.tasks.trainer_command(ref, command)

    def fetch_logs(self, ref: TaskRef, max_bytes: int) -> LogsResult:
        return self._agent.tasks.fetch_logs(ref.job_id, ref.rank, max_bytes)

    def ack(self, ref: TaskRef) -> None:
        self._agent.tasks.ack(ref)

    def regroup(self, request: RegroupRequest) -> None:
        self._agent.tasks.regroup(request)

    def priority(self, ref: TaskRef, priority: float) -> None:
        self._agent.priorities.set(ref, priority)
