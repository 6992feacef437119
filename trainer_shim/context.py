"""`JobContext`: the one object a training script talks to, in the cluster and locally."""

from __future__ import annotations

import functools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import torch
from torch import nn

from mlsched.v1 import common_pb2, trainer_pb2
from trainer_shim import distributed, elastic, launchers
from trainer_shim.checkpoint import (
    CheckpointStore,
    StaleCheckpointWrite,
    capture_rng,
    ensure_weights_only_loadable,
    restore_rng,
)
from trainer_shim.env import TaskEnv, parse_env, resolve_agent_addr
from trainer_shim.exit_record import ExitRecord, write_exit_record
from trainer_shim.selffence import FenceThread, SilenceWatch
from trainer_shim.session import AgentSession
from trainer_shim.step_sync import DEFAULT_PERIOD_S, PacedExchange
from trainer_shim.stopping import ControlState, StoppingCriteria, Target

__all__ = ["JobContext", "RestoreInfo", "init"]

ScaleCallback = Callable[[elastic.Scale], None]

log = logging.getLogger("trainer_shim")

CHECKPOINT_FORMAT = 1
SELF_FENCE_EXIT_CODE = 75  # EX_TEMPFAIL: the exit record says "suspended"


@dataclass(frozen=True)
class RestoreInfo:
    """What `JobContext.restore` loaded: the step, the file, and what was saved with it."""

    step: int
    path: Path
    batch_size: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def _describe(command: str, reason: str) -> str:
    return f"{command}: {reason}" if reason else command


def init(
    *,
    checkpoint_dir: str | os.PathLike[str] | None = None,
    max_iterations: int | None = None,
    target: Target | tuple[str, float] | tuple[str, float, str] | None = None,
    batch_size: int | None = None,
    resume: bool = False,
    exit_file: str | os.PathLike[str] | None = None,
    keep_checkpoints: int = 2,
    report_interval: float = 0.5,
    flush_timeout: float = 5.0,
    handle_sigterm: bool = True,
    environ: Mapping[str, str] | None = None,
    sync_period: float = DEFAULT_PERIOD_S,
) -> JobContext:
    """Create the job context; use it as `with trainer_shim.init(...) as job:`.

    Cluster mode (MLSCHED_TASK_ID set): the checkpoint directory, resume flag, exit file,
    batch size and stopping criteria come from the environment. The keyword arguments only
    fill in what the environment leaves unset; the criteria are taken as a whole, from the
    environment when it sets any (MLSCHED_MAX_ITERATIONS or MLSCHED_TARGET_*), else from
    `max_iterations`/`target`. `resume` is ignored there (MLSCHED_RESUME decides).

    Local mode: the same API with no agent. Settings come from the keyword arguments; with no
    `checkpoint_dir`, `save_checkpoint` is a no-op that warns once and `restore` returns 0.
    `resume=True` restores the newest checkpoint in `checkpoint_dir`, if there is one.

    `target` is a `Target` or a `(metric, value[, goal])` tuple with goal "max" (default)
    or "min". `environ` replaces `os.environ` when reading the contract (mainly for tests).
    `sync_period` bounds, in seconds, how long the ranks of a distributed job answer the
    per-step questions from local state between two exchanges (0: exchange at every call).
    """
    task_env = parse_env(environ)
    if isinstance(target, tuple):
        target = Target(*target)
    kwargs_criteria = StoppingCriteria(max_iterations=max_iterations, target=target)
    if task_env.in_cluster:
        env_sets_criteria = task_env.max_iterations is not None or task_env.target is not None
        criteria = (
            StoppingCriteria(max_iterations=task_env.max_iterations, target=task_env.target)
            if env_sets_criteria
            else kwargs_criteria
        )
        checkpoint_dir = task_env.checkpoint_dir or checkpoint_dir
        batch_size = task_env.batch_size or batch_size
        resume = task_env.resume
        exit_file = task_env.exit_file or exit_file
        if not launchers.speaks_for_task(task_env):  # a torchrun child of local rank > 0
            exit_file = None
    else:
        criteria = kwargs_criteria
    scale, controller_batch = elastic.from_env(
        os.environ if environ is None else environ,
        task_env.world_size,
        task_env.rank,
        batch_size,
    )
    context = JobContext(
        task_env,
        criteria=criteria,
        checkpoint_dir=checkpoint_dir,
        batch_size=batch_size,
        resume=resume,
        exit_file=exit_file,
        keep_checkpoints=keep_checkpoints,
        report_interval=report_interval,
        flush_timeout=flush_timeout,
        scale=scale,
        controller_batch=controller_batch,
        sync_period=sync_period,
    )
    context._start(handle_sigterm=handle_sigterm)
    return context


