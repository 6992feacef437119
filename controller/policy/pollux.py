"""Pollux: co-adaptive, goodput-optimising scheduling (Qiao et al., OSDI 2021; docs/pollux.md).

Every ``interval_s`` (60 s, §4.2) the policy (1) reads each job's reports: the measured
throughput at the (GPUs, batch) it runs at and its gradient noise scale
(``grad_noise_scale``, §3.1: what PolluxAgent measures from gradients), (2) fits each job's
throughput model to its measured step times (:mod:`~controller.policy.pollux_goodput`) and
tabulates its best goodput and batch on every GPU count, on one node or several, (3) runs the
genetic search over allocations (:mod:`~controller.policy.pollux_search`) and (4) carries out
the fittest allocation at the batch maximising each job's goodput there. Between rounds it
carries out the same plan as GPUs free up; every lease lasts to the next round.

Bounds: a job runs on 0 GPUs or between its least (elastic minimum, else its request) and
most: its elastic maximum, and at most twice the most it has held so far (§4.1, exploration;
a job that never ran: its request). Its total batch lies between its initial batch M0 (the
spec's ``batch_size``) and ``elastic.max_batch_size``, at least one sample per GPU; a job that
reports no noise scale keeps M0 (ours: no basis to trade efficiency for throughput), and a
job whose batch is not the scheduler's keeps its own (goodput = its measured iteration rate,
linear in the GPUs between and past the counts measured).

State (as ``base`` allows): per-job tracks (measured points, most GPUs held, restarts
ordered), the GA population, the plan; randomness only from the generator seeded by ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Renew,
    Resize,
    Suspend,
)
from controller.policy.pollux_goodput import Limits, Params, Point, fit, goodput_table
from controller.policy.pollux_search import Problem, evolve, realloc_factor
from controller.policy.slaq_resize import held, placement_for
from mlsched.model import BatchRule

INTERVAL_S = 60.0  # §4.2: PolluxSched reallocates every 60 s
PAUSE_S = 25.0  # delta until a restart was measured (the simulator's checkpoint-restart)
REASON = "pollux"


@dataclass
class Track:
    """What the policy remembers of one job."""

    points: dict[tuple[int, bool, int], Point] = field(default_factory=dict)
    most: int = 0  # the most GPUs it has held
    restarts: int = 0  # GPU changes and suspensions ordered (R_j of the realloc factor)
    fitted: tuple[int, Params] | None = None  # (points when fitted, parameters)


def scheduled(job: JobView) -> bool:
    """Whether the scheduler picks this job's batch."""
    return job.spec.elastic.batch is BatchRule.SCHEDULER and job.spec.batch_size > 0


