"""``optimus``: periodic greedy marginal-gain allocation (Peng et al., EuroSys 2018), as the
ONES paper describes and uses it (§2.1, §4.1, §5; issue 15).

Every ``interval_s`` (10 minutes, Optimus' interval) all jobs are re-allocated: each, in queue
order (running ones first), gets its minimum while GPUs last ("at least one worker ... for
fairness"), then GPUs go one at a time to the job whose predicted remaining time falls the most
with one more, until none is left or no job gains. Between rounds nothing changes: new jobs
wait for the next round (ONES §4.2: about half the interval on average), and every lease runs
to the next round; only a cluster running nothing starts a round at once.

Predicted remaining time on ``g`` GPUs: the remaining iterations times ``t(g)``, Optimus'
speed model ``t(g) = a + b / g + c g`` (all-reduce form) fitted by non-negative least squares
to the job's measured iteration times per GPU count; with fewer than three counts measured,
``b / g`` alone through the latest (linear speed-up). The remaining iterations come from
``JobView.estimated_remaining_s`` over ``t`` of the allocation it holds (or requested): in the
simulator that is exact, where Optimus fits loss curves (``docs/ones.md``: it favours Optimus).
"""

from __future__ import annotations

import heapq

import numpy as np
from scipy.optimize import nnls

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.slaq_resize import bounds, held, plan

INTERVAL_S = 600.0


def iteration_time(job: JobView) -> tuple[float, float, float]:
    """(a, b, c) of ``t(g) = a + b / g + c g`` from the job's speed samples (None-safe: a job
    never measured gets ``b = 1``, every allocation then looking alike up to linear speed-up)."""
    samples = {s.gpus: s.iteration_time_s for s in job.speed_samples}
    if len(samples) >= 3:
        gs = np.array(sorted(samples), dtype=float)
        ts = np.array([samples[int(g)] for g in gs])
        theta, _ = nnls(np.column_stack([np.ones_like(gs), 1.0 / gs, gs]), ts)
        return float(theta[0]), float(theta[1]), float(theta[2])
    if samples:
        latest = job.speed_samples[-1]
        return 0.0, latest.iteration_time_s * latest.gpus, 0.0
    return 0.0, 1.0, 0.0


def _time(theta: tuple[float, float, float], gpus: int) -> float:
    a, b, c = theta
    return a + b / gpus + c * gpus


class OptimusPolicy:
    needs_job_truth = False

    def __init__(self, interval_s: float = INTERVAL_S, name: str = "optimus") -> None:
        self.interval_s = interval_s
        self.name = name
        self._next: float | None = None  # the next round

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        now = snapshot.now
        idle = not snapshot.active and not snapshot.busy and bool(snapshot.queued)
        early = self._next is not None and now < self._next - 1e-6
        if early and not snapshot.expired() and not idle:
            return Decision()
        self._next = now + self.interval_s
        expired = list(snapshot.expired())
        order = expired + list(snapshot.queued)
        free = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
        capacity = free + sum(held(j) for j in expired)
        targets = self.allocate(order, capacity)
        at_round = {j.id for j in expired}
        for job in snapshot.active:
            if job.id not in at_round:
                targets[job.id] = held(job)
        lease = max(self._next - now, 1.0)
        return plan(
            ClusterSnapshot(
                now, snapshot.nodes, snapshot.queued, snapshot.active, snapshot.busy, lease
            ),
            targets,
            order,
            self.name,
        )

    def allocate(self, jobs: list[JobView], capacity: int) -> dict[str, int]:
        """Minimums in order while they last, then greedy marginal gain (module docstring)."""
        alloc: dict[str, int] = {}
        for job in jobs:
            low = bounds(job)[0]
            if low <= capacity:
                alloc[job.id] = low
                capacity -= low
        thetas = {j.id: iteration_time(j) for j in jobs if j.id in alloc}
        left = {j.id: self._iterations(j, thetas[j.id]) for j in jobs if j.id in alloc}
        most = {j.id: bounds(j)[1] for j in jobs}
        heap: list[tuple[float, int, str]] = []
        for rank, job in enumerate(jobs):
            if job.id in alloc:
                self._push(heap, job.id, rank, alloc, most, thetas, left)
        while capacity > 0 and heap:
            _, rank, job_id = heapq.heappop(heap)
            alloc[job_id] += 1
            capacity -= 1
            self._push(heap, job_id, rank, alloc, most, thetas, left)
        return alloc

    @staticmethod
    def _push(heap, job_id, rank, alloc, most, thetas, left) -> None:
        g = alloc[job_id]
        if g >= most[job_id]:
            return
        gain = left[job_id] * (_time(thetas[job_id], g) - _time(thetas[job_id], g + 1))
        if gain > 0:
            heapq.heappush(heap, (-gain, rank, job_id))

    @staticmethod
    def _iterations(job: JobView, theta: tuple[float, float, float]) -> float:
        """Remaining iterations: the remaining seconds over ``t`` at the allocation they hold
        for (held GPUs, else the request)."""
        seconds = job.estimated_remaining_s
        if seconds is None:
            return 1.0
        return seconds / max(_time(theta, held(job) or job.spec.gpus), 1e-9)
