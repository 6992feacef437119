"""ONES' evolutionary search (§3.2.2): schedules as genomes, the four operators, selection.

A genome is a tuple with one entry per GPU of the cluster (node-major order): None, or the job
that GPU serves and that worker's batch (Eq. 1: GPU -> (job, per-GPU batch); 0 for a job whose
batch is not the scheduler's). A job's GPU count is the number of its entries and its global
batch their sum (Eq. 2). Every operator is a pure function of its inputs and a
``numpy.random.Generator`` the caller seeds; each leaves the batches within the job's bounds
(:class:`Gene`, the limit rules of §3.3.2), :func:`fit` restoring them.

Reconstructions (the text lost the symbols; ``docs/ones.md`` says why):
- Eq. 8 (SRUF): a schedule's utilisation is ``sum_j g_j * T_j * penalty_j`` over its jobs,
  ``T_j = R_j / X_j(g_j, b_j)`` (Eq. 5, remaining samples over throughput at that count and
  batch) and ``R_j = S_j (1 - p_j) / p_j`` (Eq. 7, samples processed ``S_j``, progress ``p_j``).
- The gain that picks the job an idle GPU goes to (refresh, Fig. 7): the completion rate it
  adds, ``(X_j(g + 1, b + l) - X_j(g, b)) / R_j`` with ``l`` its per-GPU batch (a waiting job:
  ``X_j(1, l) / R_j``).
- Mutation (Fig. 9) preempts jobs and, ours, re-batches them: the evolution "randomly adjusts
  the batch sizes" (§3.2.2), which crossover alone does only between parents' batches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

Slot = tuple[str, int]  # (job id, that worker's batch)
Genome = tuple[Slot | None, ...]


@dataclass(frozen=True)
class Gene:
    """What the search knows of one job: the most GPUs it may hold now (its batch limit over
    its per-GPU batch), its throughput ``rate(g, b)`` on ``g`` GPUs at global batch ``b``
    (samples per second), the samples it has processed, its score penalty (scale-down, §3.3.2)
    and its batch bounds: a worker's batch within ``[low_local, high_local]``, the global
    batch within ``[low, high]`` (the limit ``B`` and bounded learning-rate steps); ``local``,
    the batch a worker it gains starts at, is 0 for a job whose batch is not the scheduler's."""

    id: str
    cap: int
    throughput: Callable[[int, int], float] = field(compare=False)
    samples: float
    penalty: float = 1.0
    new: bool = False  # arrived and never ran: gets a GPU first (refresh step 3)
    local: int = 0
    low_local: int = 0
    high_local: int = 0
    low: int = 0
    high: int = 0

    def rate(self, gpus: int, batch: int) -> float:
        return self.throughput(min(gpus, self.cap), batch) if gpus > 0 else 0.0


def counts(genome: Genome) -> dict[str, int]:
    out: dict[str, int] = {}
    for slot in genome:
        if slot is not None:
            out[slot[0]] = out.get(slot[0], 0) + 1
    return out


def batches(genome: Genome) -> dict[str, int]:
    """Each job's global batch: the sum of its workers' (Eq. 2)."""
    out: dict[str, int] = {}
    for slot in genome:
        if slot is not None:
            out[slot[0]] = out.get(slot[0], 0) + slot[1]
    return out


def reorder(genome: Genome) -> Genome:
    """Pack each job's GPUs together, jobs in the order they first occur, each worker keeping
    its batch (Fig. 10)."""
    by_job: dict[str, list[Slot]] = {}
    for slot in genome:
        if slot is not None:
            by_job.setdefault(slot[0], []).append(slot)
    packed = [s for slots in by_job.values() for s in slots]
    return tuple(packed + [None] * (len(genome) - len(packed)))


def crossover(a: Genome, b: Genome, rng: np.random.Generator) -> tuple[Genome, Genome]:
    """Uniform crossover (Fig. 8): on each GPU, one child inherits ``a``'s worker (job and
    batch) and the other ``b``'s, which child decided by a fair coin."""
    flips = rng.random(len(a)) < 0.5
    first = tuple(y if f else x for x, y, f in zip(a, b, flips, strict=True))
    second = tuple(x if f else y for x, y, f in zip(a, b, flips, strict=True))
    return first, second


