"""Training MLF-RL in the simulator (MLFS §3.4, §4.1): ``mlsched mlfs-train``.

MLFS "initially runs MLF-H for a certain time period and uses the data to train" MLF-RL, and
switches to it "when it is well trained (converged)". Here:

1. **Workload.** A trace slice (``--limit``) with MLFS job features (urgency, model-parallel
   graphs, resource demands, required accuracy; ``simulate --mlfs-features``). Its last
   ``validation_jobs`` jobs are held out for validation; the others are cut into training
   episodes of ``episode_jobs`` consecutive jobs.
2. **Imitation (phase 1).** MLF-H (:class:`~controller.policy.mlfs.policy.MlfhPolicy`) runs
   ``imitation_episodes`` training episodes in the simulator. At each of its cycles the MLF-RL
   cycle (:func:`~controller.policy.mlfs.rl.cycle.plan`) replays the snapshot with MLF-H's
   chooser and records every step (the candidates' features and MLF-H's choice); the share of
   cycles where the replay equals MLF-H's own decision is logged. The network is fitted to
   these choices by cross-entropy (``imitation_epochs`` passes), its value head to the
   episodes' returns (below).
3. **Policy gradient (phase 2).** Each epoch runs ``episodes_per_epoch`` training episodes with
   the network *sampling* its choices, computes each cycle's reward (Eq. 7, :func:`cycle_rewards`)
   from the simulated outcome, gives every step of cycle ``t`` the discounted return over a
   window, ``Σ_{i=0}^{m} η^i r_{t+i}`` (§3.4, ``window`` cycles, η = 0.95), standardises the
   returns per episode, and takes REINFORCE steps with the value head as baseline (advantage =
   standardised return - value, centred and scaled per batch), an entropy bonus and a value
   loss.
4. **Validation.** After imitation and after every epoch the network runs deterministically
   (argmax, the ``mlf-rl`` policy) on the held-out jobs; its *validation reward* is the
   episode's Eq. 7 total (:func:`episode_objectives`). After ``min_epochs`` epochs, training
   stops when the relative change of the validation reward stayed below ``tolerance`` for
   ``patience`` consecutive epochs (converged), or after ``epochs``; the network of the best
   validation reward (the imitation's included) is kept.

Reward (Eq. 7, β = (0.5, 0.55, 0.25, 0.15, 0.15), §4.1). Eq. 1's objectives are made additive
over cycles and dimensionless, so that a cycle's reward can be credited to the decisions before
it and the episode's rewards sum to the episode's objectives:

* g1, JCT: ``-(job-seconds spent in the system during the cycle) / (N T)``, N the episode's
  jobs and T their mean trace duration; over the episode ``-mean JCT / T``, a monotone form of
  Eq. 1's ``1 / mean JCT``;
* g2, deadlines: jobs ending in the cycle by their earliest deadline / jobs with a deadline;
* g3, bandwidth: ``-(GB sent between servers in the cycle) / (GB if every communication edge
  crossed servers)``; over the episode minus the share of the worst case, a monotone form of
  Eq. 1's ``1 / Σ B``;
* g4, accuracy guarantee: jobs ending in the cycle at their required accuracy / jobs with one;
* g5, accuracy: the accuracy by the deadline of the jobs ending in the cycle / jobs with one.

A job's end is credited to the cycle it ends in; its bandwidth to the cycles it sent it in (by
its iterations on each placement, from the snapshots). All random draws come from ``seed``
(initial weights, sampling, episode order); the simulator is deterministic, so a seed fixes
the model. Run with one torch thread (the command sets it) for bit-identical results.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.mlfs.config import (
    MlfsConfig,
    add_mlfs_param_option,
    changed_params,
    parse_mlfs_params,
)
from controller.policy.mlfs.jobs import task_graph
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.mlfs.rl.cycle import MlfhChooser, Step, plan
from controller.policy.mlfs.rl.policy import MlfRlPolicy, training_queue
from mlsched.model import MlfsSpec
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.types import JobModel, SimResult, TraceJob

if TYPE_CHECKING:  # torch is imported when training starts: ``mlsched`` itself starts fast
    import torch

    from controller.policy.mlfs.rl.network import FrozenPointer, PointerNet

BETAS = (0.5, 0.55, 0.25, 0.15, 0.15)  # MLFS §4.1: β_1 .. β_5 of Eq. 7
ETA = 0.95  # MLFS §4.1: η, the discount of future rewards


@dataclass(frozen=True)
class TrainConfig:
    """How to train (module docstring); every count >= 1 unless said otherwise."""

    seed: int = 0
    epochs: int = 40  # most policy-gradient epochs (0: imitation only)
    min_epochs: int = 15  # policy-gradient epochs before the convergence test applies
    imitation_episodes: int = 9  # (at most the training episodes there are)
    imitation_epochs: int = 20
    imitation_batch_steps: int = 64  # steps per gradient step in imitation
    episode_jobs: int = 200
    episodes_per_epoch: int = 4
    validation_jobs: int = 200
    hidden: int = 64
    lr: float = 2e-3
    imitation_lr: float = 3e-3
    batch_steps: int = 128  # steps per gradient step
    entropy: float = 0.01  # entropy bonus weight
    value: float = 0.5  # value-loss weight
    window: int = 30  # cycles in a decision's return (the paper's t_m)
    eta: float = ETA
    betas: tuple[float, float, float, float, float] = BETAS
    tolerance: float = 0.01  # convergence: relative change of the validation reward ...
    patience: int = 3  # ... below tolerance this many epochs in a row

    @property
    def queue(self) -> int:
        """The most candidates a step offers in training and validation
        (:func:`~controller.policy.mlfs.rl.policy.training_queue`, the rule ``MlfRlPolicy``
        applies to the model's meta)."""
        return training_queue(self.episode_jobs, self.validation_jobs)

    def __post_init__(self) -> None:
        for name in (
            "imitation_episodes",
            "imitation_epochs",
            "imitation_batch_steps",
            "episode_jobs",
            "episodes_per_epoch",
            "validation_jobs",
            "batch_steps",
            "window",
            "patience",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("epochs", "min_epochs"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.hidden < 2:
            raise ValueError(f"hidden must be >= 2, got {self.hidden}")
        for name in ("lr", "imitation_lr", "tolerance"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("entropy", "value"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.eta <= 1:
            raise ValueError(f"eta must be in (0, 1], got {self.eta}")
        if len(self.betas) != 5 or not all(b >= 0 for b in self.betas):
            raise ValueError(f"betas must be five weights >= 0, got {self.betas}")


@dataclass(frozen=True)
class EpochLog:
    epoch: int  # 0: after imitation
    phase: str  # "imitation" or "reinforce"
    train_reward: float | None  # mean Eq. 7 total of the epoch's training episodes
    validation_reward: float
    steps: int  # decision steps trained on
    loss: float
    entropy: float | None
    seconds: float
    validation_holds: float = 0.0  # share of validation steps answered "hold"
    validation_deviations: float = 0.0  # share that picked another job than MLF-H would


def _epoch_log(
    epoch: int,
    phase: str,
    train_reward: float | None,
    check: Validation,
    steps: int,
    loss: float,
    entropy: float | None,
    started: float,
) -> EpochLog:
    """The epoch's record; ``started`` is its ``time.perf_counter()`` at the start."""
    taken = max(1, check.steps)
    return EpochLog(
        epoch,
        phase,
        train_reward,
        check.reward,
        steps,
        loss,
        entropy,
        time.perf_counter() - started,
        check.holds / taken,
        check.deviations / taken,
    )


@dataclass
class TrainResult:
    network: PointerNet  # the best by validation reward
    history: list[EpochLog]
    best_epoch: int
    converged: bool
    mlfh_validation_reward: float
    teacher_agreement: float  # share of MLF-H's cycles the replay reproduced
    meta: dict = field(default_factory=dict)


# --- the reward (Eq. 7) ---------------------------------------------------------------------


def episode_objectives(result: SimResult) -> tuple[float, float, float, float, float]:
    """(g1 .. g5) of a whole episode, as the module docstring defines them."""
    records = result.records
    if not records:
        return (0.0, 0.0, 0.0, 0.0, 0.0)
    end = _episode_end(result)
    unit = _mean_duration(records)
    jct = [(r.end_s if r.end_s is not None else end) - r.job.submit_s for r in records]
    g1 = -sum(jct) / len(records) / unit
    with_deadline = [r for r in records if r.job.deadlines]
    met = [_met_deadline(r) for r in with_deadline]
    g2 = sum(met) / len(with_deadline) if with_deadline else 0.0
    worst = sum(_worst_gb(r.job) for r in records)
    g3 = -sum(r.bandwidth_gb for r in records) / worst if worst > 0 else 0.0
    required = [r for r in records if _required(r.job) is not None]
    g4 = sum(_met_accuracy(r) for r in required) / len(required) if required else 0.0
    reached = [r.accuracy_by_deadline for r in records if r.accuracy_by_deadline is not None]
    g5 = sum(reached) / len(reached) if reached else 0.0
    return (g1, g2, g3, g4, g5)


def episode_reward(result: SimResult, betas: Sequence[float] = BETAS) -> float:
    """Eq. 7 over the whole episode: Σ β_i g_i."""
    return float(sum(b * g for b, g in zip(betas, episode_objectives(result), strict=True)))


def cycle_rewards(
    result: SimResult,
    cycles: Sequence[float],
    bandwidth: Sequence[dict[str, float]] = (),
    betas: Sequence[float] = BETAS,
) -> np.ndarray:
    """r_t of Eq. 7 for each cycle (at the times ``cycles``, ascending): the objectives of
    the interval up to the next cycle (the last runs to the episode's end). ``bandwidth[t]``
    estimates the GB each job sent between servers during interval ``t``; each job's recorded
    total is spread in those proportions (at its end when there is no estimate). The rewards
    sum to :func:`episode_reward`."""
    count = len(cycles)
    if count == 0:
        return np.zeros(0)
    records = result.records
    lo = np.asarray(cycles, dtype=float)
    end = max(_episode_end(result), float(lo[-1]))
    hi = np.append(lo[1:], end)
    hi[-1] = end
    lo = lo.copy()
    lo[0] = min(lo[0], min((r.job.submit_s for r in records), default=lo[0]))
    n = max(1, len(records))
    unit = _mean_duration(records)
    parts = np.zeros((5, count))
    submit = np.array([r.job.submit_s for r in records], dtype=float)
    done = np.array([r.end_s if r.end_s is not None else end for r in records], dtype=float)
    # g1: job-seconds in the system per interval
    for start in range(0, len(records), 256):
        s, d = submit[start : start + 256, None], done[start : start + 256, None]
        overlap = np.minimum(d, hi[None, :]) - np.maximum(s, lo[None, :])
        parts[0] -= np.clip(overlap, 0.0, None).sum(axis=0)
    parts[0] /= n * unit
    ended = np.clip(np.searchsorted(lo, done, side="right") - 1, 0, count - 1)
    with_deadline = sum(1 for r in records if r.job.deadlines)
    required = sum(1 for r in records if _required(r.job) is not None)
    reached = sum(1 for r in records if r.accuracy_by_deadline is not None)
    worst = sum(_worst_gb(r.job) for r in records)
    sent: dict[str, list[tuple[int, float]]] = {}
    for t, per_job in enumerate(bandwidth[:count]):
        for job_id, gb in per_job.items():
            if gb > 0:
                sent.setdefault(job_id, []).append((t, gb))
    for i, r in enumerate(records):
        t = int(ended[i])
        if r.job.deadlines and _met_deadline(r):
            parts[1, t] += 1.0 / with_deadline
        if _required(r.job) is not None and _met_accuracy(r):
            parts[3, t] += 1.0 / required
        if r.accuracy_by_deadline is not None:
            parts[4, t] += r.accuracy_by_deadline / reached
        if worst > 0 and r.bandwidth_gb > 0:
            shares = sent.get(r.job.id)
            if shares:
                estimated = sum(gb for _, gb in shares)
                for when, gb in shares:
                    parts[2, when] -= r.bandwidth_gb * gb / estimated / worst
            else:
                parts[2, t] -= r.bandwidth_gb / worst
    return np.asarray(betas, dtype=float) @ parts


def discounted_returns(rewards: np.ndarray, eta: float, window: int) -> np.ndarray:
    """``G_t = Σ_{i=0}^{window} η^i r_{t+i}`` (cut at the episode's end)."""
    weights = eta ** np.arange(window + 1)
    padded = np.append(rewards, np.zeros(window))
    return np.array([padded[t : t + window + 1] @ weights for t in range(len(rewards))])


def _episode_end(result: SimResult) -> float:
    ends = [r.end_s for r in result.records if r.end_s is not None]
    submits = [r.job.submit_s for r in result.records]
    return max(ends + submits, default=0.0)


def _mean_duration(records: Sequence) -> float:
    durations = [r.job.duration_s for r in records if r.job.duration_s > 0]
    return sum(durations) / len(durations) if durations else 1.0


def _met_deadline(record) -> bool:  # type: ignore[no-untyped-def]
    first = min(d.seconds_after_submit for d in record.job.deadlines)
    return record.jct_s is not None and record.jct_s <= first


def _required(job: TraceJob) -> float | None:
    return None if job.mlfs is None else job.mlfs.required_accuracy


def _met_accuracy(record) -> bool:  # type: ignore[no-untyped-def]
    required = _required(record.job)
    return (
        record.final_metric is not None
        and required is not None
        and (record.final_metric >= required)
    )


def _worst_gb(job: TraceJob) -> float:
    """GB the job would send if every communication edge crossed servers."""
    demand = job.demand
    if demand is None or job.gpus < 2:
        return 0.0
    _, children = task_graph(job.gpus, job.mlfs or MlfsSpec())
    edges = sum(len(c) for c in children)
    per_iteration = job.gpus * demand.ring_mb + edges * demand.pipeline_mb
    return max(1, job.iterations) * per_iteration / 1000.0


def _cross_mb(view: JobView, job: TraceJob) -> float:
    """MB the job sends between servers per iteration on its placement (as the engine)."""
    demand = job.demand
    node = {p.rank: p.node_id for p in view.placement}
    ranks = sorted(node)
    count = len(ranks)
    if demand is None or count < 2:
        return 0.0
    ring = sum(node[ranks[i]] != node[ranks[(i + 1) % count]] for i in range(count))
    _, children = task_graph(count, view.spec.mlfs)
    pipeline = sum(node[ranks[k]] != node[ranks[c]] for k in range(count) for c in children[k])
    return ring * demand.ring_mb + pipeline * demand.pipeline_mb


# --- episodes -------------------------------------------------------------------------------


@dataclass
class _Steps:
    """Recorded steps: features per step, context, the answer, and the cycle."""

    features: list[np.ndarray] = field(default_factory=list)
    contexts: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    cycles: list[int] = field(default_factory=list)

    def add(self, step: Step, action: int, cycle: int) -> None:
        self.features.append(step.features)
        self.contexts.append(step.context)
        self.actions.append(action)
        self.cycles.append(cycle)

    def extend(self, other: _Steps) -> None:
        self.features += other.features
        self.contexts += other.contexts
        self.actions += other.actions
        self.cycles += other.cycles

    def __len__(self) -> int:
        return len(self.actions)


class _Teacher:
    """MLF-H's choices, recorded."""

    def __init__(self) -> None:
        self.steps = _Steps()
        self.cycle = 0
        self._mlfh = MlfhChooser()

    def choose(self, step: Step) -> int:
        action = self._mlfh.choose(step)
        self.steps.add(step, action, self.cycle)
        return action


class _Sampler:
    """The network's choices, drawn from its softmax, recorded."""

    def __init__(self, frozen: FrozenPointer, rng: np.random.Generator) -> None:
        self.steps = _Steps()
        self.cycle = 0
        self._frozen = frozen
        self._rng = rng

    def choose(self, step: Step) -> int:
        logits = self._frozen.logits(step.features, step.context)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        action = int(self._rng.choice(len(p), p=p))
        self.steps.add(step, action, self.cycle)
        return action


class _Episode:
    """A policy for one training episode: runs ``chooser`` through the MLF-RL cycle (or MLF-H
    itself, with ``teacher``), and notes each cycle's time and the traffic bookkeeping."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        chooser: _Teacher | _Sampler,
        config: MlfsConfig,
        teacher: MlfhPolicy | None = None,
        max_candidates: int | None = None,
    ) -> None:
        self.name = "mlf-h" if teacher is not None else "mlf-rl-train"
        self._jobs = {j.id: j for j in jobs}
        self._chooser = chooser
        self._config = config
        self._teacher = teacher
        self._max_candidates = max_candidates
        self.cycles: list[float] = []
        self.agreed = 0
        self._last: dict[str, tuple[int, int, float]] = {}  # job -> attempt, iteration, MB
        self.bandwidth: list[dict[str, float]] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self._note_traffic(snapshot)
        self._chooser.cycle = len(self.cycles)
        self.cycles.append(snapshot.now)
        replay = plan(snapshot, self._chooser, self._config, max_candidates=self._max_candidates)
        if self._teacher is None:
            return replay
        decision = self._teacher.decide(snapshot)
        self.agreed += _same(decision, replay)
        return decision

    def _note_traffic(self, snapshot: ClusterSnapshot) -> None:
        """GB each job sent between servers since the previous cycle, for that interval."""
        now: dict[str, tuple[int, int, float]] = {}
        sent: dict[str, float] = {}
        for view in snapshot.active:
            job = self._jobs.get(view.id)
            if job is None or job.demand is None or len(view.placement) < 2:
                continue
            now[view.id] = (view.attempt, view.iteration, _cross_mb(view, job))
            before = self._last.get(view.id)
            if before is not None and before[0] == view.attempt and before[2] > 0:
                sent[view.id] = max(0, view.iteration - before[1]) * before[2] / 1000.0
        if self.cycles:
            self.bandwidth.append(sent)
        self._last = now


def _same(a: Decision, b: Decision) -> bool:
    def key(d: Decision) -> tuple:
        return (
            d.launch,
            tuple((m.job_id, m.placement) for m in d.migrate),
            sorted(s.job_id for s in d.suspend),
            sorted(r.job_id for r in d.renew),
        )

    return key(a) == key(b)


@dataclass
class _Run:
    result: SimResult
    steps: _Steps
    returns: np.ndarray  # per step
    reward: float  # the episode's Eq. 7 total


def _run_episode(
    jobs: Sequence[TraceJob],
    sampler: _Sampler,
    shape: ClusterShape,
    model: JobModel,
    sim: SimConfig,
    config: TrainConfig,
    mlfs: MlfsConfig | None = None,
) -> _Run:
    """One sampled episode, its rewards and each step's discounted return; ``mlfs``: the
    MLFS parameters the cycle runs with (None: the paper's)."""
    episode = _Episode(jobs, sampler, mlfs or MlfsConfig(), max_candidates=config.queue)
    result = Simulation(jobs, episode, shape, model, sim).run()
    returns = _step_returns(result, episode, sampler.steps, config)
    return _Run(result, sampler.steps, returns, episode_reward(result, config.betas))


def _step_returns(
    result: SimResult, episode: _Episode, steps: _Steps, config: TrainConfig
) -> np.ndarray:
    """Each recorded step's return: its cycle's discounted reward over the window."""
    bandwidth = [*episode.bandwidth, {}]
    rewards = cycle_rewards(result, episode.cycles, bandwidth, config.betas)
    by_cycle = discounted_returns(rewards, config.eta, config.window)
    return by_cycle[np.asarray(steps.cycles, dtype=int)] if len(steps) else np.zeros(0)


@dataclass(frozen=True)
class Validation:
    reward: float  # Eq. 7 total of the episode
    steps: int  # decision steps taken
    holds: int  # steps answered "hold"
    deviations: int  # steps that picked another job than MLF-H's first choice


def validate(
    network: PointerNet,
    jobs: Sequence[TraceJob],
    shape: ClusterShape,
    model: JobModel,
    sim: SimConfig | None = None,
    betas: Sequence[float] = BETAS,
    mlfs: MlfsConfig | None = None,
    max_candidates: int | None = None,
) -> Validation:
    """The deterministic ``mlf-rl`` policy over ``jobs`` (with the MLFS parameters ``mlfs``;
    None: the paper's; ``max_candidates`` per step, None: the policy's default): its Eq. 7
    total and its choices."""
    counts = [0, 0, 0]

    class Counting(MlfRlPolicy):
        def choose(self, step: Step) -> int:
            answer = super().choose(step)
            counts[0] += 1
            counts[1] += answer == step.hold
            counts[2] += answer != step.hold and answer != MlfhChooser().choose(step)
            return answer

    policy = Counting(network=network, config=mlfs or MlfsConfig(), max_candidates=max_candidates)
    result = Simulation(jobs, policy, shape, model, sim or SimConfig()).run()
    return Validation(episode_reward(result, betas), *counts)


# --- updates --------------------------------------------------------------------------------


def _batches(count: int, size: int, rng: random.Random) -> list[list[int]]:
    order = list(range(count))
    rng.shuffle(order)
    return [order[i : i + size] for i in range(0, count, size)]


def _evaluate(
    net: PointerNet, steps: _Steps, index: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(log-prob of the recorded answer, entropy, value) of the given steps."""
    import torch

    from controller.policy.mlfs.rl.network import step_log_probs

    counts = [steps.features[i].shape[0] for i in index]
    rows = torch.from_numpy(np.concatenate([steps.features[i] for i in index]))
    contexts = torch.from_numpy(np.stack([steps.contexts[i] for i in index]))
    segments = torch.repeat_interleave(torch.arange(len(index)), torch.tensor(counts))
    scores, hold, values = net.packed(rows, contexts, segments)
    row_lp, hold_lp = step_log_probs(scores, hold, segments)
    offsets = torch.tensor(np.cumsum([0, *counts[:-1]]), dtype=torch.long)
    actions = torch.tensor([steps.actions[i] for i in index], dtype=torch.long)
    sizes = torch.tensor(counts, dtype=torch.long)
    held = actions >= sizes
    picked = row_lp[offsets + torch.minimum(actions, sizes - 1)]
    chosen = torch.where(held, hold_lp, picked)
    entropy = -(
        torch.zeros(len(index)).index_add(0, segments, row_lp.exp() * row_lp)
        + hold_lp.exp() * hold_lp
    )
    return chosen, entropy, values


def _standardised(returns: np.ndarray) -> np.ndarray:
    """An episode's step returns centred and scaled: what the value head predicts and the
    advantage is measured against, so that episodes of lighter or heavier load weigh alike."""
    scale = float(returns.std()) or 1.0
    return (returns - returns.mean()) / scale


def _tensor(values: np.ndarray) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.ascontiguousarray(values)).float()


def _imitate(
    net: PointerNet, steps: _Steps, returns: np.ndarray, config: TrainConfig, rng: random.Random
) -> tuple[float, float]:
    """Cross-entropy passes over MLF-H's choices, the value head fitted to MLF-H's
    (standardised) returns on the way: (last pass's mean cross-entropy, top-choice accuracy)."""
    import torch

    optimizer = torch.optim.Adam(net.parameters(), lr=config.imitation_lr)
    target = _tensor(returns)
    loss_sum, hits = 0.0, 0
    for _ in range(config.imitation_epochs):
        loss_sum, hits = 0.0, 0
        for index in _batches(len(steps), config.imitation_batch_steps, rng):
            chosen, _, values = _evaluate(net, steps, index)
            g = target[torch.tensor(index)]
            cross_entropy = -chosen.mean()
            loss = cross_entropy + config.value * ((values - g) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += cross_entropy.item() * len(index)
            hits += int((chosen.detach() > math.log(0.5)).sum())
    return loss_sum / max(1, len(steps)), hits / max(1, len(steps))


def _reinforce(
    net: PointerNet,
    optimizer: torch.optim.Optimizer,
    steps: _Steps,
    returns: np.ndarray,
    config: TrainConfig,
    rng: random.Random,
) -> tuple[float, float]:
    """One REINFORCE pass with the value baseline: (mean loss, mean entropy)."""
    import torch

    target = _tensor(returns)
    loss_sum, entropy_sum = 0.0, 0.0
    for index in _batches(len(steps), config.batch_steps, rng):
        chosen, entropy, values = _evaluate(net, steps, index)
        g = target[torch.tensor(index)]
        advantage = g - values.detach()
        if len(index) > 1:  # centred and scaled within the batch
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        loss = (
            -(chosen * advantage).mean()
            + config.value * ((values - g) ** 2).mean()
            - config.entropy * entropy.mean()
        )
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        optimizer.step()
        loss_sum += loss.item() * len(index)
        entropy_sum += float(entropy.detach().sum())
    return loss_sum / max(1, len(steps)), entropy_sum / max(1, len(steps))


# --- the loop -------------------------------------------------------------------------------


def split(
    jobs: Sequence[TraceJob], config: TrainConfig
) -> tuple[list[list[TraceJob]], list[TraceJob]]:
    """(training episodes, validation jobs): the last ``validation_jobs`` jobs by submission
    are held out; the rest are cut into episodes of ``episode_jobs`` (a short tail joins the
    last one)."""
    ordered = sorted(jobs, key=lambda j: j.submit_s)
    if len(ordered) < config.validation_jobs + config.episode_jobs:
        raise ValueError(
            f"{len(ordered)} jobs: need at least validation_jobs + episode_jobs = "
            f"{config.validation_jobs + config.episode_jobs}"
        )
    held_out = ordered[-config.validation_jobs :]
    rest = ordered[: -config.validation_jobs]
    size = config.episode_jobs
    episodes = [rest[i : i + size] for i in range(0, len(rest) - len(rest) % size, size)]
    if len(rest) % size:
        episodes[-1] = episodes[-1] + rest[len(rest) - len(rest) % size :]
    return episodes, held_out


def converged(rewards: Sequence[float], tolerance: float, patience: int) -> bool:
    """Whether the last ``patience`` relative changes of ``rewards`` are all below
    ``tolerance`` (relative to the earlier value's magnitude)."""
    if len(rewards) < patience + 1:
        return False
    tail = rewards[-(patience + 1) :]
    return all(abs(b - a) <= tolerance * max(abs(a), 1e-12) for a, b in itertools.pairwise(tail))


def train(
    jobs: Sequence[TraceJob],
    model: JobModel,
    shape: ClusterShape,
    config: TrainConfig | None = None,
    sim: SimConfig | None = None,
    log: Callable[[str], None] = print,
    mlfs: MlfsConfig | None = None,
) -> TrainResult:
    """Imitation of MLF-H, then REINFORCE until the validation reward converges; ``mlfs``:
    the MLFS parameters of the teacher, the episodes and the validation (None: the paper's),
    so a model is trained for the parameters it will run with."""
    import torch

    from controller.policy.mlfs.rl.network import FrozenPointer, PointerNet

    config = config or TrainConfig()
    sim = sim or SimConfig()
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    sampling = np.random.default_rng(config.seed)
    mlfs = mlfs or MlfsConfig()
    episodes, held_out = split(jobs, config)
    started = time.perf_counter()
    log(
        f"{len(jobs)} jobs: {len(episodes)} training episodes, {len(held_out)} validation "
        f"jobs, cluster {shape.nodes}x{shape.gpus_per_node}"
    )
    reference = episode_reward(
        Simulation(held_out, MlfhPolicy(config=mlfs), shape, model, sim).run(), config.betas
    )
    log(f"MLF-H validation reward {reference:.4f}")

    net = PointerNet(config.hidden)
    demos = _Steps()
    demo_returns: list[np.ndarray] = []
    cycles = agreed = 0
    for jobs_i in episodes[: config.imitation_episodes]:
        teacher = _Teacher()
        episode = _Episode(jobs_i, teacher, mlfs, MlfhPolicy(config=mlfs), config.queue)
        result = Simulation(jobs_i, episode, shape, model, sim).run()
        demos.extend(teacher.steps)
        demo_returns.append(_standardised(_step_returns(result, episode, teacher.steps, config)))
        cycles += len(episode.cycles)
        agreed += episode.agreed
    agreement = agreed / max(1, cycles)
    loss, accuracy = _imitate(net, demos, np.concatenate(demo_returns), config, rng)
    check = validate(net, held_out, shape, model, sim, config.betas, mlfs, config.queue)
    value = check.reward
    history = [_epoch_log(0, "imitation", None, check, len(demos), loss, None, started)]
    log(
        f"epoch 0 imitation: {len(demos)} MLF-H steps ({agreement:.1%} of cycles replayed "
        f"exactly), cross-entropy {loss:.4f}, top-choice accuracy {accuracy:.1%}, "
        f"validation reward {value:.4f}{_choices(check)}"
    )
    best = (value, 0, _copy(net))
    optimizer = torch.optim.Adam(net.parameters(), lr=config.lr)
    order: list[int] = []
    done = False
    for epoch in range(1, config.epochs + 1):
        tick = time.perf_counter()
        batch = _Steps()
        returns: list[np.ndarray] = []
        rewards: list[float] = []
        for _ in range(config.episodes_per_epoch):
            if not order:
                order = list(range(len(episodes)))
                rng.shuffle(order)
            jobs_i = episodes[order.pop()]
            sampler = _Sampler(FrozenPointer(net), sampling)
            run = _run_episode(jobs_i, sampler, shape, model, sim, config, mlfs)
            batch.extend(run.steps)
            returns.append(_standardised(run.returns))
            rewards.append(run.reward)
        loss, entropy = (0.0, 0.0)
        if len(batch):
            loss, entropy = _reinforce(net, optimizer, batch, np.concatenate(returns), config, rng)
        check = validate(net, held_out, shape, model, sim, config.betas, mlfs, config.queue)
        value = check.reward
        history.append(
            _epoch_log(
                epoch, "reinforce", float(np.mean(rewards)), check, len(batch), loss, entropy, tick
            )
        )
        previous = history[-2].validation_reward
        change = abs(value - previous) / max(abs(previous), 1e-12)
        log(
            f"epoch {epoch} reinforce: train reward {np.mean(rewards):.4f} "
            f"({len(batch)} steps), loss {loss:.4f}, entropy {entropy:.3f}, "
            f"validation reward {value:.4f} (change {change:.1%}){_choices(check)}, "
            f"{time.perf_counter() - tick:.1f} s"
        )
        if value > best[0]:
            best = (value, epoch, _copy(net))
        rewards_so_far = [h.validation_reward for h in history]
        if epoch >= config.min_epochs and converged(
            rewards_so_far, config.tolerance, config.patience
        ):
            done = True
            log(f"converged after epoch {epoch}")
            break
    log(
        f"best validation reward {best[0]:.4f} at epoch {best[1]} "
        f"(MLF-H {reference:.4f}); {time.perf_counter() - started:.0f} s"
    )
    return TrainResult(best[2], history, best[1], done, reference, agreement)


def _choices(check: Validation) -> str:
    steps = max(1, check.steps)
    return f" [holds {check.holds / steps:.1%}, off MLF-H's choice {check.deviations / steps:.1%}]"


def _copy(net: PointerNet) -> PointerNet:
    from controller.policy.mlfs.rl.network import PointerNet

    twin = PointerNet(net.hidden)
    twin.load_state_dict(net.state_dict())
    twin.eval()
    return twin


# --- the command ----------------------------------------------------------------------------


def add_train_command(subparsers: argparse._SubParsersAction) -> None:
    defaults = TrainConfig()
    p = subparsers.add_parser(
        "mlfs-train",
        help="train an MLF-RL model in the simulator (MLFS §3.4)",
        description="Imitate MLF-H, then train by REINFORCE on Eq. 7's reward until the "
        "validation reward converges; write the best model to --out.",
    )
    p.add_argument("--trace", type=Path, required=True, help="Philly-format trace (CSV)")
    p.add_argument("--limit", type=int, help="only the first N jobs")
    p.add_argument("--out", type=Path, required=True, help="model file to write")
    p.add_argument("--seed", type=int, default=0, help="training seed [%(default)s]")
    p.add_argument("--epochs", type=int, default=defaults.epochs, help="[%(default)s]")
    p.add_argument("--min-epochs", type=int, default=defaults.min_epochs, help="[%(default)s]")
    p.add_argument(
        "--cluster", default="10x8", help="NODESxGPUS or C120/C96 [%(default)s: 80 GPUs]"
    )
    p.add_argument("--model-info", type=Path, help="per-model speeds (default: beside trace)")
    p.add_argument("--workload-seed", type=int, default=0, help="MLFS feature draws [%(default)s]")
    p.add_argument(
        "--no-mlfs-features",
        action="store_true",
        help="train without MLFS job features (urgency, graphs, demands, accuracy)",
    )
    p.add_argument("--episode-jobs", type=int, default=defaults.episode_jobs)
    p.add_argument("--episodes-per-epoch", type=int, default=defaults.episodes_per_epoch)
    p.add_argument("--validation-jobs", type=int, default=defaults.validation_jobs)
    p.add_argument("--imitation-episodes", type=int, default=defaults.imitation_episodes)
    p.add_argument("--imitation-epochs", type=int, default=defaults.imitation_epochs)
    p.add_argument("--lr", type=float, default=defaults.lr)
    p.add_argument("--entropy", type=float, default=defaults.entropy, help="entropy bonus weight")
    p.add_argument("--window", type=int, default=defaults.window, help="return window (cycles)")
    p.add_argument("--tolerance", type=float, default=defaults.tolerance)
    p.add_argument("--patience", type=int, default=defaults.patience)
    add_mlfs_param_option(p)
    p.add_argument("--history", type=Path, help="also write the per-epoch log here (JSON)")
    p.add_argument("--quiet", action="store_true", help="no per-epoch log")
    p.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    import torch

    from controller.policy.mlfs.rl.network import save_model
    from simulator.cli import job_model, load_workload, parse_cluster, warn_missing_table
    from simulator.jobmodel import UnknownModel
    from simulator.trace import TraceError

    name = "mlsched mlfs-train"
    try:
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        if not args.out.parent.is_dir():
            raise ValueError(f"--out: directory {args.out.parent} does not exist")
        config = TrainConfig(
            seed=args.seed,
            epochs=args.epochs,
            min_epochs=args.min_epochs,
            imitation_episodes=args.imitation_episodes,
            imitation_epochs=args.imitation_epochs,
            episode_jobs=args.episode_jobs,
            episodes_per_epoch=args.episodes_per_epoch,
            validation_jobs=args.validation_jobs,
            lr=args.lr,
            entropy=args.entropy,
            window=args.window,
            tolerance=args.tolerance,
            patience=args.patience,
        )
        shape = parse_cluster(args.cluster)
        mlfs = parse_mlfs_params(args.mlfs_param)
        workload = argparse.Namespace(
            trace=args.trace,
            format="philly",
            zero_gpu="one",
            columns=None,
            limit=args.limit,
            seed=args.workload_seed,
            density=1.0,
            assign_slo=None,
            performance_fraction=0.0,
            mlfs_features=not args.no_mlfs_features,
            mlfs_model_parallel=_model_parallel_default(),
            model_info=args.model_info,
            default_model=None,
        )
        model = job_model(workload)
        jobs = load_workload(workload, model)
        model.check_jobs(jobs)
        split(jobs, config)
    except (TraceError, UnknownModel, ValueError, OSError) as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    warn_missing_table(workload, model, name)
    torch.set_num_threads(1)  # reproducible sums, and no thread pool fighting for 2 cores
    log = (lambda _: None) if args.quiet else (lambda text: print(text, flush=True))
    log(f"speed model: {model.speed_model.describe()}")
    result = train(jobs, model, shape, config, log=log, mlfs=mlfs)
    history = [asdict(h) for h in result.history]
    meta = {
        "trained_with": "mlsched mlfs-train",
        "trace": args.trace.name,
        "limit": args.limit,
        "cluster": args.cluster,
        "seed": args.seed,
        "workload_seed": args.workload_seed,
        "mlfs_features": not args.no_mlfs_features,
        "mlfs_params": changed_params(mlfs),
        "speed_model": model.speed_model.kind,
        "config": {k: v for k, v in asdict(config).items() if k != "betas"},
        "betas": list(config.betas),
        "best_epoch": result.best_epoch,
        "converged": result.converged,
        "mlfh_validation_reward": result.mlfh_validation_reward,
        "teacher_agreement": result.teacher_agreement,
        "history": history,
    }
    save_model(args.out, result.network, meta)
    if args.history:
        args.history.write_text(json.dumps(meta, indent=2) + "\n")
    if not args.quiet:
        print(f"wrote {args.out}")
    return 0


def _model_parallel_default() -> float:
    from simulator.workload import MODEL_PARALLEL_FRACTION

    return MODEL_PARALLEL_FRACTION
