"""Chic's decision-making phase (§4.2): the first I jobs start from zero allocation and the
agent adds one worker or one PS per step until a stop condition holds.

Kinds: ``ps`` (Chic: 2I+1 actions; 0-based ``2i`` adds a worker to slot ``i``, ``2i + 1`` a PS;
the paper's 1-based ``2i - 1`` / ``2i``), ``pair`` (Chic-Pair §4.4: I+1 actions, ``i`` adds a
worker and a PS) and ``ar`` (all-reduce, as ONES adapted Chic: ``i`` adds one GPU worker). The
last action is the void action, which ends the phase.

Rewards of a step (§4.2, *Reward*): r2 = -p1 for an action on an empty slot, and (ours) for
one the remaining resources cannot hold, which then changes nothing; r3 = -p2 when a job first
gets a task and +p2 once it holds both a worker and a PS (``ps`` only: Chic-Pair adds both at
once and ``ar`` has no PS, docs/chic.md). r1 (Eq. 8) belongs to the training phase
(``simulator.chic_env``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

P1, P2 = 5.0, 1.0  # Chic §6.1
KINDS = ("ps", "pair", "ar")
B_SCALE = 200.0  # remaining iterations are fed as s^B / 200 (Chic §6.1: at most 200)
COUNT_SCALE = 10.0
MAX_STEPS = 64  # ours: a phase of more steps ends as if the void action were taken

Vector = Sequence[float]


@dataclass(frozen=True)
class SlotJob:
    """A visible job: its model (``features``: one-hot for ``ps``/``pair``, anything fixed-size
    for ``ar``), remaining iterations, per-role demands and time per iteration ``g(w, p)``
    (``ar`` ignores ``p``)."""

    features: tuple[float, ...]
    remaining: float
    worker: Vector
    ps: Vector
    time: Callable[[int, int], float]
    most: int = 0  # most workers it may hold (0: no limit; elastic jobs under ``ar``)


def n_actions(kind: str, slots: int) -> int:
    return 2 * slots + 1 if kind == "ps" else slots + 1


class Phase:
    """One decision-making phase over ``slots`` slots (jobs fill the first ones)."""

    def __init__(
        self,
        kind: str,
        slots: int,
        jobs: Sequence[SlotJob],
        capacity: Vector,
        used: Vector | None = None,
        start: Sequence[int] | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown Chic kind {kind!r}; valid: {', '.join(KINDS)}")
        if len(jobs) > slots:
            raise ValueError(f"{len(jobs)} jobs for {slots} slots")
        self.kind, self.slots, self.jobs = kind, slots, list(jobs)
        self.capacity = np.asarray(capacity, dtype=float)
        self.used = np.zeros_like(self.capacity) if used is None else np.asarray(used, float)
        self._w = [np.asarray(j.worker, dtype=float) for j in jobs]
        self._p = [np.asarray(j.ps, dtype=float) for j in jobs]
        self.workers = [0] * len(jobs)
        self.servers = [0] * len(jobs)
        for i, count in enumerate(start or ()):  # ar: jobs that keep GPUs (no preemption)
            self._add(i, count, 0)
        self.steps = 0
        self.over = False

    @property
    def void(self) -> int:
        return n_actions(self.kind, self.slots) - 1

    def _need(self, i: int, workers: int, servers: int) -> np.ndarray:
        return workers * self._w[i] + servers * self._p[i]

    def _add(self, i: int, workers: int, servers: int) -> None:
        self.used = self.used + self._need(i, workers, servers)
        self.workers[i] += workers
        self.servers[i] += servers

    def delta(self, action: int) -> tuple[int, int, int] | None:
        """(slot, workers, servers) an action adds; None for the void action."""
        if not 0 <= action <= self.void:
            raise ValueError(f"action {action} outside 0..{self.void}")
        if action == self.void:
            return None
        if self.kind == "ps":
            return action // 2, 1 - action % 2, action % 2
        return action, 1, 1 if self.kind == "pair" else 0

    def valid(self, action: int) -> bool:
        """Whether an action would change the allocation (void: always)."""
        d = self.delta(action)
        if d is None:
            return True
        i, w, p = d
        if i >= len(self.jobs):
            return False
        most = self.jobs[i].most
        if most and self.workers[i] + w > most:
            return False
        return bool(np.all(self.used + self._need(i, w, p) <= self.capacity + 1e-9))

    def apply(self, action: int) -> float:
        """Take an action; returns r2 + r3 (module docstring). The void action ends the phase."""
        self.steps += 1
        d = self.delta(action)
        if d is None:
            self.over = True
            return 0.0
        if self.steps >= MAX_STEPS:
            self.over = True
        if not self.valid(action):
            return -P1  # r2
        i, w, p = d
        before = (self.workers[i], self.servers[i])
        self._add(i, w, p)
        if self.kind != "ps":
            return 0.0
        r3 = -P2 if before == (0, 0) else 0.0
        if min(before) == 0 and min(self.workers[i], self.servers[i]) >= 1:
            r3 += P2
        return r3

    def finished(self) -> bool:
        """S' (Eq. 6): the void action was taken, no job is visible, or Condition (1) or (2)."""
        return self.over or not self.jobs or self.full() or self.no_gain()

    def full(self) -> bool:
        """Condition (1), Eq. 4: the smallest task of any visible job (per resource, the smaller
        of worker and PS; a pair for ``pair``; a worker for ``ar``) no longer fits."""
        if self.kind == "ps":
            tasks = [np.minimum(w, p) for w, p in zip(self._w, self._p, strict=True)]
        else:
            tasks = [
                self._need(i, 1, 1 if self.kind == "pair" else 0) for i in range(len(self.jobs))
            ]
        smallest = np.min(tasks, axis=0)
        return bool(np.any(smallest + self.used > self.capacity + 1e-9))

    def no_gain(self) -> bool:
        """Condition (2), Eq. 5: no added task lowers any visible job's g. Ours: a job without
        a worker or a PS (g = inf) can still gain, else the phase would end at zero."""
        for i, job in enumerate(self.jobs):
            w, p = self.workers[i], self.servers[i]
            if job.most and w >= job.most:
                continue
            if self.kind == "ar":
                now, options = job.time(w, 0), [job.time(w + 1, 0)]
            else:
                if w == 0 or p == 0:
                    return False
                now = job.time(w, p)
                grow = [(w + 1, p + 1)] if self.kind == "pair" else [(w + 1, p), (w, p + 1)]
                options = [job.time(a, b) for a, b in grow]
            if math.isinf(now) or min(options) < now:
                return False
        return True

    def encode(self, backlog: int) -> np.ndarray:
        """The state s_t (§4.2): per slot the model features, s^B, s^w and (``ps``) s^p, zeros
        for an empty slot; then the backlog N_t."""
        per = feature_width(self.kind) + (3 if self.kind == "ps" else 2)
        out = np.zeros(self.slots * per + 1, dtype=np.float32)
        for i, job in enumerate(self.jobs):
            row = [*job.features, job.remaining / B_SCALE, self.workers[i] / COUNT_SCALE]
            if self.kind == "ps":
                row.append(self.servers[i] / COUNT_SCALE)
            out[i * per : i * per + len(row)] = row
        out[-1] = backlog / COUNT_SCALE
        return out


def feature_width(kind: str) -> int:
    """Model features per slot: a one-hot over Chic's three models (``ps``, ``pair``); ``ar``
    uses two model-free ones (``controller.policy.chic.ar``)."""
    return 2 if kind == "ar" else 3


def state_size(kind: str, slots: int) -> int:
    return slots * (feature_width(kind) + (3 if kind == "ps" else 2)) + 1
