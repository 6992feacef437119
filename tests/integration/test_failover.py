"""Active/standby controllers on PostgreSQL (issue 12 #5): real controller, agent and training
processes. The leader is killed with -9 mid-run; the standby takes over within its lease, the
agent re-registers with its task still running (same pid), and the job is neither lost nor run
twice. A leader paused through its lease steps down when it wakes (exit status 4)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from controller.admin_cli import issue_join_token, issue_user
from controller.standby import EXIT_DEPOSED
from controller.store.lease import LeaseTable
from mlsched.client import Client
from mlsched.localcluster import _kill_training_processes, _read_line
from mlsched.model import Event, IterationStop, JobState
from mlsched.security import bundle
from mlsched.security.authority import CA_CERT, CA_KEY, TLS_DIR
from tests.controller.store import pg_server
from tests.integration.conftest import _example_spec

LEASE_S = 4.0
START_TIMEOUT_S = 60.0
PROGRESS_POLL_S = 0.2


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    reason = pg_server.missing()
    if reason is not None:
        pytest.skip(reason)
    with pg_server.server() as conninfo:
        yield conninfo


class HaCluster:
    """Two controllers on one database (TLS, one CA copied to both state directories), one
    agent given both addresses, clients given both."""

    def __init__(self, root: Path, conninfo: str) -> None:
        self.root = root
        self.conninfo = conninfo
        self.url = pg_server.url(conninfo)
        self.checkpoints = root / "checkpoints"
        self.checkpoints.mkdir(parents=True)
        self.controllers: dict[str, subprocess.Popen[bytes]] = {}
        self.addresses: dict[str, str] = {}
        self.join_address = ""
        self.agent: subprocess.Popen[bytes] | None = None

    def state_dir(self, name: str) -> Path:
        return self.root / name

    def start_controller(self, name: str, expect: str) -> str:
        """Start controller ``name``; ``expect``: "listening" (it leads) or "standby"."""
        cmd = [
            *(sys.executable, "-m", "mlsched", "controller"),
            *("--listen", "127.0.0.1:0", "--join-listen", "127.0.0.1:0"),
            *("--state-dir", str(self.state_dir(name)), "--store", self.url),
            *("--leader-lease", str(LEASE_S), "--policy", "fifo-lease"),
            *("--lease-seconds", "600", "--cycle-seconds", "0.3"),
            *("--heartbeat-timeout", "30", "--heartbeat-interval", "0.5"),
            *("--suspend-grace", "15"),
        ]
        with open(self.root / f"{name}.log", "ab") as log:
            process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log)
        self.controllers[name] = process
        line = _read_line(process, START_TIMEOUT_S)
        assert line.startswith(f"{expect} on "), (line, (self.root / f"{name}.log").read_text())
        self.addresses[name] = line.split()[-1]
        if expect == "listening":
            self.join_address = _read_line(process, START_TIMEOUT_S).split()[-1]
        return self.addresses[name]

    def share_ca(self, source: str, target: str) -> None:
        """What deploy/README.md asks before the standby's first start."""
        tls = self.state_dir(target) / TLS_DIR
        tls.mkdir(parents=True, mode=0o700)
        for name in (CA_KEY, CA_CERT):
            shutil.copy2(self.state_dir(source) / TLS_DIR / name, tls / name)

    def await_leadership(self, name: str) -> None:
        """The standby's "listening on" line, once it has taken over."""
        line = _read_line(self.controllers[name], START_TIMEOUT_S)
        assert line == f"listening on {self.addresses[name]}", line

    @property
    def both(self) -> str:
        return ",".join(self.addresses.values())

    @property
    def reversed(self) -> str:
        return ",".join(reversed(self.addresses.values()))

    def start_agent(self, node_id: str, issuer: str) -> None:
        state_dir = self.root / node_id
        state_dir.mkdir()
        token_file = self.root / f"{node_id}.token"
        token_file.write_text(issue_join_token(self.state_dir(issuer), node_id, 600) + "\n")
        cmd = [
            # The standby first: it names the leader, and the agent goes there.
            *(sys.executable, "-m", "mlsched", "agent", "--controller", self.reversed),
            *("--join-token-file", str(token_file), "--join-controller", self.join_address),
            *("--ca-file", str(self.state_dir(issuer) / TLS_DIR / CA_CERT)),
            *("--node-id", node_id, "--state-dir", str(state_dir)),
            *("--checkpoint-root", str(self.checkpoints), "--gpus", "1"),
            *("--metrics-interval", "0.5", "--suspend-grace", "15", "--load-scope", "tasks"),
            # One user's test cluster, as LocalCluster runs it: under job-user isolation a root
            # agent's tasks cannot execute an interpreter under /root (mode 0700).
            *("--run-tasks-as", "agent"),
        ]
        with open(self.root / f"{node_id}.log", "ab") as log:
            self.agent = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def client(self, issuer: str, user: str = "alice") -> Client:
        directory = self.root / "users" / user
        if not bundle.exists(directory):
            issue_user(self.state_dir(issuer), user, False, directory)
        return Client(self.both, credentials=bundle.load(directory))

    def lease_reader(self) -> LeaseTable:
        """The lease row, read on a connection of the test's own."""
        import psycopg

        return LeaseTable(psycopg.connect(self.conninfo, autocommit=True), postgres=True)

    def stop(self) -> None:
        for process in [self.agent, *self.controllers.values()]:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
        _kill_training_processes(self.checkpoints)


