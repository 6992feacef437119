"""The Chic simulation (§4.2, §6.1; issue 16): PS jobs of :mod:`simulator.ps` arriving as a
:mod:`simulator.chic_workload` sequence on Chic's cluster, scheduled by a Chic agent (rescheduling
only when a visible job finishes or a job arrives while fewer than I are in the system) or by
Optimus' greedy every ``interval_s``.

Chic episode, per schedule: a decision-making phase (:class:`~controller.policy.chic.phase.Phase`,
its steps take no simulated time: ours, the paper's 0.78 ms), then a training phase of D_t
seconds: the earliest finish of the visible jobs, or (fewer than I jobs) the next arrival if
sooner. Ours: when no visible job progresses D_t is the next arrival, else one reward unit
(20 minutes). r1 (Eq. 8) in 20-minute units; s^B falls by floor(D_t / g) (Eq. 7).

Optimus episode: a round at every ``interval_s`` (at once when a job arrives to an idle
cluster); jobs arriving between rounds wait; a job's progress is Eq. 7's floor over each round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from controller.policy.chic.greedy import GreedyJob, allocate
from controller.policy.chic.network import ArrayNet
from controller.policy.chic.phase import Phase, SlotJob
from simulator.chic_workload import ChicJob
from simulator.ps import CHIC_CLUSTER, MODELS, PsModel

UNIT_S = 1200.0  # Chic §6.1: r1 in units of 20 minutes
REF_S = 30.0  # ar: remaining work is fed as iterations of 30 s on one GPU
Chooser = Callable[[np.ndarray, Phase], int]
_EPS = 1e-9
MAX_SCHEDULES_PER_JOB = 5  # ours: an episode ends (jobs left count as done now) past this


@dataclass
class Episode:
    reward: float = 0.0
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    completion_s: list[float] = field(default_factory=list)
    schedules: int = 0
    decide_s: float = 0.0  # time spent deciding, by the clock passed in (0 without one)

    @property
    def act_s(self) -> float:
        """Average completion time (ACT), seconds."""
        return float(np.mean(self.completion_s)) if self.completion_s else 0.0


def time_fn(kind: str, model: PsModel) -> Callable[[int, int], float]:
    if kind == "ar":
        return lambda w, p: model.allreduce_time(w)
    return model.iteration_time


def slot_job(kind: str, model: PsModel, remaining: float) -> SlotJob:
    """A job as the phase sees it: Chic's one-hot model and s^B, or (``ar``) model-free
    features: the speed-up at 2 and 4 GPUs less one, and the remaining work as iterations of
    ``REF_S`` seconds on one GPU."""
    ps = (0.0, 0.0, 0.0) if kind == "ar" else model.ps
    g = time_fn(kind, model)
    if kind == "ar":
        one = g(1, 0)
        features: tuple[float, ...] = (one / g(2, 0) - 1.0, one / g(4, 0) - 1.0)
        return SlotJob(features, remaining * one / REF_S, model.worker, ps, g)
    onehot = tuple(1.0 if m is model else 0.0 for m in MODELS)
    return SlotJob(onehot, remaining, model.worker, ps, g)


def sampler(net: ArrayNet, rng: np.random.Generator) -> Chooser:
    """Actions drawn from π'(a|s) (training trajectories)."""

    def choose(state: np.ndarray, phase: Phase) -> int:
        p = net.probabilities(state)
        return int(rng.choice(len(p), p=p))

    return choose


def uniform(rng: np.random.Generator) -> Chooser:
    """Actions uniform on A (Algorithm 1, line 7)."""
    return lambda state, phase: int(rng.integers(phase.void + 1))


def greedy(net: ArrayNet) -> Chooser:
    """The most probable action that the phase would carry out (ours: at test time a refused
    action is masked, since repeating it would change nothing)."""

    def choose(state: np.ndarray, phase: Phase) -> int:
        z = net.logits(state)
        order = np.argsort(-z, kind="stable")
        return int(next(a for a in order if phase.valid(int(a))))

    return choose


def marginal_gain(state: np.ndarray, phase: Phase) -> int:
    """A teacher for the warm start (ours, ``chic-train --imitate``): the carried-out action
    that lowers a job's remaining time ``s^B g`` the most (giving a job its missing role first),
    the void action when none does."""
    best, choice = 0.0, phase.void
    for action in range(phase.void):
        if not phase.valid(action):
            continue
        i, w, p = phase.delta(action)  # type: ignore[misc]
        job = phase.jobs[i]
        now = job.time(phase.workers[i], phase.servers[i])
        new = job.time(phase.workers[i] + w, phase.servers[i] + p)
        if math.isinf(now):
            gain = 2e12 if not math.isinf(new) else 1e12
        else:
            gain = job.remaining * (now - new)
        if gain > best:
            best, choice = gain, action
    return choice


