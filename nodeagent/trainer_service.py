"""The TrainerService gRPC server: sessions with the trainer shims inside task processes."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Protocol

import grpc

from mlsched.v1 import trainer_pb2, trainer_pb2_grpc
from nodeagent import convert
from nodeagent.model import ProgressInfo, TaskRef
from nodeagent.peercheck import Peer, peer_processes
from nodeagent.records import write_atomic
from nodeagent.tasks import TrainerAuthError
from nodeagent.trainer_channel import ChannelClosed, TrainerChannel

log = logging.getLogger(__name__)

TASK_ID_KEY = "mlsched-task-id"
TASK_TOKEN_KEY = "mlsched-task-token"
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# A session that sent nothing this long sends AgentAlive (the shim's self-fencing listens).
ALIVE_INTERVAL_S = 1.0
_ALIVE = trainer_pb2.TrainerSessionResponse(alive=trainer_pb2.AgentAlive())


class TrainerBackend(Protocol):
    """What the trainer sessions need from the task table."""

    def authenticate(
        self, task_id: str, token: str, peer: Peer | None = None
    ) -> tuple[TaskRef, TrainerChannel]:
        """Raise TrainerAuthError unless ``task_id`` is a running attempt with this token (and,
        given ``peer``, the connecting socket belongs to that task)."""
        ...

    def on_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        """A progress report."""
        ...

    def on_checkpoint(self, ref: TaskRef, step: int, path: str) -> None:
        """A checkpoint was saved."""
        ...

    def on_restored(self, ref: TaskRef, step: int) -> None:
        """The trainer restored a checkpoint at start."""
        ...

    def on_save(self, ref: TaskRef, in_progress: bool, step: int) -> None:
        """A checkpoint save started or ended."""
        ...


class TrainerServicer(trainer_pb2_grpc.TrainerServiceServicer):
    """Implements ``TrainerSession``: requests update the task table, commands stream back."""

    def __init__(
        self,
        backend: TrainerBackend,
        stopping: threading.Event,
        wait_s: float = 0.5,
        alive_interval_s: float = ALIVE_INTERVAL_S,
        peer_check: Callable[[str], Peer] | None = None,
    ):
        self._backend = backend
        self._peer_check = peer_check  # context.peer() -> who holds it; None: not checked
        self._stopping = stopping
        self._wait_s = min(wait_s, alive_interval_s)
        self._alive_interval_s = alive_interval_s

    def TrainerSession(
        self,
        request_iterator: Iterator[trainer_pb2.TrainerSessionRequest],
        context: grpc.ServicerContext,
    ) -> Iterator[trainer_pb2.TrainerSessionResponse]:
        """Authenticate by metadata, then relay both ways until the task ends or the shim leaves."""
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        task_id = metadata.get(TASK_ID_KEY, "")
        try:
            peer = self._peer_check(context.peer()) if self._peer_check is not None else None
            ref, channel = self._backend.authenticate(
                task_id, metadata.get(TASK_TOKEN_KEY, ""), peer
            )
            generation = channel.attach()
        except (TrainerAuthError, ChannelClosed) as exc:
            log.warning("refused trainer session for %r: %s", task_id, exc)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            return
        log.info("trainer session of %s connected", ref)
        reader_done = threading.Event()
        reader = threading.Thread(
            target=self._read,
            args=(ref, request_iterator, reader_done),
            name=f"trainer-reader-{ref}",
            daemon=True,
        )
        reader.start()
        yield _ALIVE  # the shim counts its silence from here (its self-fencing)
        last_sent = time.monotonic()
        try:
            while not self._stopping.is_set() and context.is_active() and not reader_done.is_set():
                try:
                    command = channel.next_command(generation, self._wait_s)
                except ChannelClosed:
                    break
                if command is not None:
                    log.info("to trainer of %s: %s", ref, command)
                    yield convert.trainer_response_to_pb(command)
                    last_sent = time.monotonic()
                elif time.monotonic() - last_sent >= self._alive_interval_s:
                    yield _ALIVE
                    last_sent = time.monotonic()
        finally:
            log.info("trainer session of %s ended", ref)

    def _read(
        self,
        ref: TaskRef,
        requests: Iterator[trainer_pb2.TrainerSessionRequest],
        done: threading.Event,
    ) -> None:
        try:
            for request in requests:
                try:
                    self._handle(ref, request)
                except Exception:
                    log.exception("cannot handle a trainer message of %s", ref)
        except grpc.RpcError:
            pass  # the shim went away; it reconnects when it can
        except Exception:
            log.exception("trainer session of %s: reading failed", ref)
        finally:
            done.set()

    def _handle(self, ref: TaskRef, request: trainer_pb2.TrainerSessionRequest) -> None:
        kind = request.WhichOneof("message")
        if kind == "progress":
            self._backend.on_progress(ref, convert.progress_from_pb(request.progress))
        elif kind == "checkpoint_saved":
            saved = request.checkpoint_saved
            self._backend.on_checkpoint(ref, saved.step, saved.path)
        elif kind == "restored":
            self._backend.on_restored(ref, request.restored.step)
        elif kind == "save":
            self._backend.on_save(ref, request.save.in_progress, request.save.step)


def advertised_target(listen: str, port: int) -> str:
    """The target trainers dial: the listen host (loopback for a wildcard) and the bound port."""
    host = listen.rsplit(":", 1)[0]
    if host in _WILDCARD_HOSTS:
        host = "127.0.0.1"
    return f"{host}:{port}"


class TrainerServer:
    """Runs the TrainerService and publishes its address in the trainer address file."""

    def __init__(
        self,
        backend: TrainerBackend,
        listen: str,
        address_file: Path,
        max_workers: int = 64,
        verify_peer: bool = True,
        interceptors: tuple[grpc.ServerInterceptor, ...] = (),
        setup: Callable[[grpc.Server], None] | None = None,
    ) -> None:
        """``verify_peer``: a session is accepted only from a process of the task it names;
        ``setup`` adds more services to the server before it starts (the health service)."""
        self._interceptors = interceptors
        self._setup = setup
        self._backend = backend
        self._verify_peer = verify_peer
        self._listen = listen
        self._address_file = address_file
        self._max_workers = max_workers
        self._stopping = threading.Event()
        self._server: grpc.Server | None = None
        self.address = ""

    def start(self) -> str:
        """Bind, start, write the address file atomically; returns the address."""
        server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix="trainer-session"
            ),
            interceptors=self._interceptors,
        )
        try:
            port = server.add_insecure_port(self._listen)
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {self._listen}: {exc}") from exc
        if port == 0:
            raise OSError(f"cannot listen on {self._listen}")
        check = functools.partial(peer_processes, local_port=port) if self._verify_peer else None
        trainer_pb2_grpc.add_TrainerServiceServicer_to_server(
            TrainerServicer(self._backend, self._stopping, peer_check=check), server
        )
        if self._setup is not None:
            self._setup(server)
        server.start()
        self._server = server
        self.address = advertised_target(self._listen, port)
        write_atomic(self._address_file, self.address, mode=0o644)
        log.info("trainer service listening on %s", self.address)
        return self.address

    def stop(self, grace_s: float = 1.0) -> None:
        """End the sessions and stop serving (the address file stays for the next run)."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None
