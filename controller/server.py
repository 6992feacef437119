"""Assembling and running the controller: store, state, scheduler and gRPC server."""

from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controller.agent_events import AgentEvents
from controller.auth.guard import Guard
from controller.auth.identity_service import IdentityServicer
from controller.auth.jointokens import JoinTokens
from controller.auth.limits import UserLimits
from controller.auth.tls_setup import OperatorTls, ServerTls, join_listen_for, load_server_tls
from controller.clock import Clock, SystemClock
from controller.dispatch import AgentSessions
from controller.http_server import ControllerObservability
from controller.jobs import JobOperations
from controller.policy import Policy, make_policy
from controller.policy.base import needs_job_truth
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.registry import DEFAULT_POLICY
from controller.report_applier import ReportApplier
from controller.rpc_loop import Bell, EventForwarder, RpcLoop
from controller.scheduler import Scheduler, SchedulerLoop
from controller.servicer import AgentServicer, JobServicer
from controller.state import ControllerSettings, ControllerState
from controller.store import open_store
from mlsched.client import KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS
from mlsched.logsetup import fields
from mlsched.statelock import StateDirLock
from mlsched.v1 import agent_pb2_grpc, identity_pb2_grpc, jobs_pb2_grpc

log = logging.getLogger(__name__)

LOCK_FILE = "controller.lock"
# Streams (agent sessions, event follows) are coroutines on one event loop (controller.rpc_loop)
# and hold no thread. Unary calls run in a pool of UNARY_THREADS: a log fetch may hold one for
# LOG_FETCH_TIMEOUT_S, and users' long calls are capped at UserLimits.streams_total (64), so
# 32 threads stay for everything else. Agents' reports are applied by one thread
# (controller.report_applier); a follower's store reads run in BLOCKING_THREADS.
UNARY_THREADS = 96
BLOCKING_THREADS = 4

# The server's side of keepalive: it pings idle agents and CLIs as often as they ping it (a
# session whose agent stopped answering is closed), and accepts their pings, even without an
# active call, down to half their period (more often, it would answer GOAWAY "too_many_pings").
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.max_ping_strikes", 0),
)


@dataclass(frozen=True)
class ControllerConfig:
    listen: str
    state_dir: Path
    join_token: str = ""  # only a controller started --insecure takes agents by a shared token
    policy: str = DEFAULT_POLICY
    mlfs: MlfsConfig | None = None  # MLF-H / MLF-RL / MLFS parameters; None: the paper's (§4.1)
    mlfs_model: Path | None = None  # MLF-RL / MLFS network (mlsched mlfs-train); None: shipped
    slaq_pause_s: float | None = None  # SLAQ's assumed restart pause; None: its default
    settings: ControllerSettings = field(default_factory=ControllerSettings)
    heartbeat_interval_s: float = 5.0
    store_url: str = ""  # "": SQLite in state_dir; postgresql://... (controller.store)
    insecure: bool = False
    join_listen: str = ""  # "": the listen port + 1 (any free port with port 0)
    operator_tls: OperatorTls | None = None  # None: the controller's own CA (state dir)
    tls_names: tuple[str, ...] = ()  # more DNS names/IPs for the server certificate
    limits: UserLimits = field(default_factory=UserLimits)
    http_listen: str = ""  # "": no HTTP listener (/metrics, dashboard: controller.http_server)


