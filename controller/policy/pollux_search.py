"""PolluxSched's search (Qiao et al., OSDI 2021, §4.2): a genetic algorithm over
allocation matrices ``A[j, n]`` (GPUs of job ``j`` on node ``n``).

Fitness: the generalized mean with p = -1 of SPEEDUP_j = max_m GOODPUT_j(A_j, m) /
max_m GOODPUT_j(a_fair, m), times REALLOC_FACTOR_j = (T_j - R_j delta) / (T_j + delta) for a job
whose allocation changes while it holds GPUs. Where a job gets no GPUs its speedup is 0 and
the p = -1 mean is 0 (ours, for jobs outnumbering GPUs): fitness ranks allocations first by
how many jobs run, then by the p = -1 mean over those (a speedup floored at ``FLOOR``), which
is the same order as the paper's wherever some allocation runs every job.

Operators: crossover takes each job's row from one parent or the other; mutation changes one
node's count of a job or re-packs the job at a random size within its bounds; repair clips
to node capacity, to each job's bounds (0, or between its least and most GPUs) and to the
interference rule (§4.2: no node is shared by two jobs that each span several nodes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOOR = 1e-3  # ours: the least speedup counted in the p = -1 mean (a realloc factor of 0)


@dataclass(frozen=True)
class Problem:
    """One scheduling round, jobs in a fixed order.

    ``capacity`` (N,) GPUs per node; ``low``/``high`` (J,) the fewest and most GPUs a running
    job may hold; ``want`` (J,) the size the seed gives a waiting job; ``goodput`` (J, K+1, 2)
    the best goodput on k GPUs on one node (``[..., 0]``) or several (``[..., 1]``); ``fair``
    (J,) the best goodput at the fair share; ``current`` (J, N) the allocation now;
    ``realloc`` (J,) the factor charged when a job holding GPUs is moved."""

    capacity: np.ndarray
    low: np.ndarray
    high: np.ndarray
    want: np.ndarray
    goodput: np.ndarray
    fair: np.ndarray
    current: np.ndarray
    realloc: np.ndarray

    @property
    def jobs(self) -> int:
        return len(self.low)


def speedups(problem: Problem, pop: np.ndarray) -> np.ndarray:
    """SPEEDUP_j of every job in each allocation of ``pop`` (P, J, N) -> (P, J)."""
    k = pop.sum(axis=2)
    multi = (np.count_nonzero(pop, axis=2) > 1).astype(int)
    rows = np.arange(problem.jobs)[None, :]
    good = problem.goodput[rows, np.minimum(k, problem.goodput.shape[1] - 1), multi]
    out = good / problem.fair[None, :]
    held = problem.current.sum(axis=1) > 0
    moved = np.any(pop != problem.current[None], axis=2) & held[None, :]
    return np.where(moved, out * problem.realloc[None, :], out)


def fitness(problem: Problem, pop: np.ndarray) -> np.ndarray:
    """One number per allocation ordering as the module docstring says: the count of
    running jobs plus the p = -1 mean of their speedups mapped into [0, 1)."""
    s = speedups(problem, pop)
    running = pop.sum(axis=2) > 0
    count = running.sum(axis=1)
    inverse = np.where(running, 1.0 / np.maximum(s, FLOOR), 0.0).sum(axis=1)
    mean = np.where(count > 0, count / np.maximum(inverse, 1e-300), 0.0)
    return count + mean / (1.0 + mean)


def power_mean(values: np.ndarray, p: float = -1.0) -> float:
    """The generalized mean ((1/J) sum v^p)^(1/p); 0 when p < 0 and any value is 0."""
    values = np.asarray(values, dtype=float)
    if p < 0 and np.any(values <= 0):
        return 0.0
    return float(np.mean(values**p) ** (1.0 / p))


def realloc_factor(age_s: float, restarts: int, delay_s: float) -> float:
    """REALLOC_FACTOR = (T - R delta) / (T + delta) (§4.2), at least 0."""
    return max(0.0, (age_s - restarts * delay_s) / (age_s + delay_s)) if delay_s > 0 else 1.0


def repair(problem: Problem, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Make one allocation (J, N) feasible (module docstring), in place; returns it. (Each
    rule is checked before its loop: the search repairs thousands of allocations a round.)"""
    np.minimum(a, problem.capacity[None, :], out=a)
    np.maximum(a, 0, out=a)
    spread = (a > 0).sum(axis=1) > 1
    if spread.sum() > 1:  # no node shared by two jobs that span several nodes
        for n in np.flatnonzero((a[spread] > 0).sum(axis=0) > 1):
            shared = np.flatnonzero(spread & (a[:, n] > 0))
            keep = shared[np.argmax(a[shared, n])]
            a[shared[shared != keep], n] = 0
    k = a.sum(axis=1)
    above = k > problem.high
    if above.any():
        for j in np.flatnonzero(above):
            excess = k[j] - problem.high[j]
            for n in np.argsort(a[j], kind="stable"):  # the job's smallest shares go first
                cut = min(excess, a[j, n])
                a[j, n] -= cut
                excess -= cut
                if not excess:
                    break
    full = a.sum(axis=0) > problem.capacity
    if full.any():
        for n in np.flatnonzero(full):
            over = a[:, n].sum() - problem.capacity[n]
            while over > 0:
                j = rng.choice(np.flatnonzero(a[:, n]))
                a[j, n] -= 1
                over -= 1
    k = a.sum(axis=1)
    short = (k > 0) & (k < problem.low)
    if short.any():
        a[short] = 0
    return a


