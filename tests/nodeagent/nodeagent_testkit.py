"""Test helpers: polling with a deadline, a fake clock, a controller peer, a task script."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import psutil

from mlsched.v1 import agent_pb2, agent_pb2_grpc, common_pb2
from nodeagent.config import AgentConfig

T = TypeVar("T")

JOIN_TOKEN = "test-join-token"


def wait_until(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start
        self.mono = 100.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds


@dataclass
class Received:
    """A message the controller peer received, with the number of the session it came on."""

    session: int
    message: agent_pb2.AgentSessionRequest


@dataclass
class _Session:
    number: int
    outbox: queue.Queue[agent_pb2.AgentSessionResponse] = field(default_factory=queue.Queue)


class FakeController(agent_pb2_grpc.AgentServiceServicer):
    """The controller end of AgentSession, driven by the test."""

    def __init__(self, token: str = JOIN_TOKEN, heartbeat_interval_s: float = 0.0) -> None:
        self.token = token
        self.heartbeat_interval_s = heartbeat_interval_s
        self._cond = threading.Condition()
        self._received: list[Received] = []
        self._session: _Session | None = None
        self.sessions = 0
        self.refused = 0

    # --- servicer
    def AgentSession(self, request_iterator: Any, context: grpc.ServicerContext) -> Any:
        metadata = dict(context.invocation_metadata())
        if metadata.get("mlsched-join-token") != self.token:
            with self._cond:
                self.refused += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid join token")
        with self._cond:
            self.sessions += 1
            session = _Session(self.sessions)
            self._session = session
        done = threading.Event()

        def read() -> None:
            try:
                for request in request_iterator:
                    with self._cond:
                        self._received.append(Received(session.number, request))
                        self._cond.notify_all()
                    if request.WhichOneof("message") == "register":
                        session.outbox.put(
                            agent_pb2.AgentSessionResponse(
                                registered=agent_pb2.Registered(
                                    node_id=request.register.node_id,
                                    heartbeat_interval_s=self.heartbeat_interval_s,
                                )
                            )
                        )
            except grpc.RpcError:
                pass
            finally:
                done.set()

        threading.Thread(target=read, daemon=True).start()
        while context.is_active() and not done.is_set():
            try:
                yield session.outbox.get(timeout=0.05)
            except queue.Empty:
                continue

    # --- test side
    def send(self, **kwargs: Any) -> None:
        """Send an AgentSessionResponse(**kwargs) on the current session."""
        session = wait_until(lambda: self._session)
        session.outbox.put(agent_pb2.AgentSessionResponse(**kwargs))

    def messages(self, kind: str | None = None, session: int | None = None) -> list[Any]:
        """Received messages (the inner message when ``kind`` is given)."""
        with self._cond:
            out = []
            for r in self._received:
                if session is not None and r.session != session:
                    continue
                if kind is None:
                    out.append(r.message)
                elif r.message.WhichOneof("message") == kind:
                    out.append(getattr(r.message, kind))
            return out

    def wait_for(
        self,
        kind: str,
        predicate: Callable[[Any], bool] = lambda m: True,
        timeout: float = 10.0,
        session: int | None = None,
    ) -> Any:
        """Wait for a received message of ``kind`` matching ``predicate``; returns it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for r in self._received:
                    if session is not None and r.session != session:
                        continue
                    if r.message.WhichOneof("message") == kind:
                        inner = getattr(r.message, kind)
                        if predicate(inner):
                            return inner
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {kind} message matched within {timeout}s")
                self._cond.wait(remaining)

    def wait_status(self, job_id: str, state: int, timeout: float = 10.0) -> Any:
        """Wait for a TaskStatus of ``job_id`` in ``state``."""
        return self.wait_for(
            "task_status", lambda s: s.task.job_id == job_id and s.state == state, timeout
        )

    def pids(self) -> set[int]:
        """Every pid seen in task statuses and registrations."""
        pids = {s.pid for s in self.messages("task_status") if s.pid}
        for reg in self.messages("register"):
            pids |= {t.pid for t in reg.tasks if t.pid}
        return pids


class ControllerServer:
    """Runs a FakeController on 127.0.0.1 (a free port; ``restart`` reuses it)."""

    def __init__(self, servicer: FakeController) -> None:
        self.servicer = servicer
        self.port = 0
        self._server: grpc.Server | None = None

    def start(self) -> ControllerServer:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        agent_pb2_grpc.add_AgentServiceServicer_to_server(self.servicer, server)
        port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        assert port, "cannot bind the controller peer"
        self.port = port
        server.start()
        self._server = server
        return self

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None


