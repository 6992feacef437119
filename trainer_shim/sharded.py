"""Sharded checkpoints through `torch.distributed.checkpoint` (issue 18 #4; docs/frameworks.md).

    with ShardedCheckpoints(job, asynchronous=True) as shards:
        step = shards.restore({"model": model_sd, "optim": optim_sd})   # every rank
        ...
        shards.save(step, {"model": model_sd, "optim": optim_sd})       # every rank

`save` is a collective: every rank writes its own shards (an FSDP model's local pieces, say,
from `torch.distributed.checkpoint.state_dict.get_state_dict`) into `step-<N>.dcp/` in the
job's checkpoint directory. Once they are all written, the checkpoint is published through the
shim's ordinary store: `JobContext.save_checkpoint` writes a small `step-<N>.pt` naming the
shard folder (plus the RNG state) and moves `LATEST`, so the fencing of stale attempts, the
`CheckpointSaved` notice and the suspend-waits-for-a-save rule all hold as for a plain
checkpoint. A suspension that finds no published checkpoint resumes from the previous one.

`asynchronous=True` stages the state in memory and writes it in the background
(`torch.distributed.checkpoint.async_save`, coordinated on a gloo group of its own); the
checkpoint is published by the first `poll()` after the write finished, or by `wait()` (also at
the next `save` and on leaving the `with` block). Shard folders no published checkpoint names
any more are removed by rank 0.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn

from trainer_shim.checkpoint import CheckpointStore
from trainer_shim.context import JobContext

__all__ = ["SHARDS_KEY", "ShardedCheckpoints", "shard_name"]

log = logging.getLogger(__name__)

SHARDS_KEY = "sharded"  # the published checkpoint's `extra` entry naming its shard folder
_SHARD_RE = re.compile(r"^step-(\d+)\.dcp$")


def shard_name(step: int) -> str:
    """The folder of step `step`'s shards."""
    return f"step-{step}.dcp"


class ShardedCheckpoints:
    """Saves and restores a job's state as shards written by every rank."""

    def __init__(self, job: JobContext, *, asynchronous: bool = False) -> None:
        self.job = job
        self.asynchronous = asynchronous
        self._pending: tuple[int, Future[Any]] | None = None
        # Background saves coordinate on a group of their own: on the training's group their
        # collectives would interleave with the training's own (a deadlock under gloo).
        self._save_group: dist.ProcessGroup | None = None
        self._warned = False

    def __enter__(self) -> ShardedCheckpoints:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.wait()

    @property
    def pending_step(self) -> int | None:
        """The step of a background save not yet published."""
        return None if self._pending is None else self._pending[0]

    def save(
        self, step: int, state: Mapping[str, Any], *, asynchronous: bool | None = None
    ) -> None:
        """Write `state` as step `step` (a collective); publish it now or, asynchronously, later.

        A suspension should save with `asynchronous=False` (or `wait()` after): the process is
        about to exit.
        """
        self.wait()  # one save at a time, published in step order
        directory = self.job.checkpoint_dir
        if directory is None:
            if not self._warned:
                log.warning("sharded save: no checkpoint directory configured; not saving")
                self._warned = True
            return
        path = directory / shard_name(int(step))
        background = self.asynchronous if asynchronous is None else asynchronous
        if background:
            future = dcp.async_save(dict(state), checkpoint_id=path, process_group=self._group())
            self._pending = (int(step), future)
        else:
            dcp.save(dict(state), checkpoint_id=path)
            self._publish(int(step))

    def _group(self) -> dist.ProcessGroup | None:
        """The background saves' own gloo group, made at the first (a collective: every rank
        saves at the same steps); None without torch.distributed."""
        if self._save_group is None and dist.is_available() and dist.is_initialized():
            self._save_group = dist.new_group(backend="gloo")
        return self._save_group

    def poll(self) -> bool:
        """Publish a finished background save; True when none is pending any more."""
        if self._pending is not None and self._pending[1].done():
            self.wait()
        return self._pending is None

    def wait(self) -> None:
        """Wait for a background save to finish, then publish it."""
        if self._pending is None:
            return
        step, future = self._pending
        self._pending = None
        future.result()  # raises what the writer raised: nothing is published then
        self._publish(step)

    def _publish(self, step: int) -> None:
        published = self.job.save_checkpoint(
            step, nn.Module(), extra={SHARDS_KEY: shard_name(step)}
        )
        if published is not None:  # rank 0, and this attempt still owns the directory
            _prune(published.parent)

    def restore(self, state: dict[str, Any]) -> int:
        """Load the newest published checkpoint's shards into `state` in place (every rank,
        each reading what it needs); returns its step, 0 on a fresh start."""
        step = self.job.restore(None)
        name = self.job.load_extra().get(SHARDS_KEY)
        if step and name is None:
            raise ValueError(f"the checkpoint of step {step} holds no sharded state")
        if name is not None:
            dcp.load(state, checkpoint_id=self.job.checkpoint_dir / name)
        return step


def _prune(directory: Path) -> None:
    """Remove shard folders that no checkpoint file of the store names any more."""
    kept = {shard_name(step) for step in CheckpointStore(directory).steps()}
    for child in directory.iterdir():
        if _SHARD_RE.match(child.name) and child.name not in kept and child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
