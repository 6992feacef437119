"""torch.distributed helpers: process-group setup, the small collectives behind the
rank-consistent `should_stop`/`should_suspend`/`requested_batch_size` decisions (paced by
trainer_shim/step_sync.py), and the pieces
of an in-place regroup (a rendezvous store of one's own, joining a group on it, sending rank 0's
state to every rank; trainer_shim/regroup.py)."""

from __future__ import annotations

import ctypes
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "backend_for",
    "broadcast_from_rank0",
    "destroy_process_group",
    "from_rank0_ints",
    "init_process_group",
    "is_active",
    "join_group",
    "max_over_ranks",
    "rendezvous_store",
    "unwrap_model",
]

log = logging.getLogger(__name__)

EXIT_BARRIER_TIMEOUT = timedelta(seconds=30)  # how long a normal exit waits for its peers


def is_active() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _collective_device() -> torch.device:
    backend = str(dist.get_backend())
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def max_over_ranks(values: list[int]) -> list[int]:
    """Collective: the element-wise maximum of every rank's `values` (the same length on every
    rank), on every rank."""
    tensor = torch.tensor(values, dtype=torch.int64, device=_collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]


def from_rank0_ints(values: list[int]) -> list[int]:
    """Collective: rank 0's list of integers (the same length on every rank), on every rank."""
    tensor = torch.tensor(values, dtype=torch.int64, device=_collective_device())
    dist.broadcast(tensor, src=0)
    return [int(v) for v in tensor.tolist()]


def broadcast_from_rank0(payload: object) -> object:
    """Collective: rank 0's picklable `payload` (state dicts included), on every rank."""
    holder = [payload if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def backend_for(device: torch.device) -> str:
    """NCCL for a CUDA device, else gloo."""
    return "nccl" if device.type == "cuda" else "gloo"


def rendezvous_store(host: str, port: int, *, serve: bool, timeout: timedelta) -> dist.TCPStore:
    """The TCPStore of a new group: served here (rank 0; returns at once) or reached as a
    client (retrying until the server is up or `timeout` passes)."""
    if serve:
        return dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=timeout)
    return dist.TCPStore(host, port, is_master=False, timeout=timeout)


def join_group(
    store: dist.Store,
    prefix: str,
    rank: int,
    world_size: int,
    device: torch.device,
    timeout: timedelta,
) -> None:
    """Make the default process group `rank` of `world_size` on `store` (keys under `prefix`).

    Any earlier default group must have been destroyed; returns when every rank has joined.
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend=backend_for(device),
        store=dist.PrefixStore(prefix, store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
    )


def init_process_group(
    device: torch.device,
    backend: str | None = None,
    timeout: timedelta | None = None,
) -> bool:
    """Join the `env://` process group; returns whether this call created it.

    The backend defaults to NCCL when `device` is a CUDA device, else gloo. Call only when
    WORLD_SIZE > 1 (the caller checks); a group that already exists is left alone.
    """
    if dist.is_initialized():
        return False
    if backend is None:
        backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group(backend=backend, init_method="env://", **kwargs)
    return True


def destroy_process_group(*, drain: bool = False) -> None:
    """Leave the default process group if one exists.

    With `drain` (a normal exit, every rank leaving together) a gloo group first meets at a
    barrier. A gloo worker thread releases a finished collective's tensors after the waiting
    rank already went on, and needs the GIL to do it; a script whose last act was a collective
    (FSDP's `full_tensor`, say) could reach interpreter shutdown first, and that thread then
    aborted the process ("terminate called without an active exception", 3 runs in 8 of
    tests/trainer_shim/test_sharded.py). Waiting at the barrier leaves the GIL to those threads
    and is bounded by `EXIT_BARRIER_TIMEOUT` should a peer never arrive."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if drain and dist.get_backend() == "gloo" and dist.get_world_size() > 1:
        try:
            dist.monitored_barrier(timeout=EXIT_BARRIER_TIMEOUT)
        except RuntimeError as exc:  # a peer failed or left: leave anyway
            log.warning("exit barrier: %s", exc)
    dist.destroy_process_group()


def retire_process_group() -> None:
    """Leave the default process group without ever freeing it, for an in-place regroup.

    Freeing a gloo group joins its worker threads, and after a shrink one of them can wait
    forever on the rank that left (gdb: ``~Reducer`` -> ``~ProcessGroupGloo`` ->
    ``std::thread::join``, when the script drops its old DDP wrapper; docs/ones.md). One extra
    reference, never released, keeps the old group alive for the life of the process: a few
    idle threads and sockets per regroup instead of a hang."""
    if dist.is_available() and dist.is_initialized():
        group = dist.distributed_c10d._get_default_group()
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(group))
        dist.destroy_process_group()


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside DistributedDataParallel/DataParallel wrappers, so checkpoints carry
    the same keys whatever the world size."""
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    return model