TASK_SCRIPT = r"""
import argparse, json, os, signal, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["exit", "wait"])
parser.add_argument("--code", type=int, default=0)
parser.add_argument("--lines", type=int, default=3)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--record", default="")
parser.add_argument("--checkpoint-step", type=int, default=0)
args = parser.parse_args()

for i in range(args.lines):
    print(f"line {i} of rank {os.environ.get('RANK')}", flush=True)
if args.mode == "exit":
    print(f"exiting with {args.code}", file=sys.stderr, flush=True)
    sys.exit(args.code)

if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
env = {k: v for k, v in os.environ.items()
       if k.startswith("MLSCHED_") or k in ("RANK", "WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
                                             "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT",
                                             "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
with open("env.json.tmp", "w") as f:
    json.dump(env, f)
os.replace("env.json.tmp", "env.json")
open("ready", "w").close()
while not os.path.exists("release"):
    time.sleep(0.02)
with open("release") as f:
    outcome = f.read().strip()
if outcome:
    record = {"outcome": outcome, "step": args.checkpoint_step,
              "checkpoint_step": args.checkpoint_step, "reason": "released by the test"}
    with open(os.environ["MLSCHED_EXIT_FILE"] + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(os.environ["MLSCHED_EXIT_FILE"] + ".tmp", os.environ["MLSCHED_EXIT_FILE"])
print("released", flush=True)
sys.exit(args.code)
"""


def write_task_script(directory: Path) -> Path:
    """Write the test task script; returns its path."""
    path = directory / "task.py"
    path.write_text(TASK_SCRIPT)
    return path


def kill_leftovers(pids: set[int], marker: str) -> None:
    """SIGKILL the process groups of test task processes still alive (cmdline contains marker)."""
    for pid in pids:
        with contextlib.suppress(psutil.Error, OSError):
            proc = psutil.Process(pid)
            if any(marker in part for part in proc.cmdline()):
                os.killpg(pid, signal.SIGKILL)


def agent_config(tmp_path: Path, controller_address: str, **overrides: Any) -> AgentConfig:
    """A config with short intervals for tests."""
    values: dict[str, Any] = dict(
        controller=controller_address,
        join_token=JOIN_TOKEN,
        node_id="node-a",
        state_dir=tmp_path / "state",
        checkpoint_root=tmp_path / "checkpoints",
        gpus=2,
        metrics_interval_s=0.2,
        suspend_grace_s=5.0,
        kill_grace_s=1.0,
        reconnect_initial_s=0.1,
        reconnect_max_s=0.5,
        progress_min_interval_s=0.2,
        task_poll_interval_s=0.05,
        run_tasks_as="agent",  # tmp_path is root's own; tests/nodeagent/test_task_users.py
    )  # runs tasks as their users
    values.update(overrides)
    return AgentConfig(**values)


def launch_message(
    tmp_path: Path,
    script: Path,
    job_id: str,
    *args: str,
    rank: int = 0,
    attempt: int = 1,
    gpu_indices: tuple[int, ...] = (0,),
    user: str = "",
) -> agent_pb2.LaunchTask:
    """A LaunchTask running the test script with ``args`` in ``tmp_path/<job_id>``."""
    workdir = tmp_path / "work" / f"{job_id}-{rank}-{attempt}"
    workdir.mkdir(parents=True, exist_ok=True)
    spec = common_pb2.JobSpec(
        name=job_id,
        command=[sys.executable, str(script), *args],
        working_dir=str(workdir),
        env={"TEST_VAR": "1"},
        gpus=len(gpu_indices),
    )
    return agent_pb2.LaunchTask(
        task=agent_pb2.TaskRef(job_id=job_id, rank=rank, attempt=attempt),
        spec=spec,
        gpu_indices=list(gpu_indices),
        world_size=1,
        local_rank=0,
        local_world_size=1,
        user=user,
    )


def workdir_of(tmp_path: Path, job_id: str, rank: int = 0, attempt: int = 1) -> Path:
    return tmp_path / "work" / f"{job_id}-{rank}-{attempt}"


# The start of a task script that tries to open a trainer session: ``session(task_id, token)``
# returns ["OK", first message] or [status code, details].
TRAINER_SESSION_ATTEMPT = r"""
import json, os, sys
import grpc
from mlsched.v1 import trainer_pb2_grpc

def session(task_id, token):
    with grpc.insecure_channel(os.environ["MLSCHED_AGENT_ADDR"]) as channel:
        call = trainer_pb2_grpc.TrainerServiceStub(channel).TrainerSession(
            iter(()),
            metadata=(("mlsched-task-id", task_id), ("mlsched-task-token", token)),
            timeout=10,
        )
        try:
            first = next(call)
            call.cancel()
            return ["OK", first.WhichOneof("message")]
        except grpc.RpcError as exc:
            return [exc.code().name, exc.details()]
"""
