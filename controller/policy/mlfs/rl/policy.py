"""MLF-RL (MLFS §3.4) as a :class:`~controller.policy.base.Policy`.

The cycle is :func:`.cycle.plan`; the choices are the network's, deterministically: at each
step the candidate (or hold) with the largest logit, ties to the first (MLF-H's order, hold
last). The network is loaded once, from ``model_path`` (default: the shipped
``default_model.pt``); a missing or damaged file raises :class:`.network.ModelError` when the
policy is made. A step offers the network at most ``max_candidates`` candidates, the first
that fit in MLF-H's order (:func:`.cycle.plan`); by default as many as the largest queue the
model was trained on (its training episode or validation slice, read from the file's
``meta``; :data:`DEFAULT_MAX_CANDIDATES` for a model without one). On longer queues the
network's inputs would leave what it was trained on: the rank feature, ``rank / (n - 1)``,
loses the resolution that tells the first candidates apart (docs/mlfs.md, *Candidates beyond
the training queue*). ``load_control=True`` adds MLF-C's stops (§3.5), which makes it MLFS. A
job an overload request sent back to the queue is kept off the nodes it left while they cannot
take it (:func:`~controller.policy.retreat.keep_off`, as every policy).

State: the network's weights, copied for NumPy inference (:class:`.network.FrozenPointer`)
when the policy is made and fixed from then on, and :class:`.cycle.Memory`: per job of the
latest cycle, the inputs of Eq. 6 and of its feature row that do not read the clock, kept
while the job's own inputs are unchanged. ``decide`` is a function of the snapshot: the same
decision with the memory as without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from controller.policy.base import ClusterSnapshot, Decision
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.rl.cycle import Memory, Step, plan
from controller.policy.mlfs.rl.network import FrozenPointer, PointerNet, load_model
from controller.policy.ranks import Eq6Priorities
from controller.policy.retreat import HOLD_S, keep_off

# Candidates per step for a model whose file does not say the queues it was trained on: the
# default training episode's jobs (simulator.rltrain.TrainConfig.episode_jobs).
DEFAULT_MAX_CANDIDATES = 200


def training_queue(episode_jobs: int, validation_jobs: int) -> int:
    """The most candidates a step offers in training and validation, and the window of a model
    trained so: the larger of an episode's and the validation slice's jobs."""
    return max(episode_jobs, validation_jobs)


def trained_queue(meta: dict[str, Any]) -> int | None:
    """:func:`training_queue` of a model, from the settings ``mlsched mlfs-train`` records in
    its meta; None if the meta does not say."""
    config = meta.get("config")
    if not isinstance(config, dict):
        return None
    episode, validation = config.get("episode_jobs"), config.get("validation_jobs")
    if not all(isinstance(v, int) and v >= 1 for v in (episode, validation)):
        return None
    return training_queue(episode, validation)


@dataclass
class MlfRlPolicy:
    """MLF-RL (module docstring). ``network``: use this one instead of loading a file."""

    model_path: str | Path | None = None
    config: MlfsConfig = field(default_factory=MlfsConfig)
    load_control: bool = False
    lease_s: float | None = None  # None: the controller's default lease
    resources: tuple[str, ...] = DEFAULT_RESOURCES
    name: str = "mlf-rl"
    network: PointerNet | None = field(default=None, repr=False, compare=False)
    meta: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    retreat_hold_s: float = HOLD_S  # controller.policy.retreat: where nothing was measured
    preempt_ratio: float = math.inf  # MLF-H's lease-boundary preemption (mlfs/preempt.py)
    max_candidates: int | None = None  # None: the model's trained queue (module docstring)

    def __post_init__(self) -> None:
        if not self.preempt_ratio >= 1.0:
            raise ValueError(f"preempt_ratio must be >= 1, got {self.preempt_ratio}")
        if self.max_candidates is not None and self.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {self.max_candidates}")
        if self.network is None:
            self.network, self.meta = load_model(self.model_path)
        if self.max_candidates is None:
            self.max_candidates = trained_queue(self.meta) or DEFAULT_MAX_CANDIDATES
        self._frozen = FrozenPointer(self.network)  # inference in NumPy (network.py)
        self._memory = Memory(self.config)  # kept inputs; changes no decision (cycle.py)
        self._agents = Eq6Priorities(self.config)  # Decision.priorities (ranks.py)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        decision = keep_off(self._plan, snapshot, self.config.h_r, self.retreat_hold_s)
        if self._agents.config is not self.config:
            self._agents = Eq6Priorities(self.config)
        return self._agents.add_to(snapshot, decision)  # Eq. 6 for the agents (ranks.py)

    def _plan(self, snapshot: ClusterSnapshot) -> Decision:
        """One cycle (:func:`.cycle.plan`) with this policy as the chooser."""
        return plan(
            snapshot,
            self,
            self.config,
            resources=self.resources,
            lease_s=self.lease_s,
            load_control=self.load_control,
            memory=self._memory,
            preempt_ratio=self.preempt_ratio,
            max_candidates=self.max_candidates,
        )

    def choose(self, step: Step) -> int:
        """The step's answer: argmax of the network's logits (hold is the last), as
        ``np.argmax(self._logits(step))`` gives it (``FrozenPointer.argmax``)."""
        return self._frozen.argmax(step.features, step.context)

    def _logits(self, step: Step) -> np.ndarray:
        return self._frozen.logits(step.features, step.context)