def mutate(genome: Genome, rate: float, rng: np.random.Generator) -> Genome:
    """Uniform mutation (Fig. 9): each job of the schedule, in order of first occurrence, is
    preempted (all its GPUs freed, refresh fills them) with probability ``rate``
    (``rng.random(n)``); each one kept is re-batched with probability ``rate``
    (``rng.random(n)``), every worker's batch doubled or, on a fair coin
    (``rng.random(n) < 0.5``), halved (at least 1); :func:`fit` bounds them."""
    jobs = list(dict.fromkeys(s[0] for s in genome if s is not None))
    n = len(jobs)
    drop, move, double = rng.random(n), rng.random(n), rng.random(n) < 0.5
    dropped = {j for j, u in zip(jobs, drop, strict=True) if u < rate}
    factor = {
        j: (2.0 if d else 0.5)
        for j, u, d in zip(jobs, move, double, strict=True)
        if u < rate and j not in dropped
    }
    out: list[Slot | None] = []
    for slot in genome:
        if slot is None or slot[0] in dropped:
            out.append(None)
        elif slot[0] in factor:
            out.append((slot[0], max(1, int(slot[1] * factor[slot[0]])) if slot[1] else 0))
        else:
            out.append(slot)
    return tuple(out)


def fit(workers: Sequence[int], gene: Gene) -> list[int]:
    """A job's worker batches brought within its bounds: each into ``[low_local, high_local]``,
    then, if their sum is outside ``[low, high]``, the nearest bound spread evenly over the
    workers (the first ones one larger), each still at most ``high_local``."""
    if not gene.local:
        return [0] * len(workers)
    out = [min(max(b, gene.low_local), gene.high_local) for b in workers]
    total = sum(out)
    target = min(max(total, gene.low), gene.high)
    if target == total:
        return out
    base, extra = divmod(target, len(out))
    return [min(base + (i < extra), gene.high_local) for i in range(len(out))]


