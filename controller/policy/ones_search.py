"""ONES' evolutionary search (§3.2.2): schedules as genomes, the four operators, selection.

A genome is a tuple with one entry per GPU of the cluster (node-major order): the id of the
job that GPU serves, or None. What a job gets is its GPU count there; the batch follows from
the count and the job's limit (:class:`Gene`). Every operator is a pure function of its inputs
and a ``numpy.random.Generator`` the caller seeds.

Reconstructions (the text lost the symbols; ``docs/ones.md`` says why):
- Eq. 8 (SRUF): a schedule's utilisation is ``sum_j g_j * T_j * penalty_j`` over its jobs,
  ``T_j = R_j / X_j(g_j)`` (Eq. 5, remaining samples over throughput) and
  ``R_j = S_j (1 - p_j) / p_j`` (Eq. 7, samples processed ``S_j``, sampled progress ``p_j``).
- The gain that picks the job an idle GPU goes to (refresh, Fig. 7): the completion rate it
  adds, ``(X_j(g + 1) - X_j(g)) / R_j`` (a waiting job: ``X_j(1) / R_j``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Genome = tuple[str | None, ...]


@dataclass(frozen=True)
class Gene:
    """What the search knows of one job: the most GPUs it may hold now (its batch limit over
    its per-GPU batch), its throughput on 1..cap GPUs at the batch it would get there (samples
    per second), the samples it has processed and its score penalty (scale-down, §3.3.2)."""

    id: str
    cap: int
    throughput: tuple[float, ...]  # [g - 1]: on g GPUs
    samples: float
    penalty: float = 1.0
    new: bool = False  # arrived and never ran: gets a GPU first (refresh step 3)

    def rate(self, gpus: int) -> float:
        return self.throughput[min(gpus, self.cap) - 1] if gpus > 0 else 0.0


def counts(genome: Genome) -> dict[str, int]:
    out: dict[str, int] = {}
    for job in genome:
        if job is not None:
            out[job] = out.get(job, 0) + 1
    return out


def reorder(genome: Genome) -> Genome:
    """Pack each job's GPUs together, jobs in the order they first occur (Fig. 10)."""
    n = counts(genome)
    packed: list[str | None] = []
    for job in dict.fromkeys(j for j in genome if j is not None):
        packed.extend([job] * n[job])
    return tuple(packed + [None] * (len(genome) - len(packed)))


def crossover(a: Genome, b: Genome, rng: np.random.Generator) -> tuple[Genome, Genome]:
    """Uniform crossover (Fig. 8): on each GPU, one child inherits ``a``'s job and the other
    ``b``'s, which child decided by a fair coin."""
    flips = rng.random(len(a)) < 0.5
    first = tuple(y if f else x for x, y, f in zip(a, b, flips, strict=True))
    second = tuple(x if f else y for x, y, f in zip(a, b, flips, strict=True))
    return first, second


def mutate(genome: Genome, rate: float, rng: np.random.Generator) -> Genome:
    """Uniform mutation (Fig. 9): each job of the schedule is preempted (all its GPUs freed)
    with probability ``rate``; refresh fills the freed GPUs."""
    jobs = list(dict.fromkeys(j for j in genome if j is not None))
    dropped = {j for j, u in zip(jobs, rng.random(len(jobs)), strict=True) if u < rate}
    return tuple(None if j in dropped else j for j in genome)


def refresh(
    genome: Genome,
    genes: Mapping[str, Gene],
    remaining: Mapping[str, float],
    rng: np.random.Generator,
) -> Genome:
    """Bring a schedule up to date (§3.2.2 Refresh): (1) free the GPUs of jobs that ended,
    (2) scale down every job above its cap, (3) give each new job one GPU, free ones first,
    else taken from the job holding the most, (4) give each idle GPU to a job below its cap
    drawn with probability proportional to its gain (module docstring), ``remaining`` being
    each job's sampled remaining samples; then reorder."""
    slots: list[str | None] = [j if j in genes else None for j in genome]
    held: dict[str, int] = {}
    for i, job in enumerate(slots):
        if job is not None:
            held[job] = held.get(job, 0) + 1
            if held[job] > genes[job].cap:
                slots[i] = None
                held[job] -= 1
    for gene in genes.values():
        if not gene.new or held.get(gene.id):
            continue
        free = [i for i, j in enumerate(slots) if j is None]
        if not free:
            donor = max(held, key=lambda k: held[k], default=None)
            if donor is None or held[donor] < 2:
                continue
            free = [max(i for i, j in enumerate(slots) if j == donor)]
            held[donor] -= 1
        slots[free[0]] = gene.id
        held[gene.id] = 1
    _fill(slots, held, genes, remaining, rng)
    return reorder(tuple(slots))


def _fill(
    slots: list[str | None],
    held: dict[str, int],
    genes: Mapping[str, Gene],
    remaining: Mapping[str, float],
    rng: np.random.Generator,
) -> None:
    free = [i for i, j in enumerate(slots) if j is None]
    for i in free:
        ids, gains = [], []
        for gene in genes.values():
            g = held.get(gene.id, 0)
            if g < gene.cap:
                ids.append(gene.id)
                gains.append(max(gene.rate(g + 1) - gene.rate(g), 0.0) / remaining[gene.id])
        if not ids:
            return
        total = sum(gains)
        if total <= 0:
            pick = ids[int(rng.integers(len(ids)))]
        else:
            pick = ids[int(rng.choice(len(ids), p=np.asarray(gains) / total))]
        slots[i] = pick
        held[pick] = held.get(pick, 0) + 1


def utilisation(genomes: Sequence[Genome], genes: Sequence[Gene], draws: np.ndarray) -> np.ndarray:
    """Eq. 8 for every genome under every draw: ``draws[j, d]`` is job ``genes[j]``'s remaining
    samples in draw ``d``; the result ``[c, d]`` is schedule ``c``'s utilisation (GPU-seconds)."""
    index = {g.id: k for k, g in enumerate(genes)}
    cost = np.zeros((len(genomes), len(genes)))
    for c, genome in enumerate(genomes):
        for job, g in counts(genome).items():
            gene = genes[index[job]]
            cost[c, index[job]] = g / gene.rate(g) * gene.penalty  # g_j / X_j(g_j)
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
    genomes: Sequence[Genome], held: Mapping[str, int], pause_s: Mapping[str, float]
) -> np.ndarray:
    """Ours: the GPU-seconds a schedule loses to pauses against the allocation ``held`` now,
    ``g * pause`` for every running job whose GPU count changes (``g`` its new count, or its
    old one when it is preempted), ``pause_s`` per job (a checkpoint-restart)."""
    out = np.zeros(len(genomes))
    for c, genome in enumerate(genomes):
        n = counts(genome)
        for job, have in held.items():
            g = n.get(job, 0)
            if g != have:
                out[c] += (g or have) * pause_s[job]
    return out
