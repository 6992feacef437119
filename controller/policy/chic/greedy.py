"""Optimus' allocation as Chic §6.1 describes its baseline: every job in the system, in arrival
order, first gets one worker and one PS while they fit; then one worker or one PS at a time goes
to the job whose predicted remaining time falls the most per unit of the task's dominant
resource share, until nothing fits or no marginal gain is positive (Peng et al., EuroSys 2018,
§4.1, written from that description). Pure: jobs and capacity in, counts out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GreedyJob:
    remaining: float  # iterations
    worker: Sequence[float]
    ps: Sequence[float]
    time: Callable[[int, int], float]


def allocate(jobs: Sequence[GreedyJob], capacity: Sequence[float]) -> list[tuple[int, int]]:
    """(workers, servers) per job (module docstring)."""
    cap = np.asarray(capacity, dtype=float)
    used = np.zeros_like(cap)
    alloc = [(0, 0)] * len(jobs)
    for i, job in enumerate(jobs):
        need = np.asarray(job.worker, float) + np.asarray(job.ps, float)
        if np.all(used + need <= cap + 1e-9):
            used += need
            alloc[i] = (1, 1)
    while True:
        best, choice = 0.0, None
        for i, job in enumerate(jobs):
            w, p = alloc[i]
            if w == 0:
                continue
            now = job.remaining * job.time(w, p)
            for grow, demand in (((w + 1, p), job.worker), ((w, p + 1), job.ps)):
                d = np.asarray(demand, float)
                if np.any(used + d > cap + 1e-9):
                    continue
                share = float(np.max(np.divide(d, cap, out=np.zeros_like(d), where=cap > 0)))
                gain = (now - job.remaining * job.time(*grow)) / max(share, 1e-9)
                if gain > best:
                    best, choice = gain, (i, grow, d)
        if choice is None:
            return alloc
        i, grow, d = choice
        alloc[i] = grow
        used += d