def pack(
    capacity: np.ndarray, free: np.ndarray, count: int, rng: np.random.Generator
) -> np.ndarray:
    """A row placing ``count`` GPUs: on one node with room (the fullest that fits), else over
    the nodes with the most room; zeros when ``free`` holds too few."""
    row = np.zeros_like(capacity)
    if count <= 0 or free.sum() < count:
        return row
    fits = np.flatnonzero(free >= count)
    if len(fits):
        row[fits[np.argmin(free[fits] + rng.random(len(fits)) * 0.5)]] = count
        return row
    for n in np.argsort(-free, kind="stable"):
        row[n] = min(free[n], count - row.sum())
        if row.sum() == count:
            break
    return row


def seed(problem: Problem, rng: np.random.Generator) -> np.ndarray:
    """Ours: the current allocation with waiting jobs packed, in order, onto the GPUs left
    at their ``want`` (or what is left, down to their least)."""
    a = problem.current.copy()
    free = np.maximum(problem.capacity - a.sum(axis=0), 0)
    for j in np.flatnonzero(a.sum(axis=1) == 0):
        count = min(int(problem.want[j]), int(free.sum()))
        if count < problem.low[j] or count <= 0:
            continue
        row = pack(problem.capacity, free, count, rng)
        a[j] = row
        free -= row
    return repair(problem, a, rng)


def mutate(problem: Problem, a: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Each job's row changes with probability ``rate``: a random node's count (half the
    time), or the job re-packed at a random size in [least, most] onto the room left, or no
    GPUs; returns a new array."""
    b = a.copy()
    for j in np.flatnonzero(rng.random(problem.jobs) < rate):
        roll = rng.random()
        if roll < 0.5:
            n = rng.integers(len(problem.capacity))
            b[j, n] = rng.integers(0, problem.capacity[n] + 1)
        elif roll < 0.85:
            b[j] = 0
            size = int(rng.integers(problem.low[j], problem.high[j] + 1))
            room = np.maximum(problem.capacity - b.sum(axis=0), 0)
            b[j] = pack(problem.capacity, room, size, rng)
        else:
            b[j] = 0
    return b


def crossover(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each job's row from parent ``a`` or ``b`` with even odds."""
    mask = rng.random(a.shape[0]) < 0.5
    return np.where(mask[:, None], a, b)


def evolve(
    problem: Problem,
    population: list[np.ndarray],
    size: int,
    generations: int,
    rate: float,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], np.ndarray]:
    """``generations`` rounds of crossover, mutation and repair, keeping the ``size`` fittest
    (parents included); returns the population and its fittest allocation. The current
    allocation and :func:`seed` always join the first round."""
    pop = [repair(problem, p.copy(), rng) for p in population]
    pop += [repair(problem, problem.current.copy(), rng), seed(problem, rng)]
    for _ in range(generations):
        children = []
        for _ in range(size):
            i, j = rng.integers(len(pop), size=2)
            child = mutate(problem, crossover(pop[i], pop[j], rng), rate, rng)
            children.append(repair(problem, child, rng))
        pool = pop + children
        scores = fitness(problem, np.stack(pool))
        order = np.argsort(-scores, kind="stable")[:size]
        pop = [pool[i] for i in order]
    scores = fitness(problem, np.stack(pop))
    return pop, pop[int(np.argmax(scores))]