def run_chic(
    jobs: Sequence[ChicJob],
    choose: Chooser,
    kind: str = "ps",
    slots: int = 3,
    capacity: Sequence[float] = CHIC_CLUSTER,
    record: bool = True,
    clock: Callable[[], float] | None = None,
) -> Episode:
    """One episode of a Chic agent (module docstring)."""
    pending = sorted(jobs, key=lambda j: j.arrival_s)
    system: list[list] = []  # [job, remaining iterations], in arrival order
    ep = Episode()
    t, nxt = 0.0, 0
    while nxt < len(pending) or system:
        if ep.schedules >= MAX_SCHEDULES_PER_JOB * len(pending):  # ours: a stalled agent
            ep.completion_s += [t - j.arrival_s for j, _ in system]
            ep.completion_s += [t - j.arrival_s for j in pending[nxt:]]
            break
        if not system:
            t = max(t, pending[nxt].arrival_s)
        while nxt < len(pending) and pending[nxt].arrival_s <= t + _EPS:
            system.append([pending[nxt], pending[nxt].iterations])
            nxt += 1
        visible = system[:slots]
        backlog = len(system) - len(visible)
        began = clock() if clock else 0.0
        phase = Phase(
            kind,
            slots,
            [slot_job(kind, MODELS[j.model], b) for j, b in visible],
            capacity,
        )
        while not phase.finished():
            state = phase.encode(backlog)
            action = choose(state, phase)
            if record:
                ep.states.append(state)
                ep.actions.append(action)
            ep.reward += phase.apply(action)
        ep.decide_s += clock() - began if clock else 0.0
        ep.schedules += 1
        times = [
            time_fn(kind, MODELS[j.model])(w, p)
            for (j, _), w, p in zip(visible, phase.workers, phase.servers, strict=True)
        ]
        finish = min((b * g for (_, b), g in zip(visible, times, strict=True)), default=math.inf)
        arrival = pending[nxt].arrival_s - t if nxt < len(pending) else math.inf
        d = finish if len(system) >= slots else min(finish, arrival)
        if math.isinf(d):
            d = arrival if not math.isinf(arrival) else UNIT_S
        if math.isinf(finish) and len(system) >= slots:
            d = UNIT_S
        arrived = 0.0  # Eq. 8's sum of (D_t - A_j)
        while nxt < len(pending) and pending[nxt].arrival_s < t + d - _EPS:
            arrived += t + d - pending[nxt].arrival_s
            system.append([pending[nxt], pending[nxt].iterations])
            nxt += 1
        ep.reward -= (len(visible) * d + backlog * d + arrived) / UNIT_S  # r1, Eq. 8
        t += d
        for entry, g in zip(visible, times, strict=True):
            if not math.isinf(g):
                entry[1] = max(0, entry[1] - math.floor(d / g + _EPS))  # Eq. 7
        for entry in visible:
            if entry[1] <= 0:
                ep.completion_s.append(t - entry[0].arrival_s)
                system.remove(entry)
    return ep


def run_optimus(
    jobs: Sequence[ChicJob],
    interval_s: float = 600.0,
    kind: str = "ps",
    capacity: Sequence[float] = CHIC_CLUSTER,
    clock: Callable[[], float] | None = None,
) -> Episode:
    """One episode under Optimus' greedy (module docstring); ``schedules`` counts rounds."""
    pending = sorted(jobs, key=lambda j: j.arrival_s)
    system: list[list] = []  # [job, remaining (float), (w, p)]
    ep = Episode()
    t, nxt, round_at = 0.0, 0, 0.0
    while nxt < len(pending) or system:
        if not system:
            t = round_at = max(t, pending[nxt].arrival_s)
        while nxt < len(pending) and pending[nxt].arrival_s <= t + _EPS:
            system.append([pending[nxt], float(pending[nxt].iterations), (0, 0)])
            nxt += 1
        began = clock() if clock else 0.0
        greedy_jobs = [
            GreedyJob(
                b,
                MODELS[j.model].worker,
                (0, 0, 0) if kind == "ar" else MODELS[j.model].ps,
                time_fn(kind, MODELS[j.model]),
            )
            for j, b, _ in system
        ]
        for entry, alloc in zip(system, allocate(greedy_jobs, capacity), strict=True):
            entry[2] = alloc
        ep.decide_s += clock() - began if clock else 0.0
        ep.schedules += 1
        round_at = t + interval_s
        start = {id(e): e[1] for e in system}
        while system:  # run to the next round, jobs leaving as they finish
            times = [time_fn(kind, MODELS[j.model])(*a) for j, _, a in system]
            finish = min(b * g for (_, b, _), g in zip(system, times, strict=True))
            d = min(finish, round_at - t)
            if not system_runs(times) and nxt < len(pending):
                d = min(d, max(pending[nxt].arrival_s - t, 0.0))
            for entry, g in zip(system, times, strict=True):
                if not math.isinf(g):
                    entry[1] -= d / g
            t += d
            done = [e for e in system if e[1] <= _EPS]
            for entry in done:
                ep.completion_s.append(t - entry[0].arrival_s)
                system.remove(entry)
            if t >= round_at - _EPS or not system_runs(times):
                break
        for entry in system:  # Eq. 7: whole iterations only, over the round
            entry[1] = start[id(entry)] - math.floor(start[id(entry)] - entry[1] + _EPS)
        if not system and nxt < len(pending):
            continue
    return ep


def system_runs(times: Sequence[float]) -> bool:
    return any(not math.isinf(g) for g in times)
