"""Test peer for trainer_shim: the agent's end of the TrainerSession wire, plus helpers.

`FakeAgent` is written against the proto only (the real agent lives in `nodeagent`): it
records every request with the session's metadata and lets a test push commands to a task.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc

from mlsched.v1 import common_pb2, trainer_pb2, trainer_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples"


@dataclass(frozen=True)
class Received:
    """One request as the agent saw it."""

    task_id: str
    token: str
    request: trainer_pb2.TrainerSessionRequest

    @property
    def kind(self) -> str:
        return self.request.WhichOneof("message") or ""


class FakeAgent(trainer_pb2_grpc.TrainerServiceServicer):
    """Accepts trainer sessions, records requests, sends commands on demand.

    `tokens` maps task ids to the only token accepted (None: accept every session); refused
    sessions end with UNAUTHENTICATED, as the real agent does.
    """

    def __init__(self, tokens: dict[str, str] | None = None) -> None:
        self.tokens = tokens
        self.received: list[Received] = []
        self.refused: list[str] = []
        self.sessions: list[dict[str, str]] = []  # metadata of every accepted session
        self._outboxes: dict[str, queue.Queue[trainer_pb2.TrainerSessionResponse | None]] = {}
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self.addr = ""

    # ---- server side
    def start(self) -> FakeAgent:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
        trainer_pb2_grpc.add_TrainerServiceServicer_to_server(self, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self._server, self.addr = server, f"127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def TrainerSession(
        self,
        request_iterator: Iterator[trainer_pb2.TrainerSessionRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[trainer_pb2.TrainerSessionResponse]:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        task_id = metadata.get("mlsched-task-id", "")
        token = metadata.get("mlsched-task-token", "")
        if self.tokens is not None and self.tokens.get(task_id) != token:
            with self._cond:
                self.refused.append(task_id)
                self._cond.notify_all()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"unknown task {task_id!r}")
        outbox: queue.Queue[trainer_pb2.TrainerSessionResponse | None] = queue.Queue()
        context.add_callback(lambda: outbox.put(None))
        with self._cond:
            self._outboxes[task_id] = outbox
            self.sessions.append(metadata)
            self._cond.notify_all()

        def read() -> None:
            try:
                for request in request_iterator:
                    with self._cond:
                        self.received.append(Received(task_id, token, request))
                        self._cond.notify_all()
            except grpc.RpcError:
                pass
            finally:
                outbox.put(None)  # the shim half-closed (or left): end the stream

        threading.Thread(target=read, daemon=True).start()
        while (response := outbox.get()) is not None:
            yield response

    # ---- test side
    def wait_for(self, predicate: Callable[[FakeAgent], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate(self)` holds (re-checked on every event) or time out."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def requests(self, task_id: str | None = None, kind: str | None = None) -> list[Received]:
        with self._cond:
            return [
                r
                for r in self.received
                if (task_id is None or r.task_id == task_id) and (kind is None or r.kind == kind)
            ]

    def progress(self, task_id: str | None = None) -> list[common_pb2.Progress]:
        return [r.request.progress for r in self.requests(task_id, "progress")]

    def max_iteration(self, task_id: str | None = None) -> int:
        return max((p.iteration for p in self.progress(task_id)), default=-1)

    def send(
        self, task_id: str, response: trainer_pb2.TrainerSessionResponse, timeout: float = 10.0
    ) -> None:
        """Send a command to `task_id`'s current session, waiting for one to exist."""
        if not self.wait_for(lambda a: task_id in a._outboxes, timeout):
            raise TimeoutError(f"no session from {task_id}")
        with self._cond:
            self._outboxes[task_id].put(response)

    def send_when(
        self,
        predicate: Callable[[FakeAgent], bool],
        task_id: str,
        response: trainer_pb2.TrainerSessionResponse,
        timeout: float = 60.0,
    ) -> threading.Thread:
        """In the background: once `predicate` holds, send `response` to `task_id`."""

        def run() -> None:
            if self.wait_for(predicate, timeout):
                self.send(task_id, response)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread


def suspend_now(reason: str = "test") -> trainer_pb2.TrainerSessionResponse:
    return trainer_pb2.TrainerSessionResponse(suspend=trainer_pb2.SuspendNow(reason=reason))


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, release it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(
    tmp_path: Path,
    agent_addr: str,
    *,
    job_id: str = "j-test",
    rank: int = 0,
    world_size: int = 1,
    attempt: int = 1,
    resume: bool = False,
    master_port: int = 29500,
    **extra: str,
) -> dict[str, str]:
    """The contract variables a node agent would set for one task."""
    addr_file = tmp_path / "agent.addr"
    if not addr_file.exists():
        addr_file.write_text(agent_addr + "\n")
    env = {
        "MLSCHED_TASK_ID": f"{job_id}/{rank}/{attempt}",
        "MLSCHED_TASK_TOKEN": f"token-{job_id}-{rank}-{attempt}",
        "MLSCHED_AGENT_ADDR": agent_addr,
        "MLSCHED_AGENT_ADDR_FILE": str(addr_file),
        "MLSCHED_CHECKPOINT_DIR": str(tmp_path / "checkpoints" / job_id),
        "MLSCHED_RESUME": "1" if resume else "0",
        "MLSCHED_EXIT_FILE": str(tmp_path / f"exit-{job_id}-{rank}-{attempt}.json"),
        "MLSCHED_VIRTUAL_GPUS": "1",
        "CUDA_VISIBLE_DEVICES": str(rank),
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "OMP_NUM_THREADS": "1",
    }
    env.update(extra)
    return env


def subprocess_env(contract: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any MLSCHED_* or rank variables, plus `contract`."""
    drop = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSCHED_") and k not in drop}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "1"
    env.update(contract or {})
    return env


PYTHON = sys.executable
