"""``chic-ar``: Chic adapted to all-reduce jobs, as the ONES paper used it for its DRL baseline
(§5: Chic's design with an action space of GPUs per job, no preemption; issue 16).

Reschedules only when the set of jobs changes (an arrival or a completion, Chic §4.2). The
network (trained by ``mlsched chic-train --kind ar``) fills the GPUs window by window, running
jobs first in submission order, then the queue (ours: Chic sees only the first I jobs; on a
cluster larger than Chic's 10 GPUs the next I jobs get what the previous windows left, each
window at most its share of the GPUs left by its share of the jobs left, so the first window
cannot take the cluster while the queue waits). A running job starts its window at its
elastic minimum (no preemption), a queued one at zero; an action adds one GPU to a job of the
window, the void action ends the window. A job's time per iteration is Optimus'
``t(g) = a + b / g + c g`` fitted to its measured speeds, and its remaining iterations are
predicted from its loss reports (:mod:`controller.policy.optimus`, never the simulator's
truth); the network sees the speed-ups at 2 and 4 GPUs and the remaining work
(``simulator.chic_env.slot_job``). Targets are carried out at lease boundaries
(:func:`~controller.policy.slaq_resize.plan`), with leases of ``lease_s``.

State (documented, as ``base`` allows): the last job set and its targets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet
from controller.policy.chic.phase import Phase, SlotJob
from controller.policy.optimus import iteration_time, remaining_iterations
from controller.policy.slaq_resize import bounds, plan

REF_S = 30.0  # as simulator.chic_env.REF_S: remaining work in iterations of 30 s on one GPU
LEASE_S = 120.0


def _time(theta: tuple[float, float, float]):
    a, b, c = theta
    return lambda w, p: np.inf if w <= 0 else a + b / w + c * w


class ChicArPolicy:
    needs_job_truth = False

    def __init__(
        self, model_path: str | Path | None = None, lease_s: float = LEASE_S, name: str = "chic-ar"
    ) -> None:
        self.net = ArrayNet.load(model_path or DEFAULT_MODELS["ar"])
        if self.net.kind != "ar":
            raise ValueError(f"{model_path}: a {self.net.kind!r} model, chic-ar needs 'ar'")
        self.lease_s = lease_s
        self.name = name
        self._jobs: frozenset[str] = frozenset()
        self._targets: dict[str, int] = {}

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        running = sorted(snapshot.active, key=lambda j: (j.submit_time, j.id))
        order = running + list(snapshot.queued)
        ids = frozenset(j.id for j in order)
        if ids != self._jobs:
            capacity = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
            capacity += sum(len(p.gpu_indices) for j in running for p in j.placement)
            self._targets = self.allocate(order, capacity, {j.id for j in running})
            self._jobs = ids
        leased = ClusterSnapshot(
            snapshot.now,
            snapshot.nodes,
            snapshot.queued,
            snapshot.active,
            snapshot.busy,
            self.lease_s,
        )
        return plan(leased, self._targets, order, self.name)

    def allocate(self, jobs: list[JobView], capacity: int, running: set[str]) -> dict[str, int]:
        """GPUs per job, window by window (module docstring)."""
        slots = self.net.slots
        times = {j.id: _time(iteration_time(j)) for j in jobs}
        left = _remaining(jobs, times)
        targets: dict[str, int] = {}
        used = 0
        for start in range(0, len(jobs), slots):
            window = jobs[start : start + slots]
            low = [bounds(j)[0] if j.id in running else 0 for j in window]
            # ours: a window's share of what is left, by its share of the jobs left
            share = (capacity - used) * len(window) // (len(jobs) - start)
            limit = used + max(share, sum(low), min(bounds(j)[0] for j in window))
            if used + sum(low) > capacity:
                break
            phase = Phase(
                "ar",
                slots,
                [_slot(j, left[j.id], times[j.id]) for j in window],
                (float(min(limit, capacity)), 0.0, 0.0),
                used=(float(used), 0.0, 0.0),
                start=low,
            )
            backlog = len(jobs) - start - len(window)
            while not phase.finished():
                z = self.net.logits(phase.encode(backlog))
                action = next(int(a) for a in np.argsort(-z, kind="stable") if phase.valid(int(a)))
                phase.apply(action)
            for job, w in zip(window, phase.workers, strict=True):
                least = bounds(job)[0]
                targets[job.id] = w if w >= least else 0
            used = sum(targets.values())
            if used >= capacity:
                break
        return targets


def _slot(job: JobView, remaining: float, time) -> SlotJob:
    one = time(1, 0)
    features = (one / time(2, 0) - 1.0, one / time(4, 0) - 1.0)
    return SlotJob(
        features, remaining * one / REF_S, (1.0, 0.0, 0.0), (0.0, 0.0, 0.0), time, bounds(job)[1]
    )


def _remaining(jobs: list[JobView], times) -> dict[str, float]:
    """Predicted remaining iterations; a job without a loss curve gets the median remaining
    seconds of those with one (on one GPU), else 1 (all alike)."""
    known = {j.id: remaining_iterations(j) for j in jobs}
    seconds = [n * times[k](1, 0) for k, n in known.items() if n is not None]
    prior = float(np.median(seconds)) if seconds else None
    return {
        k: n if n is not None else (prior / times[k](1, 0) if prior is not None else 1.0)
        for k, n in known.items()
    }