@pytest.fixture
def ha(postgres, tmp_path) -> Iterator[HaCluster]:
    with pg_server.database(postgres) as conninfo:
        cluster = HaCluster(tmp_path, conninfo)
        try:
            yield cluster
        finally:
            cluster.stop()


def wait_event(client: Client, after: int, predicate, timeout_s: float = 300.0) -> Event:
    for event in client.events(after_seq=after, follow=True, timeout_s=timeout_s):
        if predicate(event):
            return event
    raise AssertionError("the event feed ended")


def _started(event: Event, job_id: str) -> bool:
    """True once ``job_id`` runs; a launch that fails ends the wait with the reason."""
    if event.job_id != job_id:
        return False
    assert "-> FAILED" not in event.message, event.message
    return "-> RUNNING" in event.message


def progress(client: Client, job_id: str, beyond: int, timeout_s: float = 120.0) -> None:
    """Wait until the job reports an iteration past ``beyond`` (progress makes no event: the
    job is read every PROGRESS_POLL_S)."""
    deadline = time.monotonic() + timeout_s
    while client.get(job_id)[0].iteration <= beyond:
        assert time.monotonic() < deadline, f"no progress past iteration {beyond}"
        time.sleep(PROGRESS_POLL_S)


def training_pids(checkpoints: Path) -> list[int]:
    pids = []
    for process in psutil.process_iter(["pid"]):
        try:
            if process.environ().get("MLSCHED_CHECKPOINT_DIR", "").startswith(str(checkpoints)):
                pids.append(process.pid)
        except (psutil.Error, OSError):
            continue
    return pids


@pytest.mark.timeout(900)  # deadlines below are for a loaded machine, not delays
def test_the_standby_takes_over_from_a_killed_leader_and_the_job_trains_on(ha):
    ha.start_controller("a", "listening")
    ha.share_ca("a", "b")
    ha.start_controller("b", "standby")
    ha.start_agent("node-a", issuer="a")
    with ha.client("a") as client:
        wait_event(client, 0, lambda e: e.kind == "node_registered")
        spec = _example_spec("long", stopping=IterationStop(10_000_000))
        job = client.submit(spec)
        started = wait_event(client, 0, lambda e: _started(e, job.id))
        progress(client, job.id, 0)
        (pid,) = training_pids(ha.checkpoints)
        # One event feed open across the failover: it goes on at b from the last event.
        feed = client.events(after_seq=started.seq - 1, follow=True, timeout_s=120)
        assert next(feed).seq == started.seq  # the stream to a is open
        lease_row = ha.lease_reader()  # connected before the kill: one query after it
        killed_at = lease_row.db_now()
        ha.controllers["a"].send_signal(signal.SIGKILL)
        last = lease_row.read()  # a's last renewal: the standby may take over at its expiry
        ha.controllers["a"].wait(timeout=30)
        assert last is not None and last.address == ha.addresses["a"]
        assert last.expires_at - killed_at <= LEASE_S  # renewed before the kill, for a lease

        ha.await_leadership("b")  # bounded by the deadline of _read_line
        after = lease_row.read()
        lease_row.close()
        assert after is not None
        assert (after.address, after.epoch) == (ha.addresses["b"], last.epoch + 1)
        granted_at = after.expires_at - LEASE_S
        assert granted_at >= last.expires_at  # never two leaders
        # The standby sleeps until the expiry it read (a third of the lease at most), so it
        # claims at once; a lease of slack for a loaded machine.
        assert granted_at - last.expires_at <= LEASE_S

        elected = next(e for e in feed if e.kind == "leader_elected")
        feed.close()
        assert client.address == ha.addresses["b"]  # the client followed the leader
        back = wait_event(
            client, elected.seq, lambda e: e.kind == "node_registered" and e.node_id == "node-a"
        )
        assert back.message.startswith("re-registered")
        progress(client, job.id, client.get(job.id)[0].iteration)  # reported to b
        assert training_pids(ha.checkpoints) == [pid]  # the same process trains on
        client.stop(job.id, "failover test done")
        done = wait_event(
            client, back.seq, lambda e: e.job_id == job.id and client.get(job.id)[0].state.terminal
        )
        final, tasks = client.get(job.id)
        history = [e.message for e in client.events(job_id=job.id)]
    assert done.job_id == job.id
    assert final.state is JobState.COMPLETED, final.message
    assert (final.attempt, final.suspensions, final.failures) == (1, 0, 0)
    assert [t.attempt for t in tasks] == [1]
    assert sum("-> STARTING" in m for m in history) == 1, history  # launched once, ever
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_leader_paused_through_its_lease_steps_down_when_it_wakes(ha):
    ha.start_controller("a", "listening")
    ha.share_ca("a", "b")
    ha.start_controller("b", "standby")
    a = ha.controllers["a"]
    a.send_signal(signal.SIGSTOP)
    try:
        ha.await_leadership("b")
    finally:
        a.send_signal(signal.SIGCONT)
    assert a.wait(timeout=START_TIMEOUT_S) == EXIT_DEPOSED
    log = (ha.root / "a.log").read_text()
    assert "stepping down" in log
    with ha.client("a") as client:
        assert client.nodes() == []
        assert client.address == ha.addresses["b"]