class JobContext:
    """A training process's handle on its job; create it with `trainer_shim.init()`.

    Methods are meant for the training thread. Under torch.distributed with more than one
    process, `should_stop`, `should_suspend` and `requested_batch_size` are collectives:
    every rank must call each of them at the same steps, and every rank gets the same answer
    (stop/suspend when any rank was asked to; the batch size rank 0 received). Most calls are
    answered from local state: the ranks exchange only every `sync_period` seconds or so, as
    rank 0 paces it (trainer_shim/step_sync.py), so an answer can come up to that much later
    than the news, at the same step on every rank.
    """

    def __init__(
        self,
        task_env: TaskEnv,
        *,
        criteria: StoppingCriteria,
        checkpoint_dir: str | os.PathLike[str] | None,
        batch_size: int | None,
        resume: bool,
        exit_file: str | os.PathLike[str] | None,
        keep_checkpoints: int = 2,
        report_interval: float = 0.5,
        flush_timeout: float = 5.0,
        scale: elastic.Scale | None = None,
        controller_batch: bool = False,
        sync_period: float = DEFAULT_PERIOD_S,
    ) -> None:
        self.env = task_env
        self.criteria = criteria
        self.batch_size = batch_size
        self._resume = resume
        self._exit_file = None if exit_file is None else Path(exit_file)
        self._store = (
            None
            if checkpoint_dir is None
            else _make_store(Path(checkpoint_dir), keep_checkpoints, task_env, resume)
        )
        # Set when the checkpoint store refused this attempt (a newer one owns the directory).
        self._fenced_reason: str | None = None
        self._flush_timeout = flush_timeout
        self._control = ControlState()
        self._listeners: dict[str, Callable[[trainer_pb2.TrainerSessionResponse], None]] = {}
        self._session: AgentSession | None = None
        if task_env.in_cluster and launchers.speaks_for_task(task_env):
            self._session = AgentSession(
                task_id=task_env.task_id or "",
                token=task_env.token,
                resolve_addr=functools.partial(resolve_agent_addr, task_env),
                on_command=self._on_command,
                report_interval=report_interval,
            )
        # Self-fencing when the agent falls silent (trainer_shim/selffence.py).
        self._silence_fenced: str | None = None
        self._exit_fn: Callable[[int], None] = os._exit
        self._fence_thread: FenceThread | None = None
        self._silence: SilenceWatch | None = None
        suspend_after, exit_after = task_env.fence_suspend_after_s, task_env.fence_exit_after_s
        if self._session is not None and suspend_after is not None and exit_after is not None:
            self._silence = SilenceWatch(suspend_after, exit_after, time.monotonic())
            self._fence_thread = FenceThread(
                self._silence, time.monotonic, self._on_silence, self._on_silence_exit
            )
        # Training-thread state.
        self._step = 0
        self._group_check = launchers.GroupCheck(task_env.world_size)
        self._loss: float | None = None
        self._metrics: dict[str, float] = {}
        self._scale = scale or elastic.Scale(
            task_env.world_size, task_env.rank, batch_size, batch_size
        )
        self._current_batch_size = self._scale.batch_size
        self._controller_batch = controller_batch  # the attempt's batch outranks a checkpoint's
        self._scale_callbacks: list[ScaleCallback] = []
        self._checkpoint_step: int | None = None
        self._restored: RestoreInfo | None = None
        self._restored_step = 0
        self._restored_sent: int | None = None
        self._criteria_reason: str | None = None
        self._stop_reason: str | None = None
        self._suspend_reason: str | None = None
        self._warned_no_store = False
        # The per-step questions, agreed among ranks in one exchange every so often
        # (trainer_shim/step_sync.py). The first question the script asks paces the exchanges
        # (the same on every rank: they ask the same questions in the same order); each
        # exchange answers all of them, and the others read the agreed answers.
        self._step_sync = PacedExchange(
            distributed.max_over_ranks, is_rank0=task_env.rank == 0, period_s=sync_period
        )
        self._sync_driver: str | None = None
        self._agreed_stop = False
        self._agreed_suspend = False
        self._agreed_batch: int | None = None
        self._owns_process_group = False
        self._closed = False
        # Set by the SIGTERM handler; a plain attribute because handlers must not take locks.
        self._sigterm = False
        self._previous_sigterm: Any = None
        self._sigterm_installed = False

    # ----------------------------------------------------------------- lifecycle

    def _start(self, *, handle_sigterm: bool) -> None:
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._sigterm_installed = True
        if self._session is not None:
            self._session.start()
        if self._fence_thread is not None:
            self._fence_thread.start()

    def __enter__(self) -> JobContext:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        self._finish(exc)
        return False

    def close(self) -> None:
        """End the job context as a normal exit (what leaving the `with` block does)."""
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fence_thread is not None:
            self._fence_thread.stop()
        try:
            record = self._exit_record(exc)
            if self._exit_file is not None:
                try:
                    write_exit_record(self._exit_file, record)
                except OSError:
                    log.exception("cannot write the exit record %s", self._exit_file)
            if self._session is not None:
                self._send_restored(self._restored_step, only_if_unsent=True)
                # A silent agent is not waited for: the fencing deadline counts.
                flush = self._flush_timeout if self._silence_fenced is None else 0.5
                self._session.close(flush)
            if self._owns_process_group:
                distributed.destroy_process_group(drain=record.outcome != "failed")
        finally:
            if self._sigterm_installed:
                previous = self._previous_sigterm
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
                self._sigterm_installed = False

    def _exit_record(self, exc: BaseException | None) -> ExitRecord:
        checkpoint_step = self._checkpoint_step
        if checkpoint_step is None:
            checkpoint_step = self._restored_step
        normal_exit = exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0))
        if not normal_exit:
            outcome, reason = "failed", repr(exc)
        elif self._suspend_reason is not None:
            outcome, reason = "suspended", self._suspend_reason
        else:
            outcome, reason = "completed", self._stop_reason or ""
        return ExitRecord(outcome, self._step, checkpoint_step, reason)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._sigterm = True

    def _on_silence(self, reason: str) -> None:
        """The agent has been silent past the first deadline: suspend (checkpoint and exit)."""
        log.error("%s: suspending (checkpoint, then exit)", reason)
        self._silence_fenced = reason
        self._control.request_suspend(reason)

    def _on_silence_exit(self, reason: str) -> None:
        """Past the second deadline: record a suspension and end the process now."""
        self._silence_fenced = reason
        checkpoint_step = self._checkpoint_step
        if checkpoint_step is None:
            checkpoint_step = self._restored_step
        record = ExitRecord("suspended", self._step, checkpoint_step, reason)
        if self._exit_file is not None:
            try:
                write_exit_record(self._exit_file, record)
            except OSError:
                log.exception("cannot write the exit record %s", self._exit_file)
        log.error("%s (step %d, checkpoint step %d)", reason, self._step, checkpoint_step)
        logging.shutdown()
        self._exit_fn(SELF_FENCE_EXIT_CODE)

    def _on_command(self, response: trainer_pb2.TrainerSessionResponse) -> None:
        if self._silence is not None:
            self._silence.heard(time.monotonic())
        kind = response.WhichOneof("message")
        if kind == "suspend":
            self._control.request_suspend(_describe("SuspendNow", response.suspend.reason))
        elif kind == "stop":
            self._control.request_stop(_describe("StopNow", response.stop.reason))
        elif kind == "change_batch_size":
            self._control.request_batch_size(response.change_batch_size.batch_size)
        elif kind == "lease":
            if not response.lease.renewed:  # the controller ended the lease: suspend now
                self._control.request_suspend("lease expired and not renewed")
            self._control.set_lease(response.lease.expires_at, response.lease.renewed)
        elif kind == "alive":
            pass  # counted above
        elif kind in self._listeners:
            self._listeners[kind](response)
        else:
            log.debug("ignoring unknown agent command %s", response)

    # ------------------------------------------------------------ identity

    @property
    def is_local(self) -> bool:
        """True when no node agent launched this process."""
        return not self.env.in_cluster

    @property
    def job_id(self) -> str:
        """The job id, "local" in local mode."""
        return self.env.job_id or "local"

    @property
    def task_id(self) -> str | None:
        """`<job_id>/<rank>/<attempt>`, None in local mode."""
        return self.env.task_id

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def in_session(self) -> bool:
        """Whether this process talks to a node agent (False in local mode)."""
        return self._session is not None

    def listen(
        self, kind: str, listener: Callable[[trainer_pb2.TrainerSessionResponse], None]
    ) -> None:
        """Hand the agent's messages of ``kind`` (a ``TrainerSessionResponse`` field this
        context does not handle itself, e.g. "regroup") to ``listener``, on the session's
        thread; a later call for the same kind replaces the listener."""
        self._listeners[kind] = listener

    def regrouped(
        self, generation: int, world_size: int | None = None, master_port: int | None = None
    ) -> None:
        """In-place regroups (trainer_shim/regroup.py): ``generation`` is the last one this
        process took part in (0: none yet), and after one its world size and rendezvous port.
        Progress reports carry ``regroup_generation`` from the first call on: the controller
        regroups only a job that reports it, and takes a new value as the new group training."""
        if world_size is not None:
            self.env = replace(self.env, world_size=world_size)
        if master_port is not None:
            self.env = replace(self.env, master_port=master_port)
        if world_size is not None:  # a new group: its ranks (a joining one included) pace
            self._step_sync.reset()  # the exchanges on the first question each asks next
            self._sync_driver = None
        self._metrics["regroup_generation"] = float(generation)

    @property
    def local_rank(self) -> int:
        return self.env.local_rank

    @functools.cached_property
    def device(self) -> torch.device:
        """The device to train on.

        `cuda:<LOCAL_RANK modulo the visible GPU count>` when CUDA is available and the GPUs
        are real; every visible GPU belongs to this task (CUDA_VISIBLE_DEVICES), so with one
        GPU per task that is `cuda:0`. CPU when MLSCHED_VIRTUAL_GPUS=1 or CUDA is unavailable.
        """
        if self.env.virtual_gpus or not torch.cuda.is_available():
            return torch.device("cpu")
        return torch.device("cuda", self.local_rank % torch.cuda.device_count())

    @property
    def checkpoint_dir(self) -> Path | None:
        return None if self._store is None else self._store.directory

    # ------------------------------------------------------------ agent commands

    @property
    def control(self) -> ControlState:
        """The raw commands received from the agent so far (diagnostics and tests)."""
        return self._control

    @property
    def lease_expires_at(self) -> float | None:
        """Unix time the current lease expires, from the agent's latest LeaseNotice."""
        return self._control.lease_expires_at

    @property
    def stop_reason(self) -> str | None:
        """Why `should_stop()` returned True, once it has."""
        return self._stop_reason

    @property
    def suspend_reason(self) -> str | None:
        """Why `should_suspend()` returned True, once it has."""
        return self._suspend_reason

    def should_stop(self) -> bool:
        """True once training is done: StopNow was received, the last reported step reached
        the iteration budget, or a reported metric reached the target. Sticky once True.

        A collective under torch.distributed (see the class docstring).
        """
        if self._stop_reason is not None:
            return True
        distributed_now = distributed.is_active()
        if distributed_now:
            self._sync_ranks("stop")
        if self._scale_callbacks:
            self.check_scale()
        reason = self._local_stop_reason()
        if distributed_now:
            if not self._agreed_stop:
                return False
            reason = reason or "stopped because another rank stopped"
        if reason is None:
            return False
        self._stop_reason = reason
        return True

    def _local_stop_reason(self) -> str | None:
        return self._control.stop_reason or self._criteria_reason

    def _local_suspend_reason(self) -> str | None:
        return (
            self._control.suspend_reason
            or ("SIGTERM" if self._sigterm else None)
            or self._fenced_reason
        )

    def _sync_ranks(self, question: str) -> None:
        """At the pacing question's sync calls, exchange every rank's answers to all questions
        in one collective: stop and suspend when any rank says so, rank 0's batch request."""
        if self._sync_driver is None:
            self._sync_driver = question
        if question != self._sync_driver:
            return
        budget = self.criteria.max_iterations
        # The budget runs out at a step rank 0 sees coming: the exchange lands on that step.
        horizon = budget - self._step if question == "stop" and budget is not None else None
        agreed = self._step_sync.poll(self._local_answers, horizon=horizon)
        if agreed is None:
            return
        stop, suspend, batch = agreed
        self._agreed_stop = self._agreed_stop or bool(stop)
        self._agreed_suspend = self._agreed_suspend or bool(suspend)
        if batch:
            self._agreed_batch = batch

    def _local_answers(self) -> list[int]:
        """This rank's answers, for an exchange (a batch request is taken only here: between
        exchanges it waits in the control state; another rank's is dropped, rank 0's applies)."""
        batch = self._control.take_batch_size()
        if self.rank != 0:
            batch = None
        return [
            int(self._local_stop_reason() is not None),
            int(self._local_suspend_reason() is not None),
            batch or 0,
        ]

    def should_suspend(self) -> bool:
        """True once the agent sent SuspendNow or the process got SIGTERM: save a checkpoint
        and leave the `with` block. Sticky once True; the exit record then says `suspended`.

        A collective under torch.distributed (see the class docstring).
        """
        if self._suspend_reason is not None:
            return True
        reason = self._local_suspend_reason()
        if distributed.is_active():
            self._sync_ranks("suspend")
            if not self._agreed_suspend:
                return False
            reason = reason or "suspended because another rank was asked to suspend"
        if reason is None:
            return False
        self._suspend_reason = reason
        return True

    def requested_batch_size(self) -> int | None:
        """A new global batch size the agent asked for, returned once; None when unchanged.

        The script applies it (e.g. rebuilds its batches) and reports it through
        `report(batch_size=...)`. Under torch.distributed rank 0's request is the one applied,
        on every rank (a collective; see the class docstring); other ranks' requests are
        dropped.
        """
        if not distributed.is_active():
            return self._control.take_batch_size()
        self._sync_ranks("batch")
        value, self._agreed_batch = self._agreed_batch, None
        return value

    # ------------------------------------------------------------ elastic scale

    @property
    def scale(self) -> elastic.Scale:
        """World size, global and per-GPU batch and learning-rate scale this process trains
        at now (`trainer_shim.Scale`; docs/elastic.md)."""
        return self._scale

    def on_scale_change(self, callback: ScaleCallback) -> None:
        """Call `callback(scale)` whenever the batch changes in place (at a step boundary:
        inside `should_stop()` or `check_scale()`). Under torch.distributed every rank must
        register, as `should_stop()` then runs one more collective."""
        self._scale_callbacks.append(callback)

    def check_scale(self) -> elastic.Scale | None:
        """Apply a batch-size change the agent sent, at a step boundary: the new scale (after
        calling every registered callback), or None when nothing changed. A collective under
        torch.distributed, like `requested_batch_size`."""
        batch = self.requested_batch_size()
        if batch is None or batch == self._scale.batch_size:
            return None
        self._set_scale(self._scale.with_batch(batch))
        return self._scale

    def _set_scale(self, scale: elastic.Scale) -> None:
        changed = scale != self._scale
        self._scale = scale
        self._current_batch_size = scale.batch_size
        if changed:
            for callback in self._scale_callbacks:
                callback(scale)

    # ------------------------------------------------------------ reporting

    def report(
        self,
        step: int,
        *,
        loss: float | torch.Tensor | None = None,
        metrics: Mapping[str, float | torch.Tensor] | None = None,
        iteration_time: float | None = None,
        batch_size: int | None = None,
        compute_time: float | None = None,
    ) -> None:
        """Record progress after `step` iterations; never blocks on the agent.

        Metrics accumulate: each report carries the latest value of every metric reported
        so far, so an accuracy evaluated every N steps is never lost to rate limiting. The
        agent gets the newest report at most every `report_interval` seconds.

        `iteration_time` is the wall time of the latest iteration in seconds. `compute_time`
        (optional) is the computation part of it alone: forward and backward (and the
        optimizer step) without waiting for gradient synchronization, UniSched's T_comp.
        Leave it unset unless it is measured; in a single process with no communication it
        equals `iteration_time`. Schedulers use both to predict the speed on other GPU counts.
        """
        self._step = int(step)
        if (warning := self._group_check.observe(distributed.is_active)) is not None:
            log.warning("%s", warning)
        if loss is not None:
            self._loss = float(loss)
        if metrics:
            for name, value in metrics.items():
                self._metrics[name] = float(value)
        if batch_size is not None and int(batch_size) != self._current_batch_size:
            self._current_batch_size = int(batch_size)
            self._scale = self._scale.with_batch(int(batch_size))
        if self._criteria_reason is None:
            self._criteria_reason = self.criteria.check(self._step, self._metrics)
        if self._session is None:
            log.debug("step %d loss=%s metrics=%s", self._step, self._loss, self._metrics)
            return
        self._send_restored(self._restored_step, only_if_unsent=True)
        self._session.send_progress(
            common_pb2.Progress(
                iteration=self._step,
                loss=self._loss if self._loss is not None else 0.0,
                metrics=self._metrics,
                iteration_time_s=iteration_time or 0.0,
                batch_size=self._current_batch_size or 0,
                time=time.time(),
                compute_time_s=compute_time or 0.0,
            )
        )

    @property
    def last_step(self) -> int:
        """The last reported (or restored) step."""
        return self._step

    @property
    def last_metrics(self) -> Mapping[str, float]:
        """The latest value of every metric reported so far."""
        return dict(self._metrics)

    def _send_restored(self, step: int, *, only_if_unsent: bool) -> None:
        if self._session is None or (only_if_unsent and self._restored_sent is not None):
            return
        if self._restored_sent == step:
            return
        self._restored_sent = step
        self._session.send_notice(
            trainer_pb2.TrainerSessionRequest(restored=trainer_pb2.Restored(step=step))
        )

    # ------------------------------------------------------------ checkpoints

    @property
    def checkpoint_step(self) -> int | None:
        """The step of the last `save_checkpoint` call in this process, if any."""
        return self._checkpoint_step

    @property
    def restored(self) -> RestoreInfo | None:
        """What the last `restore` loaded; None on a fresh start."""
        return self._restored

    def load_extra(self) -> dict[str, Any]:
        """The `extra` dict saved with the restored checkpoint ({} on a fresh start)."""
        return {} if self._restored is None else dict(self._restored.extra)

    def save_checkpoint(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Path | None:
        """Save a checkpoint of `step` and tell the agent; returns its path.

        Saves the model's and optimizer's state dicts (DDP wrappers unwrapped), every RNG
        state (torch CPU/CUDA, `random`, numpy), the batch size last reported, and `extra`,
        which must load with `torch.load(weights_only=True)` (tensors, numbers, strings and
        containers of them; checked here). Under torch.distributed only rank 0 writes; other
        ranks return None at once, without a barrier: add one if they must not run ahead.
        Returns None (after warning once) when there is no checkpoint directory.
        """
        step = int(step)
        self._checkpoint_step = step
        if self.rank != 0:
            return None
        if self._store is None:
            if not self._warned_no_store:
                log.warning("save_checkpoint: no checkpoint directory configured; not saving")
                self._warned_no_store = True
            return None
        extra_dict = dict(extra or {})
        if extra_dict:
            ensure_weights_only_loadable(extra_dict, "save_checkpoint(extra=...)")
        self._send_save_state(True, step)  # from here a suspension waits (bounded) for the save
        try:
            payload = {
                "format": CHECKPOINT_FORMAT,
                "step": step,
                "model": distributed.unwrap_model(model).state_dict(),
                "optimizer": None if optimizer is None else optimizer.state_dict(),
                "rng": capture_rng(),
                "batch_size": self._current_batch_size,
                "extra": extra_dict,
                "world_size": self.world_size,
                "saved_at": time.time(),
            }
            path = self._store.save(step, payload)
        except StaleCheckpointWrite as exc:  # logged by the store
            self._fenced(exc)
            return None
        finally:
            self._send_save_state(False, step)
        if self._session is not None:
            self._send_restored(self._restored_step, only_if_unsent=True)
            notice = trainer_pb2.CheckpointSaved(step=step, path=str(path.resolve()))
            self._session.send_notice(trainer_pb2.TrainerSessionRequest(checkpoint_saved=notice))
        return path

    def _send_save_state(self, in_progress: bool, step: int) -> None:
        """Tell the agent a save started or ended: a suspension waits for a save in progress."""
        if self._session is not None:
            state = trainer_pb2.SaveState(in_progress=in_progress, step=step)
            self._session.send_notice(trainer_pb2.TrainerSessionRequest(save=state))

    def _fenced(self, exc: StaleCheckpointWrite) -> None:
        """A newer attempt owns the checkpoints: this one must stop (should_suspend says so)."""
        if self._fenced_reason is None:
            log.error("this attempt is stale and will suspend: %s", exc)
        self._fenced_reason = f"stale attempt: generation {exc.newest} owns the checkpoints"

    def restore(
        self, model: nn.Module | None, optimizer: torch.optim.Optimizer | None = None
    ) -> int:
        """Resume from the newest checkpoint when resuming; returns its step, 0 on a fresh start.

        Resuming means MLSCHED_RESUME=1 in the cluster, `init(resume=True)` locally; on a
        fresh start no file is read. Loads the model and optimizer state and every RNG state;
        the batch size and `extra` saved with it are in `restored` / `load_extra()`. Every
        rank reads the same file (written by rank 0), so every rank gets rank 0's RNG state.
        Tells the agent `Restored(step)`.
        """
        info: RestoreInfo | None = None
        if self._store is not None and self.env.in_cluster and self.rank == 0:
            try:
                self._store.claim()  # older attempts may no longer write from now on
            except StaleCheckpointWrite as exc:
                self._fenced(exc)
        if self._resume:
            loaded = None if self._store is None else self._store.load_latest()
            if loaded is None:
                log.warning("resume requested but no checkpoint found in %s", self.checkpoint_dir)
            else:
                path, payload = loaded
                if model is not None:
                    distributed.unwrap_model(model).load_state_dict(payload["model"])
                if optimizer is not None:
                    if payload.get("optimizer") is None:
                        log.warning("checkpoint %s holds no optimizer state", path)
                    else:
                        optimizer.load_state_dict(payload["optimizer"])
                restore_rng(payload.get("rng") or {})
                info = RestoreInfo(
                    step=int(payload["step"]),
                    path=path,
                    batch_size=payload.get("batch_size"),
                    extra=payload.get("extra") or {},
                )
                log.info("restored step %d from %s", info.step, path)
        self._restored = info
        self._restored_step = 0 if info is None else info.step
        self._step = self._restored_step
        self._criteria_reason = self.criteria.check(self._step, self._metrics)
        if info is not None and info.batch_size and not self._controller_batch:
            self._set_scale(self._scale.with_batch(int(info.batch_size)))
        self._send_restored(self._restored_step, only_if_unsent=False)
        return self._restored_step

    # ------------------------------------------------------------ distributed

    def init_process_group(
        self, backend: str | None = None, timeout: timedelta | None = None
    ) -> bool:
        """Join the torch.distributed `env://` process group when WORLD_SIZE > 1.

        Backend: NCCL when `device` is a GPU, else gloo. The group is destroyed when the
        context exits. Returns whether a process group of more than one process is active.
        """
        if self.world_size > 1 and distributed.init_process_group(self.device, backend, timeout):
            self._owns_process_group = True
        return distributed.is_active()


def _make_store(directory: Path, keep: int, task_env: TaskEnv, resume: bool) -> CheckpointStore:
    """The store of this process. Its generation is the attempt in the cluster; locally a
    resume continues the recorded generation and a fresh start begins the next one."""
    if task_env.attempt is not None:
        generation = task_env.attempt
    else:
        recorded = CheckpointStore(directory, keep).fence().generation
        generation = recorded if resume else recorded + 1
    return CheckpointStore(directory, keep, generation)
