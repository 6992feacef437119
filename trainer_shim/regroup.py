"""In-place regrouping: a running job changes its process count without restarting the ranks
that stay (ONES's in-place elastic scaling; docs/ones.md, "In-place scaling, measured").

The protocol, driven by the node agent (nodeagent/regroup.py) and `ElasticGroup.step_boundary`,
a collective of the current group called at every step boundary:

1. The agent starts the new ranks (MLSCHED_REGROUP_GENERATION=g, RANK, WORLD_SIZE=m,
   MASTER_PORT=p) and sends every running rank `Regroup(g, m, addr, p, batch)`.
2. Rank 0 serves the new group's TCPStore on p as soon as it holds the plan and trains on; each
   new rank connects to it and counts itself in (key `<g>/joined`).
3. Once every new rank is counted (at once when shrinking), rank 0 hands the plan to the old
   group at the next step boundary; every old rank leaves the old group there. Ranks below m
   join the new group with the same rank; ranks at or above m stop ("left the group").
4. When the group grew, rank 0 broadcasts the model and optimizer state, the step and the batch
   size; the new ranks load them.

A new rank does its part of 2-4 in its first `step_boundary`, after the script has built its
model and data, so the old ranks stop training only for the switch itself.

The script then rebuilds what depends on the group (the DDP wrapper, its data shard).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from mlsched.v1 import trainer_pb2
from trainer_shim import distributed
from trainer_shim.step_sync import DEFAULT_PERIOD_S, PacedExchange

if TYPE_CHECKING:
    from trainer_shim.context import JobContext

__all__ = [
    "REGROUP_GENERATION_ENV",
    "ElasticGroup",
    "Membership",
    "RegroupInbox",
    "RegroupPlan",
    "attach",
    "joining_generation",
    "state_digest",
]

log = logging.getLogger("trainer_shim.regroup")

REGROUP_GENERATION_ENV = "MLSCHED_REGROUP_GENERATION"
DEFAULT_TIMEOUT = timedelta(minutes=5)
_NO_PLAN = [0, 0, 0, 0]


@dataclass(frozen=True)
class RegroupPlan:
    """One regroup as the agent ordered it (`mlsched.v1.Regroup`)."""

    generation: int
    world_size: int
    master_addr: str
    master_port: int
    batch_size: int = 0  # the new global batch size; 0: unchanged

    def __post_init__(self) -> None:
        if self.generation < 1:
            raise ValueError(f"regroup generation {self.generation} must be >= 1")
        if self.world_size < 1:
            raise ValueError(f"regroup world size {self.world_size} must be >= 1")
        if not 0 < self.master_port < 65536:
            raise ValueError(f"regroup port {self.master_port} is not a TCP port")
        if self.batch_size < 0:
            raise ValueError(f"regroup batch size {self.batch_size} must be >= 0")

    @classmethod
    def from_message(cls, message: trainer_pb2.Regroup) -> RegroupPlan:
        """The plan of a Regroup message; ValueError when a field is out of range."""
        return cls(
            int(message.generation),
            int(message.world_size),
            message.master_addr or "127.0.0.1",
            int(message.master_port),
            int(message.batch_size),
        )

    def as_ints(self) -> list[int]:
        """What rank 0 broadcasts to the old group (the address is the node's, known to all)."""
        return [self.generation, self.world_size, self.master_port, self.batch_size]

    @classmethod
    def from_ints(cls, values: list[int], master_addr: str) -> RegroupPlan | None:
        """The inverse of `as_ints`; None for the all-zero "no regroup now"."""
        if values == _NO_PLAN:
            return None
        generation, world_size, port, batch_size = values
        return cls(generation, world_size, master_addr, port, batch_size)

    def new_ranks(self, old_world_size: int) -> int:
        """How many processes join: the ranks from the old world size up."""
        return max(0, self.world_size - old_world_size)


class RegroupInbox:
    """The newest plan the agent sent. Written by the session thread, read by the trainer."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._plan: RegroupPlan | None = None

    def offer(self, plan: RegroupPlan) -> None:
        """Keep `plan` unless a plan of a later generation is already here."""
        with self._cond:
            if self._plan is None or plan.generation > self._plan.generation:
                self._plan = plan
                self._cond.notify_all()

    def newest(self, after_generation: int) -> RegroupPlan | None:
        """The held plan when its generation is above `after_generation`."""
        with self._cond:
            plan = self._plan
        return plan if plan is not None and plan.generation > after_generation else None

    def wait_newest(self, after_generation: int, timeout: float) -> RegroupPlan | None:
        """`newest`, waiting up to `timeout` seconds for such a plan to arrive."""
        with self._cond:
            self._cond.wait_for(lambda: self.newest(after_generation) is not None, timeout)
        return self.newest(after_generation)


def attach(job: JobContext, inbox: RegroupInbox) -> bool:
    """Route the agent's `Regroup` messages of `job`'s trainer session into `inbox`
    (`JobContext.listen`). Returns False in local mode (no session)."""
    if not job.in_session:
        return False

    def on_regroup(response: trainer_pb2.TrainerSessionResponse) -> None:
        try:
            inbox.offer(RegroupPlan.from_message(response.regroup))
        except ValueError as exc:
            log.error("ignoring a malformed Regroup from the agent: %s", exc)

    job.listen("regroup", on_regroup)
    return True


def joining_generation(environ: Mapping[str, str] | None = None) -> int:
    """MLSCHED_REGROUP_GENERATION: the regroup this process was started to join (0: none)."""
    raw = (os.environ if environ is None else environ).get(REGROUP_GENERATION_ENV, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{REGROUP_GENERATION_ENV}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{REGROUP_GENERATION_ENV}={value} must be >= 0")
    return value


def state_digest(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> str:
    """SHA-256 of every tensor of the model's and the optimizer's state, in state-dict order:
    equal on two ranks exactly when they hold the same state."""
    digest = hashlib.sha256()
    states: list[Any] = [distributed.unwrap_model(model).state_dict()]
    if optimizer is not None:
        states.append(optimizer.state_dict()["state"])
    for state in states:
        for tensor in _tensors(state):
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for key in sorted(value, key=str) for t in _tensors(value[key])]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    return []


@dataclass(frozen=True)
class Membership:
    """This process's place in the job after `step_boundary` reported a change.

    `event`: "started" (the first call of a process that did not join), "joined" (a new rank,
    holding rank 0's state), "regrouped" (a rank that stayed) or "left" (leave the loop now).
    """

    event: str
    generation: int
    rank: int
    world_size: int
    step: int
    batch_size: int | None
    digest: str = ""


class ElasticGroup:
    """A job's process group that can change size in place; one per training process.

    Use it instead of `JobContext.init_process_group` and call `step_boundary` at the top of
    every step, on every rank (it is a collective). In local mode it is a group of one that
    never changes.
    """

    def __init__(
        self,
        job: JobContext,
        *,
        environ: Mapping[str, str] | None = None,
        timeout: timedelta = DEFAULT_TIMEOUT,
        inbox: RegroupInbox | None = None,
        sync_period: float = DEFAULT_PERIOD_S,
    ) -> None:
        self._job = job
        self._timeout = timeout
        self._generation = joining_generation(environ)
        self._joining = self._generation > 0
        self._inbox = inbox if inbox is not None else RegroupInbox()
        if inbox is None:
            attach(job, self._inbox)
        job.regrouped(self._generation)  # the controller regroups only jobs that say so
        self._rank = job.rank
        self._world_size = job.world_size
        self._addr = job.env.master_addr or "127.0.0.1"
        self._store: Any = None  # rank 0: the next group's TCPStore, served ahead of the switch
        self._store_generation = 0
        self._started = False
        # Whether a regroup is due is asked at every step but exchanged only now and then.
        self._plan_sync = PacedExchange(
            distributed.from_rank0_ints, is_rank0=self._rank == 0, period_s=sync_period
        )

    def __enter__(self) -> ElasticGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def generation(self) -> int:
        """The last regroup this process took part in (0: none)."""
        return self._generation

    def init_process_group(self) -> bool:
        """Join the job's first group (env://). A new rank joins its regroup later, in its first
        `step_boundary`, once the script has built its model: the ranks already training wait
        only for that. Returns whether this process is (or, joining, will be) in a group of
        more than one process."""
        if self._joining:
            return self._world_size > 1
        if self._world_size > 1:
            distributed.init_process_group(self._job.device, timeout=self._timeout)
        return distributed.is_active()

    def close(self) -> None:
        """Leave the process group (if any) and stop serving a rendezvous store."""
        distributed.destroy_process_group()
        self._store = None

    def step_boundary(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        step: int,
        batch_size: int | None = None,
    ) -> Membership | None:
        """Apply a regroup that is due; None when the membership is unchanged.

        The first call always reports the membership ("started"; a new rank loads rank 0's
        state here and reports "joined"), so the script builds its DDP wrapper and data shard
        in one place. A collective: every rank calls it at the same steps.
        """
        if not self._started:
            self._started = True
            if self._joining:
                return self._join_running_group(model, optimizer)
            return self._membership("started", step, batch_size, "")
        plan = self._due_plan()
        if plan is None:
            return None
        return self._regroup(plan, model, optimizer, step, batch_size)

    # ---------------------------------------------------------------- internals

    def _port(self) -> int:
        port = self._job.env.master_port
        if port is None:
            raise ValueError(f"{REGROUP_GENERATION_ENV} is set but MASTER_PORT is not")
        return port

    def _membership(self, event: str, step: int, batch_size: int | None, digest: str) -> Membership:
        return Membership(
            event, self._generation, self._rank, self._world_size, step, batch_size, digest
        )

    def _due_plan(self) -> RegroupPlan | None:
        """Rank 0's plan once every new rank has arrived, on every rank; else None (also
        between two exchanges of the ranks, trainer_shim/step_sync.py)."""
        if not distributed.is_active():
            return RegroupPlan.from_ints(self._rank0_plan(), self._addr)
        values = self._plan_sync.poll(self._rank0_plan)
        return None if values is None else RegroupPlan.from_ints(values, self._addr)

    def _rank0_plan(self) -> list[int]:
        """The plan to deploy now, as rank 0 sees it; no plan on the other ranks."""
        if self._rank == 0:
            plan = self._inbox.newest(self._generation)
            if plan is not None and self._arrived(plan):
                return plan.as_ints()
        return list(_NO_PLAN)

    def _arrived(self, plan: RegroupPlan) -> bool:
        """Rank 0: serve the plan's store (once) and count the new ranks that reached it."""
        if plan.world_size == 1:
            return True
        if self._store_generation != plan.generation:
            self._store = distributed.rendezvous_store(
                plan.master_addr, plan.master_port, serve=True, timeout=self._timeout
            )
            self._store_generation = plan.generation
            log.info(
                "regroup %d: serving the new group's store on port %d",
                plan.generation,
                plan.master_port,
            )
        needed = plan.new_ranks(self._world_size)
        return needed == 0 or int(self._store.add(f"{plan.generation}/joined", 0)) >= needed

    def _regroup(
        self,
        plan: RegroupPlan,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        step: int,
        batch_size: int | None,
    ) -> Membership:
        old_world = self._world_size
        distributed.retire_process_group()  # freeing it can hang after a shrink
        self._generation = plan.generation
        new_batch = plan.batch_size or batch_size
        if self._rank >= plan.world_size:
            reason = (
                f"left the group at regroup {plan.generation} "
                f"(world size {old_world} -> {plan.world_size})"
            )
            self._job.control.request_stop(reason)
            self._job.should_stop()  # no group any more: a local decision, recorded on exit
            self._store = None
            log.info("%s at step %d", reason, step)
            return Membership("left", plan.generation, self._rank, plan.world_size, step, None)
        self._world_size = plan.world_size
        self._plan_sync.reset()  # the new group's ranks exchange at their next step boundary
        self._port_override(plan.master_port)
        if plan.world_size > 1:
            store = self._store if self._rank == 0 else None
            if store is None:
                store = distributed.rendezvous_store(
                    self._addr, plan.master_port, serve=False, timeout=self._timeout
                )
            self._join(store)
        self._store = None
        digest = state_digest(model, optimizer)
        if plan.new_ranks(old_world) > 0:
            distributed.broadcast_from_rank0(_state_payload(model, optimizer, step, new_batch))
        log.info(
            "regroup %d at step %d: world size %d -> %d (state %s)",
            plan.generation,
            step,
            old_world,
            plan.world_size,
            digest,
        )
        return self._membership("regrouped", step, new_batch, digest)

    def _join(self, store: Any) -> None:
        distributed.join_group(
            store,
            f"regroup/{self._generation}/",
            self._rank,
            self._world_size,
            self._job.device,
            self._timeout,
        )

    def _port_override(self, port: int) -> None:
        self._job.regrouped(self._generation, self._world_size, port)

    def _join_running_group(
        self, model: nn.Module, optimizer: torch.optim.Optimizer | None
    ) -> Membership:
        """A new rank: count in at rank 0's store, join the group, load rank 0's state."""
        store = distributed.rendezvous_store(
            self._addr, self._port(), serve=False, timeout=self._timeout
        )
        store.add(f"{self._generation}/joined", 1)  # rank 0 switches once all are counted
        self._join(store)
        payload = distributed.broadcast_from_rank0(None)
        if not isinstance(payload, dict):
            raise RuntimeError(f"regroup {self._generation}: rank 0 sent no state")
        distributed.unwrap_model(model).load_state_dict(payload["model"])
        if optimizer is not None and payload.get("optimizer") is not None:
            optimizer.load_state_dict(payload["optimizer"])
        digest = state_digest(model, optimizer)
        step = int(payload["step"])
        log.info("joined regroup %d at step %d (state %s)", self._generation, step, digest)
        return self._membership("joined", step, payload.get("batch_size"), digest)


def _state_payload(
    model: nn.Module, optimizer: torch.optim.Optimizer | None, step: int, batch_size: int | None
) -> dict[str, Any]:
    return {
        "step": int(step),
        "batch_size": batch_size,
        "model": distributed.unwrap_model(model).state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
    }
