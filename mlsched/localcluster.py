"""A controller and node agents as real local processes: used by the demo and the tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from controller.admin_cli import issue_join_token, issue_user
from mlsched.client import Client
from mlsched.model import Event
from mlsched.security import bundle
from mlsched.security.authority import CA_CERT, TLS_DIR

# A local agent's join token is spent within seconds; this bounds a leaked one.
JOIN_TOKEN_TTL_S = 600.0


@dataclass(frozen=True)
class ClusterTiming:
    lease_s: float = 12.0
    cycle_s: float = 1.0
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    suspend_grace_s: float = 15.0


class LocalCluster:
    """Processes under ``root``: ``controller/``, ``<node-id>/``, shared ``checkpoints/``,
    ``users/<name>/`` (credential bundles issued for :meth:`client`).

    Secure like a deployment: the controller makes its CA, each agent redeems a one-time join
    token for its node certificate, each user gets a certificate. ``insecure`` runs everything
    plaintext with one shared token instead (development of the --insecure path only)."""

    def __init__(
        self,
        root: Path,
        timing: ClusterTiming = ClusterTiming(),
        policy: str = "fifo-lease",
        *,
        insecure: bool = False,
        controller_extra: tuple[str, ...] = (),
    ) -> None:
        """``controller_extra``: more ``mlsched controller`` flags (later flags win)."""
        self.root = root
        self.controller_extra = controller_extra
        self.timing = timing
        self.policy = policy
        self.insecure = insecure
        self.token_file = root / "join-token"  # the shared token of an insecure cluster
        self.checkpoint_root = root / "checkpoints"
        self.address = ""
        self.join_address = ""
        self._issuing = threading.Lock()
        self.controller: subprocess.Popen[bytes] | None = None
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        root.mkdir(parents=True, exist_ok=True)
        self.checkpoint_root.mkdir(exist_ok=True)
        if not self.token_file.exists():
            self.token_file.write_text(secrets.token_hex(16) + "\n")
            self.token_file.chmod(0o600)

    def _mlsched(self) -> list[str]:
        return [sys.executable, "-m", "mlsched"]

    def start_controller(self, timeout_s: float = 120.0) -> str:
        """Start (or restart on the same port) the controller; returns its address."""
        listen = self.address or "127.0.0.1:0"
        t = self.timing
        cmd = [
            *self._mlsched(),
            "controller",
            "--listen",
            listen,
            "--state-dir",
            str(self.state_dir),
            *self._controller_security(),
            "--policy",
            self.policy,
            "--lease-seconds",
            str(t.lease_s),
            "--cycle-seconds",
            str(t.cycle_s),
            "--heartbeat-timeout",
            str(t.heartbeat_timeout_s),
            "--heartbeat-interval",
            str(t.heartbeat_interval_s),
            "--suspend-grace",
            str(t.suspend_grace_s),
            *self.controller_extra,
        ]
        log = open(self.root / "controller.log", "ab")  # noqa: SIM115 - owned by the process
        self.controller = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = _read_line(self.controller, timeout_s)
        if not line.startswith("listening on "):
            raise RuntimeError(f"controller did not start (see {self.root / 'controller.log'})")
        self.address = line.split()[-1]
        if not self.insecure:
            line = _read_line(self.controller, timeout_s)
            if not line.startswith("join endpoint on "):
                raise RuntimeError(f"no join endpoint (see {self.root / 'controller.log'})")
            self.join_address = line.split()[-1]
        return self.address

    @property
    def state_dir(self) -> Path:
        return self.root / "controller"

    @property
    def ca_file(self) -> Path:
        return self.state_dir / TLS_DIR / CA_CERT

    def _controller_security(self) -> list[str]:
        if self.insecure:
            return ["--insecure", "--join-token-file", str(self.token_file)]
        return ["--join-listen", self.join_address or "127.0.0.1:0"]

    def _agent_security(self, node_id: str, state_dir: Path) -> list[str]:
        """Flags of an agent: its join token and the CA to check the controller by, until it
        holds a certificate (a restarted agent uses the one it has)."""
        if self.insecure:
            return ["--insecure", "--join-token-file", str(self.token_file)]
        if bundle.exists(state_dir / "tls"):
            return []
        token_file = self.root / f"{node_id}.join-token"
        token = issue_join_token(self.state_dir, node_id, JOIN_TOKEN_TTL_S)
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        return [
            "--join-token-file",
            str(token_file),
            "--ca-file",
            str(self.ca_file),
            "--join-controller",
            self.join_address,
        ]

    def credentials(self, user: str, admin: bool = False) -> bundle.Bundle:
        """The credential bundle of ``user`` (issued on first use, like `mlsched admin
        issue-user`), under ``users/<user>``."""
        directory = self.root / "users" / (f"admin-{user}" if admin else user)
        with self._issuing:  # clients are made from several threads
            if not bundle.exists(directory):
                issue_user(self.state_dir, user, admin, directory)
            return bundle.load(directory)

    def start_agent(
        self, node_id: str, gpus: int = 2, extra: list[str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start an agent; ``extra`` are more ``mlsched agent`` flags (later flags win). Every
        agent here shares this machine, so each measures its load as its own tasks'
        (``--load-scope tasks``), against the machine's capacities unless ``extra`` sets them
        (e.g. ``--cpu-capacity 1``). Tasks run as the caller (``--run-tasks-as agent``): a local
        cluster is one user's."""
        state_dir = self.root / node_id
        cmd = [
            *self._mlsched(),
            "agent",
            "--controller",
            self.address,
            *self._agent_security(node_id, state_dir),
            "--node-id",
            node_id,
            "--state-dir",
            str(state_dir),
            "--checkpoint-root",
            str(self.checkpoint_root),
            "--gpus",
            str(gpus),
            "--metrics-interval",
            str(self.timing.heartbeat_interval_s),
            "--suspend-grace",
            str(self.timing.suspend_grace_s),
            "--load-scope",
            "tasks",
            "--run-tasks-as",  # one user's cluster: every job is the caller's own
            "agent",
            *(extra or []),
        ]
        state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{node_id}.log", "ab") as log:
            process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.agents[node_id] = process
        return process

    def client(self, user: str = "demo", admin: bool = False) -> Client:
        """A client of ``user`` (``admin``: with the admin role), holding their certificate."""
        if self.insecure:
            return Client(self.address, user)
        return Client(self.address, credentials=self.credentials(user, admin))

    def wait_for_event(
        self,
        predicate: Callable[[Event], bool],
        timeout_s: float,
        after_seq: int = 0,
        user: str = "harness",
    ) -> Event:
        """Block until an event matching ``predicate`` appears in the controller's feed."""
        deadline_error = TimeoutError(f"no matching event within {timeout_s} s")
        with self.client(user) as client:
            try:
                for event in client.events(after_seq=after_seq, follow=True, timeout_s=timeout_s):
                    if predicate(event):
                        return event
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    raise deadline_error from None
                raise
        raise deadline_error

    def wait_for_nodes(self, node_ids: set[str], timeout_s: float = 60.0) -> None:
        seen: set[str] = set()

        def registered(event: Event) -> bool:
            if event.kind == "node_registered":
                seen.add(event.node_id)
            return node_ids <= seen

        self.wait_for_event(registered, timeout_s)

    def kill_controller(self, sig: int = signal.SIGKILL) -> None:
        if self.controller is not None:
            self.controller.send_signal(sig)
            self.controller.wait(timeout=30)
            self.controller = None

    def kill_agent(self, node_id: str, sig: int = signal.SIGKILL) -> None:
        process = self.agents.pop(node_id)
        process.send_signal(sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        """Stop agents and controller (training processes are stopped by their agents' owner:
        here, every process whose environment points at this cluster's checkpoint root)."""
        for node_id in list(self.agents):
            self.kill_agent(node_id, signal.SIGTERM)
        self.kill_controller(signal.SIGTERM)
        _kill_training_processes(self.checkpoint_root)


def _read_line(process: subprocess.Popen[bytes], timeout_s: float) -> str:
    result: list[str] = []
    assert process.stdout is not None
    reader = threading.Thread(
        target=lambda: result.append(process.stdout.readline().decode()), daemon=True
    )
    reader.start()
    reader.join(timeout_s)
    if not result:
        process.kill()
        raise RuntimeError(f"no output from {process.args} within {timeout_s} s")
    return result[0].strip()


def _kill_training_processes(checkpoint_root: Path) -> None:
    """Training processes outlive their agent by design (systemd KillMode=process); a local
    cluster being torn down must not leave them behind."""
    import psutil

    for process in psutil.process_iter(["pid"]):
        try:
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        key = environ.get("MLSCHED_CHECKPOINT_DIR", "")
        if key.startswith(str(checkpoint_root)) and process.pid != os.getpid():
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
