"""ONES: online evolutionary batch-size orchestration (Bian et al.; issue 15, ``docs/ones.md``).

Each cycle the policy (1) reads every job's epoch-end report (samples, loss, accuracy, batch,
throughput: ``JobView.metrics``) and applies the batch-size limit rules of §3.3.2, (2) learns
from jobs that completed (:mod:`~controller.policy.ones_predict`), (3) runs one generation of
the evolutionary search over a population as large as the cluster's GPU count
(:mod:`~controller.policy.ones_search`) and (4) deploys the best schedule only once every
running job has finished an epoch since the last deployment (§3.2.2 Update), or at once when
GPUs idle while jobs wait (§3.2: "immediate response ... when GPU resources become
available"); between deployments it carries out the current plan and renews leases.

Limit rules (§3.3.2), per job, on the global batch limit ``B``; ``l`` is the job's own per-GPU
batch (``spec.batch_size / spec.gpus``): Start: ``B = l`` (one GPU) "until completing a few
warm-up steps", taken to end with the job's first measured throughput, when ``B`` becomes at
least the user's own global batch (reconstructed: the text does not say to what the limit
rises). Scale-up: ``B`` doubles after each epoch the job finishes, up to
``elastic.max_batch_size``. Resume: a job that has run
and is passed over by a deployment halves ``B`` (not below ``l``). Scale-down: a running job's
utilisation in the score is multiplied by ``max(1, t / k)``, ``t`` its executed time and
``k = 1 / lambda`` the mean time between arrivals seen so far (reconstructed). A job may hold
``B // l`` GPUs. The search picks every worker's batch (the genome, ``ones_search``) within
bounds: a worker's batch in ``[l / LOCAL_STRETCH, l * LOCAL_STRETCH]`` (ours: memory), the
global batch at most ``B`` and, once the job has run, within half and twice its current batch
(bounded learning-rate steps, Figs. 13-14; the limit wins where they conflict).

Throughput at a (GPU count, batch) not measured (ours; §3.2.1 only says throughput is measured
per GPU): the measured per-GPU throughput closest in per-GPU batch ``m0``, times ``g``, times
``eff(m) / eff(m0)``, ``eff(m) = m / (alpha + beta m)`` with a worker's step time
``alpha + beta m`` fitted by NNLS to the job's measured (per-GPU batch, step time) points, or
to those of every job of its model while it has fewer than two batches measured (1 when
neither has two: no batch looks better than another).

State (documented, as ``base`` allows): the population, the plan, per-job tracks (limits,
reports, measured throughputs), per-model step times and the regressor; randomness only from
the generator seeded by ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from controller.policy.base import ClusterSnapshot, Decision, JobView
from controller.policy.ones_deploy import carry_out, held, least
from controller.policy.ones_predict import ProgressModel, Status, remaining_samples
from controller.policy.ones_search import (
    Gene,
    Genome,
    batches,
    counts,
    crossover,
    mutate,
    refresh,
    select,
    switching,
    utilisation,
)
from mlsched.model import BatchRule

PAUSE_S = 25.0  # ours: a GPU-count change's pause until one is measured (as SLAQ's)
LOCAL_STRETCH = 2  # ours: a worker's batch within half and twice the user's (memory allowing)
IN_PLACE_S = 1.0  # ONES §4.3, Fig. 16: a batch change on the same GPUs pauses about 1 s


@dataclass
class Track:
    """What the policy remembers of one job."""

    local: int  # the user's per-GPU batch
    limit: int  # B, the global batch limit
    batch: int  # the current global batch (0: not the scheduler's)
    epoch: int = 0  # epochs finished by the last report
    deployed_epoch: int = -1  # its epoch when the current plan was deployed
    ran: bool = False
    model: str = ""
    warmed: bool = False  # its warm-up done (Start rule): a throughput was measured
    executed_s: float = 0.0
    history: list[Status] = field(default_factory=list)
    rates: dict[tuple[int, int], float] = field(default_factory=dict)  # (gpus, batch) -> X
    last: Status | None = None
    last_rate: float = 0.0
    last_at: float = 0.0


class OnesPolicy:
    needs_job_truth = False

    def __init__(
        self,
        seed: int = 0,
        draws: int = 8,
        mutation_rate: float = 0.1,
        name: str = "ones",
    ) -> None:
        self.name = name
        self.draws = draws
        self.mutation_rate = mutation_rate
        self._rng = np.random.default_rng(seed)
        self.model = ProgressModel(self._rng)
        self.tracks: dict[str, Track] = {}
        self.steps: dict[str, dict[float, float]] = {}  # model -> per-GPU batch -> step time
        self.population: list[Genome] = []
        self.plan: dict[str, tuple[int, int]] = {}
        self.deployments = 0  # schedules deployed (§3.2.2 Update), for diagnostics
        self._last_now: float | None = None
        self._arrivals: list[float] = []

    # --- the cycle ---------------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        jobs = [*snapshot.active, *snapshot.queued]
        self._observe(snapshot, jobs)
        genes = {j.id: self.gene(j, snapshot.now) for j in jobs}
        if not genes:
            self.plan = {}
            return Decision()
        size = sum(len(n.gpu_indices) for n in snapshot.nodes)
        order = list(genes.values())
        draws = self._draws(order)
        current = {
            j.id: (held(j), self.tracks[j.id].batch) for j in snapshot.active if j.id in genes
        }
        pauses = {k: self._pause(snapshot, k) for k in current}
        best = self._evolve(genes, order, draws, size, current, pauses)
        if self._due(snapshot):
            self._deploy(snapshot, best, genes)
        elif self._idle(snapshot):
            self._admit(snapshot, best, genes)
        return carry_out(
            snapshot, self.plan, {k: t.batch for k, t in self.tracks.items() if t.batch}
        )

    # --- (1) reports and limit rules ----------------------------------------------------------
    def _observe(self, snapshot: ClusterSnapshot, jobs: list[JobView]) -> None:
        now = snapshot.now
        live = {j.id for j in (*jobs, *snapshot.busy)}
        for job_id in [k for k in self.tracks if k not in live]:
            self._completed(self.tracks.pop(job_id), now)
        step = 0.0 if self._last_now is None else now - self._last_now
        self._last_now = now
        for job in jobs:
            track = self.tracks.get(job.id)
            if track is None:
                track = self.tracks[job.id] = self._start(job)
                self._arrivals.append(job.submit_time)
            self._report(job, track, now, step)

    def _start(self, job: JobView) -> Track:
        """Start rule: the limit fits one GPU at the user's per-GPU batch."""
        scheduled = job.spec.elastic.batch is BatchRule.SCHEDULER and job.spec.batch_size > 0
        local = max(1, job.spec.batch_size // max(1, job.spec.gpus)) if scheduled else 1
        batch = job.spec.batch_size if scheduled else 0
        return Track(local=local, limit=local, batch=batch, model=job.model)

    def _report(self, job: JobView, track: Track, now: float, step: float) -> None:
        metrics = job.metrics
        if "batch_size" in metrics and track.batch:
            track.batch = int(metrics["batch_size"])
        if job.state.active:
            track.ran = True
            track.executed_s += step
            if "throughput" in metrics:
                if not track.warmed and track.batch:  # Start: warm-up done
                    most = max(job.spec.elastic.max_batch_size, track.local)
                    track.limit = max(track.limit, min(job.spec.batch_size, most))
                track.warmed = True
                rate = metrics["throughput"]
                track.rates[(held(job), track.batch)] = rate
                if track.batch and rate > 0 and held(job):  # a worker's step time
                    local = track.batch / held(job)
                    self.steps.setdefault(track.model, {})[local] = track.batch / rate
                track.last_rate = rate
        if "samples" not in metrics:
            return
        status = Status.of(metrics)
        epoch = int(metrics.get("epoch", 0))
        if epoch > track.epoch:
            track.history.append(status)
            if job.state.active and track.batch:  # scale-up: double per finished epoch
                most = max(job.spec.elastic.max_batch_size, track.local)
                track.limit = min(most, track.limit * 2 ** (epoch - track.epoch))
            track.epoch = epoch
        track.last, track.last_at = status, now

    def _completed(self, track: Track, now: float) -> None:
        """A job left the cluster: its reports train the regressor, labelled against its
        samples at the end (the last report plus its last rate since then)."""
        if track.last is None or not track.history:
            return
        final = track.last.samples + track.last_rate * max(0.0, now - track.last_at)
        self.model.add_job(track.history, final)

    # --- (2) genes and draws ------------------------------------------------------------------
    def gene(self, job: JobView, now: float) -> Gene:
        track = self.tracks[job.id]
        elastic = job.spec.elastic
        if not elastic.enabled:
            cap = job.spec.gpus
        elif track.batch:
            cap = max(least(job), min(elastic.max_gpus, track.limit // track.local))
        else:
            cap = elastic.max_gpus
        shape = self.step_model(track)
        rates = cache(lambda g, b: self.throughput(track, g, b, shape))
        last = track.last  # a job pausing may show only its loss: its last full report
        status = Status.of(job.metrics) if "samples" in job.metrics or last is None else last
        samples = max(status.samples, status.epoch_size, 1.0)
        penalty = 1.0
        if job.state.active and self._arrivals:
            k = self._interarrival(now)
            penalty = max(1.0, track.executed_s / k) if k > 0 else 1.0
        return Gene(job.id, cap, rates, samples, penalty, not track.ran, *self.bounds(track))

    def bounds(self, track: Track) -> tuple[int, int, int, int, int]:
        """(l, a worker's least and largest batch, the least and largest global batch) of a
        job (module docstring); zeros for a job whose batch is not the scheduler's."""
        if not track.batch:
            return 0, 0, 0, 0, 0
        local = track.local
        low_local, high_local = max(1, local // LOCAL_STRETCH), local * LOCAL_STRETCH
        if not track.ran:  # Start: no step to bound yet
            return local, low_local, high_local, 1, track.limit
        return local, low_local, high_local, track.batch // 2, min(track.limit, 2 * track.batch)

    def step_model(self, track: Track) -> tuple[float, float] | None:
        """(alpha, beta) of a worker's step time ``alpha + beta m`` at per-GPU batch ``m``:
        fitted to the job's own points, else its model's (module docstring); None below two
        distinct batches."""
        own = {b / g: b / r for (g, b), r in track.rates.items() if b and r > 0}
        points = own if len(own) >= 2 else self.steps.get(track.model, {}) if track.model else {}
        if len(points) < 2:
            return None
        ms = np.array(sorted(points), dtype=float)
        ts = np.array([points[m] for m in sorted(points)])
        from scipy.optimize import nnls  # on first use (process start)

        (alpha, beta), _ = nnls(np.column_stack([np.ones_like(ms), ms]), ts)
        return (float(alpha), float(beta)) if alpha > 0 or beta > 0 else None

    def throughput(
        self, track: Track, gpus: int, batch: int, shape: tuple[float, float] | None = None
    ) -> float:
        """X_j(g, b): the measured throughput at (g, b); else the measured per-GPU throughput
        closest in per-GPU batch, times ``g`` (§3.2.1: per-GPU measurements) and the step
        model's efficiency ratio ``shape`` (module docstring); else the median per-GPU
        throughput of all jobs measured so far (1 if none)."""
        exact = track.rates.get((gpus, batch))
        if exact:
            return exact
        if track.rates:
            local = batch / gpus if batch else 0.0
            (g0, b0), rate = min(
                track.rates.items(), key=lambda kv: (abs(kv[0][1] / kv[0][0] - local), -kv[0][0])
            )
            if shape is not None and local and b0:
                alpha, beta = shape
                near = b0 / g0
                rate *= (local / (alpha + beta * local)) / (near / (alpha + beta * near))
            return rate / g0 * gpus
        per_gpu = [r / g for t in self.tracks.values() for (g, _), r in t.rates.items()]
        return float(np.median(per_gpu)) * gpus if per_gpu else float(gpus)

    def _interarrival(self, now: float) -> float:
        """k = 1 / lambda: the mean time between the arrivals seen so far."""
        if len(self._arrivals) < 2:
            return 0.0
        return (max(self._arrivals) - min(self._arrivals)) / (len(self._arrivals) - 1)

    def _draws(self, genes: list[Gene]) -> np.ndarray:
        statuses, samples, epochs = [], [], []
        for gene in genes:
            track = self.tracks[gene.id]
            status = track.last or Status(0.0, 0.0, 0.0, 0.0, 0.0)
            statuses.append(status)
            samples.append(gene.samples)
            epochs.append(status.epochs)
        mu = self.model.mean(statuses)
        return remaining_samples(np.asarray(samples), np.asarray(epochs), mu, self.draws, self._rng)

    # --- (3) one generation -----------------------------------------------------------------
    def _evolve(
        self,
        genes: dict[str, Gene],
        order: list[Gene],
        draws: np.ndarray,
        size: int,
        current: dict[str, tuple[int, int]],
        pauses: dict[str, float],
    ) -> Genome:
        rng = self._rng
        mean = {g.id: float(r) for g, r in zip(order, draws.mean(axis=1), strict=True)}
        if len(self.population) != size or any(len(p) != size for p in self.population):
            self.population = [refresh((None,) * size, genes, mean, rng) for _ in range(size)]
        parents = [refresh(p, genes, mean, rng) for p in self.population]
        children: list[Genome] = []
        for _ in range(len(parents) // 2):
            a, b = rng.choice(len(parents), 2, replace=len(parents) < 2)
            children.extend(crossover(parents[int(a)], parents[int(b)], rng))
        for i in rng.choice(len(parents), max(1, len(parents) // 4)):
            children.append(mutate(parents[int(i)], self.mutation_rate, rng))
        now: list[tuple[str, int] | None] = []
        for job_id, (g, batch) in current.items():  # the batch spread evenly over its GPUs
            now.extend((job_id, batch // g + (i < batch % g)) for i in range(g))
        now_genome = tuple(now + [None] * (size - len(now)))[:size]
        pool = parents + [refresh(c, genes, mean, rng) for c in (*children, now_genome)]
        scores = utilisation(pool, order, draws)
        scores += switching(pool, current, pauses, IN_PLACE_S)[:, None]
        self.population = [pool[i] for i in select(scores, size)]
        return pool[int(np.argmin(scores.mean(axis=1)))]

    def _pause(self, snapshot: ClusterSnapshot, job_id: str) -> float:
        view = next(j for j in snapshot.active if j.id == job_id)
        return view.sr_overhead_s if view.sr_overhead_s is not None else PAUSE_S

    # --- (4) deployment -------------------------------------------------------------------------
    def _due(self, snapshot: ClusterSnapshot) -> bool:
        """No plan yet, or every running job finished an epoch since the last deployment."""
        if not self.plan:
            return True
        for job in snapshot.active:
            track = self.tracks[job.id]
            reports = "epoch" in job.metrics or track.last is not None
            if reports and track.epoch <= track.deployed_epoch:
                return False
        return True

    def _idle(self, snapshot: ClusterSnapshot) -> bool:
        free = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
        return free > 0 and any(j.id not in self.plan for j in snapshot.queued)

    def _deploy(self, snapshot: ClusterSnapshot, best: Genome, genes: dict[str, Gene]) -> None:
        chosen, batch = counts(best), batches(best)
        self.plan = {}
        self.deployments += 1
        for job_id, gpus in chosen.items():
            track = self.tracks[job_id]
            self.plan[job_id] = (gpus, batch[job_id] if track.batch else 0)
            track.deployed_epoch = track.epoch
        for job in snapshot.queued:  # resume rule: passed over, the limit halves
            track = self.tracks[job.id]
            if job.id not in chosen and track.ran and track.batch:
                track.limit = max(track.local, track.limit // 2)

    def _admit(self, snapshot: ClusterSnapshot, best: Genome, genes: dict[str, Gene]) -> None:
        """Idle GPUs while jobs wait: the best schedule's waiting jobs join the plan, as many
        GPUs as are free, running jobs untouched."""
        free = sum(len(n.free_gpu_indices) for n in snapshot.nodes)
        chosen, batch = counts(best), batches(best)
        for job in snapshot.queued:
            gpus = min(chosen.get(job.id, 0), free)
            if job.id in self.plan or gpus <= 0 or gpus < least(job):
                continue
            track = self.tracks[job.id]
            want = batch[job.id] * gpus // chosen[job.id] if track.batch else 0
            self.plan[job.id] = (gpus, max(want, gpus) if track.batch else 0)
            track.deployed_epoch = track.epoch
            free -= gpus
