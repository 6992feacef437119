"""SLAQ: quality-driven allocation (Zhang et al., SoCC 2017), on GPUs of elastic jobs.

Every scheduling epoch (a lease, ``snapshot.default_lease_s``) SLAQ predicts, for each job and
allocation ``a``, the normalised loss reduction over the next epoch: the iterations ``a`` GPUs
make in it (§4.2.1, :func:`~controller.policy.slaq_predict.iteration_time`), the loss the
fitted curve gives after them (§4.2.2) and the change over the largest change per iteration
seen so far (§4.1). Algorithm 1 (§4.3): every job starts with one unit (its ``min_gpus``), then
units go one at a time to the job whose next unit adds the most weighted predicted reduction.
``slaq-maxmin`` (§4.3, "Maximizing the minimum quality") gives each unit to the job whose
predicted normalised loss after the epoch is the highest. Weights multiply a job's loss
reduction (§4.3, "Prioritize jobs"). A job without a prediction yet (too little history or no
measured iteration time) counts as unconverged (normalised loss 1, §6.1) and gets units up to
its request first.

Ours: §4.3 reallocates every epoch for free (§5: a token bucket on Spark cores); here a resize
pauses the job (suspend plus resume, ``sr_overhead_s`` when measured, else ``RESIZE_PAUSE_S``;
``regroup_s`` for a GPU change in place on the job's one node, when given),
so a job's predicted reduction on an allocation other than the one it holds counts ``epoch -
pause`` seconds of training; a unit's priority is the best per-unit gain over the next units
(the plain marginal when there is no pause), and a grow that does not beat keeping the held
GPUs is undone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.slaq_predict import (
    LossCurve,
    fit_loss,
    iteration_time,
    largest_change,
    strawman,
)
from controller.policy.slaq_resize import bounds, held, in_place_room, movable, plan

RESIZE_PAUSE_S = 25.0  # ours: the simulator's 4 s + 20 s + 0.36 s/GPU, until one is measured


class SlaqPolicy:
    needs_job_truth = False

    def __init__(
        self,
        maxmin: bool = False,
        weights: Mapping[str, float] | None = None,
        name: str | None = None,
        pause_s: float = RESIZE_PAUSE_S,
        regroup_s: float | None = None,
        regroup_any: bool = False,
    ) -> None:
        self.maxmin = maxmin
        self.pause_s = pause_s  # a restart's pause before one is measured; 0: the paper's
        self.regroup_s = regroup_s  # an in-place GPU change's pause; None: none in place
        self.regroup_any = regroup_any  # a what-if: every GPU change in place
        self._room: dict[str, int] = {}  # per job, the most GPUs it may reach in place
        self.weights = dict(weights or {})  # by job id, else by user; default 1
        self.name = name or ("slaq-maxmin" if maxmin else "slaq")
        self._fits: dict[str, tuple[tuple[int, float], LossCurve | None]] = {}

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        expired, capacity = movable(snapshot)
        order = expired + list(snapshot.queued)
        epoch = snapshot.default_lease_s
        self._room = in_place_room(snapshot) if self.regroup_s is not None else {}
        targets = self.allocate(order, capacity, epoch)
        at_boundary = {j.id for j in expired}
        for job in snapshot.active:
            if job.id not in at_boundary:
                targets[job.id] = held(job)
        live = {j.id for j in (*snapshot.active, *snapshot.queued)}
        self._fits = {k: v for k, v in self._fits.items() if k in live}
        reasons = {j.id: self.explain(j, targets.get(j.id, held(j)), epoch) for j in expired}
        return plan(snapshot, targets, order, self.name, reasons)

    def explain(self, job: JobView, units: int, epoch: float) -> str:
        """The prediction behind moving ``job`` to ``units`` GPUs (a resize's reason)."""
        have = held(job)
        if self.predict(job, epoch) is None:
            return f"{self.name}: no loss prediction yet (unconverged: up to its request first)"
        return (
            f"{self.name}: predicted normalised loss reduction over the next {epoch:g} s "
            f"{self._gain(job, units, epoch):.4f} on {units} GPUs "
            f"against {self._gain(job, have, epoch):.4f} on {have}"
        )

    # --- Algorithm 1 ------------------------------------------------------------------------
    def allocate(self, jobs: list[JobView], capacity: int, epoch: float) -> dict[str, int]:
        """Units per job: one unit (``min_gpus``) each in order while they last (lines 6-10),
        then one at a time by priority (lines 11-16); then a grown job whose predicted gain
        does not beat keeping its GPUs keeps them, and the others may take the units freed."""
        alloc: dict[str, int] = {}
        for job in jobs:
            low = bounds(job)[0]
            if job.state.active or low <= capacity:  # holds its GPUs already: capacity counted them
                alloc[job.id] = low
                capacity -= low
        views = {j.id: j for j in jobs if j.id in alloc}
        frozen: set[str] = set()
        while True:
            capacity = self._greedy(views, alloc, capacity, epoch, frozen)
            undo = [i for i in alloc if i not in frozen and self._worse(views[i], alloc[i], epoch)]
            if not undo:
                return alloc
            for job_id in undo:
                capacity += alloc[job_id] - held(views[job_id])
                alloc[job_id] = held(views[job_id])
                frozen.add(job_id)

    def _greedy(self, views, alloc, capacity: int, epoch: float, frozen: set[str]) -> int:
        """Algorithm 1's loop: the next unit to the job of highest priority; units left."""
        heap = [
            (-self._value(views[i], a, epoch), n, i)
            for n, (i, a) in enumerate(alloc.items())
            if i not in frozen
        ]
        heapq.heapify(heap)
        while capacity > 0 and heap:
            value, n, job_id = heapq.heappop(heap)
            job = views[job_id]
            if alloc[job_id] >= bounds(job)[1]:
                continue
            if -value < 0:  # every job would lose by another unit: leave the rest free
                break
            alloc[job_id] += 1
            capacity -= 1
            heapq.heappush(heap, (-self._value(job, alloc[job_id], epoch), n, job_id))
        return capacity

    def _worse(self, job: JobView, units: int, epoch: float) -> bool:
        """A grow whose predicted gain (after the pause) does not beat keeping the GPUs held."""
        have = held(job)
        if self.maxmin or not job.state.active or units <= have:
            return False
        return self._gain(job, units, epoch) <= self._gain(job, have, epoch)

    def _value(self, job: JobView, units: int, epoch: float) -> float:
        """The priority of one more unit for ``job`` at ``units``: its weighted predicted
        normalised loss reduction from it (sum), or its predicted normalised loss (max-min)."""
        weight = self.weights.get(job.id, self.weights.get(job.user, 1.0))
        predicted = self.predict(job, epoch)
        if predicted is None:  # unconverged, unknown: up to its request first
            return math.inf if units < job.spec.gpus else 0.0
        curve, start, _, t_iter, floor, first = predicted
        if self.maxmin:
            after = curve(start + epoch / t_iter(units))
            return weight * max(0.0, after - floor) / max(first - floor, 1e-12)
        # Algorithm 1, PREDICTLOSSREDUCTION, with the pause: the gain is not concave around
        # the held count, so a unit is worth the best mean gain of the next k units (k = 1,
        # the paper's marginal, when no pause lies ahead)
        top = bounds(job)[1]
        ahead = top - units if job.state.active and units <= held(job) else 1
        base = self._gain(job, units, epoch)
        steps = range(1, max(1, min(ahead, top - units)) + 1)
        return max((self._gain(job, units + k, epoch) - base) / k for k in steps)

    def _gain(self, job: JobView, units: int, epoch: float) -> float:
        """Weighted predicted normalised loss reduction over the next epoch on ``units`` GPUs:
        ``epoch - pause`` seconds of training if that resizes the job, else ``epoch``."""
        predicted = self.predict(job, epoch)
        if predicted is None or units <= 0:
            return 0.0
        curve, start, scale, t_iter, _, _ = predicted
        train = epoch
        if job.state.active and units != held(job):
            train = max(0.0, epoch - self.pause(job, units))
        weight = self.weights.get(job.id, self.weights.get(job.user, 1.0))
        return weight * (curve(start) - curve(start + train / t_iter(units))) / scale

    def pause(self, job: JobView, units: int) -> float:
        """The pause of resizing ``job`` to ``units`` GPUs, by the mechanism that would do it
        (simulator/resize_cost.py): a regroup in place when every rank stays on its one node
        and the node has room, else a restart (its measured t_sr, else ``pause_s``)."""
        in_place = self.regroup_any or units <= self._room.get(job.id, 0)
        if self.regroup_s is not None and in_place:
            return self.regroup_s
        return job.sr_overhead_s if job.sr_overhead_s is not None else self.pause_s

    def predict(self, job: JobView, epoch: float):
        """(curve, iteration now, largest change per iteration, iteration time(a), loss floor,
        first loss) for a job with a prediction, else None."""
        history = job.metric_history
        scale = largest_change(history)
        if len(history) < 2 or scale <= 0 or not job.speed_samples:
            return None
        key = history[-1]
        cached = self._fits.get(job.id)
        if cached is None or cached[0] != (len(history), key[1]):
            curve = fit_loss(history) or strawman(history)
            self._fits[job.id] = ((len(history), key[1]), curve)
        else:
            curve = cached[1]
        if curve is None:
            return None
        samples = job.speed_samples

        def t_iter(units: int) -> float:
            return iteration_time(samples, units) or math.inf

        floor = _floor(curve, history)
        start = max(job.iteration, history[-1][0])
        return curve, start, scale, t_iter, floor, history[0][1]


def _floor(curve: LossCurve, history) -> float:
    """The loss the curve tends to: d (sublinear), c (linear); the strawman has none, so 0
    (or the lowest seen, if below)."""
    lowest = min(v for _, v in history)
    if curve.family == "sublinear":
        return min(curve.params[3], lowest)
    if curve.family == "linear":
        return min(curve.params[2], lowest)
    return min(0.0, lowest)
