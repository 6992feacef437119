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
``b / g`` alone through the latest (linear speed-up).

Remaining iterations come only from what a run reports (Optimus §3.1: convergence estimation
from the training loss): the job's ``(iteration, loss)`` history (``JobView.metric_history``) is
fitted with SLAQ's weighted curve fit (:mod:`~controller.policy.slaq_predict`, whose sublinear
family ``1 / (a k^2 + b k + c) + d`` holds Optimus' ``1 / (b0 k + b1) + b2`` at ``a = 0``; the
last drop per iteration goes on for histories too short to fit), and the job is predicted to
converge at the first epoch over which the fitted loss falls by less than ``DELTA`` of itself
(ours: Optimus leaves the threshold to the job's owner), at most ``HORIZON_EPOCHS`` ahead. An
epoch is ``epoch_size / batch_size`` iterations when the job reports both, else the spacing of
its last two reports. A job with no curve yet (fewer than two loss reports) is taken to need the
median predicted remaining time of the jobs with one, in seconds at the GPUs it holds or asks
for (all alike when none has one). Never the simulator's remaining time.
"""

from __future__ import annotations

import heapq

import numpy as np

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.slaq_predict import fit_loss, strawman
from controller.policy.slaq_resize import bounds, held, plan

INTERVAL_S = 600.0
DELTA = 0.02  # ours: converged once an epoch lowers the predicted loss by under 2 % of itself
HORIZON_EPOCHS = 100  # ours: the furthest a prediction looks


def iteration_time(job: JobView) -> tuple[float, float, float]:
    """(a, b, c) of ``t(g) = a + b / g + c g`` from the job's speed samples (None-safe: a job
    never measured gets ``b = 1``, every allocation then looking alike up to linear speed-up)."""
    samples = {s.gpus: s.iteration_time_s for s in job.speed_samples}
    if len(samples) >= 3:
        gs = np.array(sorted(samples), dtype=float)
        ts = np.array([samples[int(g)] for g in gs])
        from scipy.optimize import nnls  # on first use (process start)

        theta, _ = nnls(np.column_stack([np.ones_like(gs), 1.0 / gs, gs]), ts)
        return float(theta[0]), float(theta[1]), float(theta[2])
    if samples:
        latest = job.speed_samples[-1]
        return 0.0, latest.iteration_time_s * latest.gpus, 0.0
    return 0.0, 1.0, 0.0


def epoch_iterations(job: JobView) -> float:
    """Iterations per epoch: ``epoch_size / batch_size`` when reported, else the spacing of the
    last two loss reports (1 when neither is known)."""
    size, batch = job.metrics.get("epoch_size", 0.0), job.metrics.get("batch_size", 0.0)
    if size > 0 and batch > 0:
        return size / batch
    history = job.metric_history
    if len(history) >= 2 and history[-1][0] > history[-2][0]:
        return float(history[-1][0] - history[-2][0])
    return 1.0


def remaining_iterations(job: JobView) -> float | None:
    """Iterations to convergence predicted from the job's loss reports (module docstring);
    None without a curve (fewer than two reports). At least what is left of the current epoch."""
    history = job.metric_history
    curve = fit_loss(history) or strawman(history)
    if curve is None:
        return None
    epoch = epoch_iterations(job)
    done = float(max(job.iteration, history[-1][0]))
    k = float(history[-1][0])
    for _ in range(HORIZON_EPOCHS):
        now = curve(k)
        if now - curve(k + epoch) < DELTA * abs(now):
            break
        k += epoch
    return max(k - done, epoch - done % epoch)


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
        left = self._left([j for j in jobs if j.id in alloc], thetas)
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
    def _left(jobs: list[JobView], thetas) -> dict[str, float]:
        """Predicted remaining iterations; a job without a curve gets the median remaining
        seconds of those with one, over its own ``t`` (module docstring)."""
        known = {j.id: remaining_iterations(j) for j in jobs}
        at = {j.id: _time(thetas[j.id], held(j) or j.spec.gpus) for j in jobs}
        seconds = [n * at[k] for k, n in known.items() if n is not None]
        prior = float(np.median(seconds)) if seconds else None
        out = {}
        for job_id, n in known.items():
            if n is None:
                n = prior / max(at[job_id], 1e-9) if prior is not None else 1.0
            out[job_id] = n
        return out

    @staticmethod
    def _push(heap, job_id, rank, alloc, most, thetas, left) -> None:
        g = alloc[job_id]
        if g >= most[job_id]:
            return
        gain = left[job_id] * (_time(thetas[job_id], g) - _time(thetas[job_id], g + 1))
        if gain > 0:
            heapq.heappush(heap, (-gain, rank, job_id))