class Controller:
    """A running controller; ``address`` is the bound host:port."""

    def __init__(
        self, config: ControllerConfig, clock: Clock | None = None, policy: Policy | None = None
    ) -> None:
        policy = policy or make_policy(
            config.policy, config.mlfs, config.mlfs_model, config.slaq_pause_s
        )
        if needs_job_truth(policy):
            raise ValueError(
                f"policy {policy.name!r} needs every job's true duration and speeds, which only"
                " the simulator knows; it cannot schedule a live cluster"
            )
        config.state_dir.mkdir(parents=True, exist_ok=True)
        # One writer: taken before the store is opened; StateDirInUse leaves the directory as
        # it was. Held until stop() (or the process's death).
        self._lock = StateDirLock(config.state_dir, LOCK_FILE, "controller")
        try:
            self._assemble(config, clock, policy)
        except BaseException:
            self._close_rpc()
            self._lock.release()
            raise

    def _assemble(self, config: ControllerConfig, clock: Clock | None, policy: Policy) -> None:
        self.config = config
        self.store = open_store(config.store_url, config.state_dir)
        self.sessions = AgentSessions()
        self.state = ControllerState(
            self.store, clock or SystemClock(), self.sessions.send, config.settings
        )
        self.scheduler = Scheduler(self.state, policy, disconnect=self.sessions.disconnect)
        self.loop = SchedulerLoop(self.scheduler, config.settings.cycle_s)
        self.ops = JobOperations(self.state)
        self.rpc = RpcLoop()
        self._unary = futures.ThreadPoolExecutor(UNARY_THREADS, thread_name_prefix="rpc")
        self._blocking = futures.ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="report")
        self.obs = ControllerObservability(self.state, self.scheduler)
        self.server = self.rpc.run(_aio_server(self._unary, self.obs.aio_interceptor))
        self.bell = Bell(self.rpc.loop)
        self._applier = ReportApplier(self.state.lock, self.rpc.loop)
        self._forwarder: EventForwarder | None = None
        guard = Guard(config.limits, allow_claims=config.insecure)
        jobs_pb2_grpc.add_JobServiceServicer_to_server(
            JobServicer(
                self.ops,
                self.state,
                self.sessions,
                self.loop.trigger,
                self.bell,
                self._blocking,
                guard,
            ),
            self.server,
        )
        agent_pb2_grpc.add_AgentServiceServicer_to_server(
            AgentServicer(
                config.join_token if config.insecure else "",
                AgentEvents(self.state),
                self.sessions,
                self.loop.trigger,
                config.heartbeat_interval_s,
                self._applier,
            ),
            self.server,
        )
        host = config.listen.rsplit(":", 1)[0]
        self.obs.add_health(self.server, self.rpc.run)
        self._tls: ServerTls | None = None
        self.http_url = ""
        self.join_address = ""
        self.ca_file: Path | None = None
        if config.insecure:
            port = self.server.add_insecure_port(config.listen)
        else:
            port = self._add_tls_ports(config)
        if port == 0:
            raise OSError(f"cannot listen on {config.listen}")
        self.address = f"{host}:{port}"
        self._shutdown = threading.Event()
        self._stopped = False

    def _add_tls_ports(self, config: ControllerConfig) -> int:
        tls = load_server_tls(
            config.state_dir, config.listen, config.tls_names, config.operator_tls
        )
        self._tls = tls
        port = self.server.add_secure_port(config.listen, tls.mutual())
        if tls.authority is None:  # the operator's CA: nodes get certificates from the operator
            return port
        self.ca_file = tls.authority.ca_file
        tokens = JoinTokens(tls.authority.dir)
        identity_pb2_grpc.add_IdentityServiceServicer_to_server(
            IdentityServicer(tls.authority, tokens, self._audit_join), self.server
        )
        join_listen = config.join_listen or join_listen_for(config.listen)
        join_port = self.server.add_secure_port(join_listen, tls.server_only())
        if join_port == 0:
            raise OSError(f"cannot listen on {join_listen} (the join endpoint)")
        self.join_address = f"{join_listen.rsplit(':', 1)[0]}:{join_port}"
        return port

    def _audit_join(self, node_id: str, message: str) -> None:
        with self.state.lock:
            self.state.emit("node_joined", message, node_id=node_id)

    def start(self) -> None:
        self.rpc.run(self.server.start())
        self.http_url = self.obs.start(self.config.http_listen, self._tls, self.config.state_dir)
        self._forwarder = EventForwarder(
            self.state.changed, lambda: self.state.last_event_seq, self.bell
        )
        self.loop.start()
        _write_atomic(self.config.state_dir / "controller.addr", self.address + "\n")
        if self.config.insecure:
            log.warning(
                "INSECURE: plaintext gRPC on %s; anyone who reaches it can act as any user or"
                " node (--insecure is for development only)",
                self.address,
            )
        with self.state.lock:
            self.state.emit(
                "controller_started",
                f"listening on {self.address}, policy {self.scheduler.policy.name}",
            )
        log.info(
            "controller listening on %s, policy %s%s, lease %g s (state in %s)",
            self.address,
            self.scheduler.policy.name,
            " (the default)" if self.scheduler.policy.name == DEFAULT_POLICY else "",
            self.config.settings.lease_s,
            self.config.state_dir,
            extra=fields(policy=self.scheduler.policy.name),
        )

    def request_shutdown(self) -> None:
        """Ask :meth:`wait` to return (safe from a signal handler)."""
        self._shutdown.set()

    def wait(self) -> None:
        self._shutdown.wait()

    def stop(self, grace_s: float = 2.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.obs.stop()
        self.loop.stop()
        self.rpc.run(self.server.stop(grace_s))
        if self._forwarder is not None:
            self._forwarder.stop()
        self._close_rpc()
        self.store.close()
        self._lock.release()

    def _close_rpc(self) -> None:
        """The report applier, both pools and the event loop's thread (what was made)."""
        applier = getattr(self, "_applier", None)
        if applier is not None:
            applier.stop()
        for name in ("_blocking", "_unary"):
            pool = getattr(self, name, None)
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        rpc = getattr(self, "rpc", None)
        if rpc is not None:
            rpc.close()


async def _aio_server(
    unary: futures.ThreadPoolExecutor, *interceptors: grpc.aio.ServerInterceptor
) -> grpc.aio.Server:
    """Made on the loop it serves from; unary (synchronous) handlers run in ``unary``."""
    return grpc.aio.server(
        migration_thread_pool=unary, options=SERVER_OPTIONS, interceptors=interceptors
    )


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