class PolluxPolicy:
    needs_job_truth = False

    def __init__(
        self,
        seed: int = 0,
        interval_s: float = INTERVAL_S,
        population: int = 48,
        generations: int = 24,
        mutation_rate: float = 0.05,
        name: str = "pollux",
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.population_size = population
        self.generations = generations
        self.mutation_rate = mutation_rate
        self._rng = np.random.default_rng(seed)
        self.tracks: dict[str, Track] = {}
        self._population: list[np.ndarray] = []
        self._rows: list[str] = []  # the job order of the population's rows
        self.plan: dict[str, tuple[np.ndarray, int]] = {}  # job -> (GPUs per node, batch)
        self._next: float | None = None
        self.rounds = 0

    # --- the cycle ----------------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = [*snapshot.active, *snapshot.queued]
        live = {j.id for j in (*jobs, *snapshot.busy)}
        self.tracks = {k: t for k, t in self.tracks.items() if k in live}
        for job in jobs:
            self._observe(job)
        now = snapshot.now
        if jobs and (self._next is None or now >= self._next - 1e-6):
            self._next = now + self.interval_s
            self._round(snapshot, jobs)
        lease = max((self._next or now) - now, 1.0)
        return self._carry_out(snapshot, lease)

    # --- (1) reports ----------------------------------------------------------------------------
    def _observe(self, job: JobView) -> None:
        track = self.tracks.setdefault(job.id, Track())
        k = held(job)
        track.most = max(track.most, k)
        rate, batch = job.metrics.get("throughput", 0.0), job.metrics.get("batch_size", 0.0)
        if job.state.active and k and rate > 0 and batch > 0:
            multi = len({p.node_id for p in job.placement}) > 1
            track.points[(k, multi, int(batch))] = Point(k, multi, batch / k, batch / rate)
        elif job.state.active and k and not scheduled(job):
            for s in job.speed_samples:  # iterations per second stand in for samples
                if s.iteration_time_s > 0:
                    multi = s.nodes > 1
                    track.points[(s.gpus, multi, 0)] = Point(s.gpus, multi, 1.0, s.iteration_time_s)

    # --- (2) goodput tables -------------------------------------------------------------------
    def bounds(self, job: JobView, cluster: int) -> tuple[int, int]:
        """(least, most) GPUs of a running job (module docstring)."""
        elastic = job.spec.elastic
        if not elastic.enabled:
            return job.spec.gpus, job.spec.gpus
        most = self.tracks[job.id].most
        explore = 2 * most if most else job.spec.gpus
        high = max(elastic.min_gpus, min(elastic.max_gpus, explore, cluster))
        return elastic.min_gpus, high

    def limits(self, job: JobView) -> Limits:
        """The job's batch bounds and noise scale (module docstring)."""
        initial = job.spec.batch_size
        noise = job.metrics.get("grad_noise_scale")
        if noise is None or noise <= 0:
            return Limits(initial, initial, initial, float("inf"))
        high = max(initial, job.spec.elastic.max_batch_size)
        return Limits(initial, high, initial, float(noise))

    def params(self, job: JobView) -> Params:
        track = self.tracks[job.id]
        points = list(track.points.values())
        if track.fitted is None or track.fitted[0] != len(points):
            track.fitted = (len(points), fit(points))
        return track.fitted[1]

    def table(self, job: JobView, top: int) -> tuple[np.ndarray, np.ndarray]:
        """(goodput, batch), each (top + 1, 2): per GPU count on one node and on several."""
        ks = np.repeat(np.arange(top + 1), 2)
        multi = np.tile([False, True], top + 1)
        params = self.params(job)
        if scheduled(job):
            good, batch = goodput_table(params, ks, multi, self.limits(job))
        else:  # its own batch: the iteration rate
            t = params.step_time(ks, multi, np.ones(len(ks)))
            good = np.where(ks >= 1, 1.0 / np.maximum(t, 1e-12), 0.0)
            batch = np.zeros(len(ks))
        return good.reshape(top + 1, 2), batch.reshape(top + 1, 2).astype(int)

    # --- (3) the search ------------------------------------------------------------------------
    def _round(self, snapshot: ClusterSnapshot, jobs: list[JobView]) -> None:
        nodes = [n.id for n in snapshot.nodes]
        index = {n: i for i, n in enumerate(nodes)}
        capacity = np.array([len(n.gpu_indices) for n in snapshot.nodes])
        for job in snapshot.busy:  # GPUs still being released
            for p in job.placement:
                capacity[index[p.node_id]] -= len(p.gpu_indices)
        capacity = np.maximum(capacity, 0)
        cluster, biggest = int(capacity.sum()), int(capacity.max(initial=0))
        spans = [self.bounds(j, cluster) for j in jobs]
        low = np.array([s[0] for s in spans])
        high = np.array([s[1] for s in spans])
        top = int(high.max())
        good = np.zeros((len(jobs), top + 1, 2))
        batch = np.zeros((len(jobs), top + 1, 2), dtype=int)
        fair = np.ones(len(jobs))
        share = max(1, cluster // len(jobs))  # a_fair: an even share of the cluster
        for i, job in enumerate(jobs):
            g, b = self.table(job, int(high[i]))
            good[i, : len(g)], batch[i, : len(b)] = g, b
            k = int(np.clip(share, low[i], high[i]))
            fair[i] = max(g[k, int(k > biggest)], 1e-12)
        current = np.zeros((len(jobs), len(nodes)), dtype=int)
        realloc = np.ones(len(jobs))
        for i, job in enumerate(jobs):
            for p in job.placement:
                current[i, index[p.node_id]] += len(p.gpu_indices)
            if job.state.active:
                delay = job.sr_overhead_s if job.sr_overhead_s is not None else PAUSE_S
                age = snapshot.now - job.submit_time
                realloc[i] = realloc_factor(age, self.tracks[job.id].restarts, delay)
        want = np.clip([j.spec.gpus for j in jobs], low, high)
        problem = Problem(capacity, low, high, want, good, fair, current, realloc)
        ids = [j.id for j in jobs]
        self._population, best = evolve(
            problem,
            self._carried(ids, len(nodes)),
            self.population_size,
            self.generations,
            self.mutation_rate,
            self._rng,
        )
        self._rows = ids
        self.rounds += 1
        self.plan = {}
        for i, job in enumerate(jobs):
            k = int(best[i].sum())
            if k:
                chosen = int(batch[i, k, int(np.count_nonzero(best[i]) > 1)])
                if scheduled(job):
                    most = max(job.spec.elastic.max_batch_size, job.spec.batch_size)
                    chosen = int(np.clip(chosen, k, max(most, k)))
                self.plan[job.id] = (best[i].copy(), chosen)

    def _carried(self, ids: list[str], width: int) -> list[np.ndarray]:
        """Last round's population with rows re-ordered to ``ids`` (new jobs: no GPUs)."""
        where = {k: i for i, k in enumerate(self._rows)}
        out = []
        for old in self._population:
            if old.shape[1] != width:
                return []
            a = np.zeros((len(ids), width), dtype=int)
            for i, k in enumerate(ids):
                if k in where:
                    a[i] = old[where[k]]
            out.append(a)
        return out

    # --- (4) carrying out the plan -------------------------------------------------------------
    def _carry_out(self, snapshot: ClusterSnapshot, lease: float) -> Decision:
        """Suspend what the plan drops, shrink and re-batch in place, then grow, move and
        launch where every GPU the plan names on each node is free; the rest renews."""
        nodes = [n.id for n in snapshot.nodes]
        free = {n.id: sorted(n.free_gpu_indices) for n in snapshot.nodes}
        suspend, renew, resize, launch, later = [], [], [], [], []
        for job in snapshot.active:
            row, batch = self.plan.get(job.id, (None, 0))
            if row is None or not row.any():
                suspend.append(Suspend(job.id, REASON))
                self.tracks[job.id].restarts += 1
                continue
            own = _by_node(job.placement)
            batch = batch if scheduled(job) else 0
            current = int(job.metrics.get("batch_size", 0))
            if all(len(own.get(n, ())) == row[i] for i, n in enumerate(nodes)):
                if batch and batch != current:
                    resize.append(Resize(job.id, job.placement, lease, batch, REASON))
                else:
                    renew.append(Renew(job.id, lease))
            elif all(row[i] <= len(own.get(n, ())) for i, n in enumerate(nodes)):
                keep = [(n, g) for i, n in enumerate(nodes) for g in own.get(n, [])[: row[i]]]
                kept = set(keep)
                for n, gs in own.items():
                    free[n].extend(g for g in gs if (n, g) not in kept)
                resize.append(Resize(job.id, placement_for(keep, job), lease, batch, REASON))
                self.tracks[job.id].restarts += 1
            else:
                later.append((job, row, batch, own))
        for job, row, batch, own in later:
            gpus = _take(nodes, row, free, own)
            if gpus is None:
                renew.append(Renew(job.id, lease))
                continue
            resize.append(Resize(job.id, placement_for(gpus, job), lease, batch, REASON))
            self.tracks[job.id].restarts += 1
        for job in snapshot.queued:
            row, _ = self.plan.get(job.id, (None, 0))
            if row is None or not row.any():
                continue
            gpus = _take(nodes, row, free, {})
            if gpus is not None:
                launch.append(Launch(job.id, placement_for(gpus, job), lease))
        return Decision(
            launch=tuple(launch), renew=tuple(renew), suspend=tuple(suspend), resize=tuple(resize)
        )


def _by_node(placement: tuple[TaskPlacement, ...]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for p in placement:
        out.setdefault(p.node_id, []).extend(sorted(p.gpu_indices))
    return out


def _take(
    nodes: list[str], row: np.ndarray, free: dict[str, list[int]], own: dict[str, list[int]]
) -> list[tuple[str, int]] | None:
    """The GPUs of ``row`` per node: the job's own first, then free ones; None (nothing
    taken) unless every node has enough. The job's GPUs it does not keep become free."""
    if any(row[i] > len(own.get(n, ())) + len(free[n]) for i, n in enumerate(nodes)):
        return None
    out: list[tuple[str, int]] = []
    for i, n in enumerate(nodes):
        mine = own.get(n, [])
        keep = mine[: row[i]]
        extra = free[n][: row[i] - len(keep)]
        del free[n][: len(extra)]
        free[n].extend(mine[len(keep) :])
        out += [(n, g) for g in keep] + [(n, g) for g in extra]
    return out