def most_gpus(gene: Gene) -> int:
    """The GPUs a job may hold: its cap, and no more workers than its largest batch allows."""
    if not gene.local:
        return gene.cap
    return max(1, min(gene.cap, gene.high // max(1, gene.low_local)))


def refresh(
    genome: Genome,
    genes: Mapping[str, Gene],
    remaining: Mapping[str, float],
    rng: np.random.Generator,
) -> Genome:
    """Bring a schedule up to date (§3.2.2 Refresh): (1) free the GPUs of jobs that ended,
    (2) scale down by GPUs every job above its cap or whose global batch passes its limit
    (while more than one GPU), (3) give each new job one GPU at its own per-GPU batch, free ones
    first, else taken from the job holding the most, (4) give each idle GPU to a job below its
    cap drawn with probability proportional to its gain (module docstring), the new worker at
    the batch of the job's last worker (a job without one: its own), ``remaining`` being each
    job's sampled remaining samples; then bound every job's batches (:func:`fit`) and reorder."""
    slots: list[Slot | None] = [s if s is not None and s[0] in genes else None for s in genome]
    held: dict[str, int] = {}
    total: dict[str, int] = {}
    for i, slot in enumerate(slots):
        if slot is None:
            continue
        job, b = slot
        gene = genes[job]
        over = held.get(job, 0) >= most_gpus(gene)
        over = over or (held.get(job, 0) >= 1 and gene.local and total[job] + b > gene.high)
        if over:
            slots[i] = None
            continue
        held[job] = held.get(job, 0) + 1
        total[job] = total.get(job, 0) + b
    for gene in genes.values():
        if not gene.new or held.get(gene.id):
            continue
        free = [i for i, s in enumerate(slots) if s is None]
        if not free:
            donor = max(held, key=lambda k: held[k], default=None)
            if donor is None or held[donor] < 2:
                continue
            free = [max(i for i, s in enumerate(slots) if s is not None and s[0] == donor)]
            held[donor] -= 1
        slots[free[0]] = (gene.id, gene.local)
        held[gene.id] = 1
    _fill(slots, held, genes, remaining, rng)
    return reorder(_bounded(slots, genes))


def _bounded(slots: list[Slot | None], genes: Mapping[str, Gene]) -> Genome:
    by_job: dict[str, list[int]] = {}
    for i, slot in enumerate(slots):
        if slot is not None:
            by_job.setdefault(slot[0], []).append(i)
    out = list(slots)
    for job, where in by_job.items():
        fitted = fit([slots[i][1] for i in where], genes[job])
        for i, b in zip(where, fitted, strict=True):
            out[i] = (job, b)
    return tuple(out)


def _fill(
    slots: list[Slot | None],
    held: dict[str, int],
    genes: Mapping[str, Gene],
    remaining: Mapping[str, float],
    rng: np.random.Generator,
) -> None:
    last: dict[str, int] = {}
    total: dict[str, int] = {}
    for slot in slots:
        if slot is not None:
            last[slot[0]] = slot[1]
            total[slot[0]] = total.get(slot[0], 0) + slot[1]
    free = [i for i, s in enumerate(slots) if s is None]
    for i in free:
        ids, gains, news = [], [], []
        for gene in genes.values():
            g = held.get(gene.id, 0)
            if g >= most_gpus(gene):
                continue
            b, worker = total.get(gene.id, 0), last.get(gene.id, gene.local)
            gain = gene.rate(g + 1, b + worker) - gene.rate(g, b)
            ids.append(gene.id)
            gains.append(max(gain, 0.0) / remaining[gene.id])
            news.append(worker)
        if not ids:
            return
        total_gain = sum(gains)
        if total_gain <= 0:
            k = int(rng.integers(len(ids)))
        else:
            k = int(rng.choice(len(ids), p=np.asarray(gains) / total_gain))
        pick = ids[k]
        slots[i] = (pick, news[k])
        held[pick] = held.get(pick, 0) + 1
        total[pick] = total.get(pick, 0) + news[k]
        last[pick] = news[k]


def utilisation(genomes: Sequence[Genome], genes: Sequence[Gene], draws: np.ndarray) -> np.ndarray:
    """Eq. 8 for every genome under every draw: ``draws[j, d]`` is job ``genes[j]``'s remaining
    samples in draw ``d``; the result ``[c, d]`` is schedule ``c``'s utilisation (GPU-seconds)."""
    index = {g.id: k for k, g in enumerate(genes)}
    cost = np.zeros((len(genomes), len(genes)))
    for c, genome in enumerate(genomes):
        global_batch = batches(genome)
        for job, g in counts(genome).items():
            gene = genes[index[job]]
            rate = gene.rate(g, global_batch[job])
            cost[c, index[job]] = g / rate * gene.penalty  # g_j / X_j(g_j, b_j)
    return cost @ draws


def select(scores: np.ndarray, size: int) -> list[int]:
    """Selection by sampled score (Alg. 1 applied to the population): draw after draw, the
    schedule with the smallest utilisation in that draw not yet chosen joins, until ``size``."""
    ranked = np.argsort(scores, axis=0, kind="stable")
    chosen: list[int] = []
    seen: set[int] = set()
    pointers = [0] * scores.shape[1]
    while len(chosen) < min(size, scores.shape[0]):
        for d in range(scores.shape[1]):
            while pointers[d] < scores.shape[0] and int(ranked[pointers[d], d]) in seen:
                pointers[d] += 1
            if pointers[d] < scores.shape[0] and len(chosen) < size:
                pick = int(ranked[pointers[d], d])
                chosen.append(pick)
                seen.add(pick)
    return chosen


def switching(
    genomes: Sequence[Genome],
    held: Mapping[str, tuple[int, int]],
    pause_s: Mapping[str, float],
    rescale_s: float = 0.0,
) -> np.ndarray:
    """Ours: the GPU-seconds a schedule loses to pauses against what each running job holds
    now, ``held``: job -> (GPUs, global batch). ``g * pause`` for every job whose GPU count
    changes (``g`` its new count, or its old one when it is preempted; ``pause_s`` per job, a
    checkpoint-restart), ``g * rescale_s`` for one whose batch alone changes (in place)."""
    out = np.zeros(len(genomes))
    for c, genome in enumerate(genomes):
        n, b = counts(genome), batches(genome)
        for job, (have, batch) in held.items():
            g = n.get(job, 0)
            if g != have:
                out[c] += (g or have) * pause_s[job]
            elif b.get(job, 0) != batch:
                out[c] += g * rescale_s
    return out
