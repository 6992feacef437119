"""Chic-style workloads (Chic §6.1; issue 16): Poisson arrivals at a rate per hour, each job one
of :data:`simulator.ps.MODELS` uniformly, trained for a number of iterations uniform in
100..200. Seeded: every draw comes from the ``numpy.random.Generator`` passed in.

A sequence is written and read as CSV (``arrival_s,model,iterations``) by
``mlsched chic-simulate --write-trace``; docs/chic.md gives the command per figure.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.ps import MODELS, model_index

MIN_ITERATIONS, MAX_ITERATIONS = 100, 200  # Chic §6.1
FIELDS = ("arrival_s", "model", "iterations")


@dataclass(frozen=True)
class ChicJob:
    arrival_s: float
    model: int  # index into simulator.ps.MODELS
    iterations: int


def generate(rate_per_hour: float, jobs: int, rng: np.random.Generator) -> tuple[ChicJob, ...]:
    """``jobs`` jobs, the first arriving at 0, then exponential gaps of mean 1/rate hours."""
    if rate_per_hour <= 0 or jobs <= 0:
        raise ValueError(f"need a positive rate and job count, got {rate_per_hour}, {jobs}")
    gaps = rng.exponential(3600.0 / rate_per_hour, size=jobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    models = rng.integers(0, len(MODELS), size=jobs)
    iterations = rng.integers(MIN_ITERATIONS, MAX_ITERATIONS + 1, size=jobs)
    return tuple(
        ChicJob(float(a), int(m), int(n))
        for a, m, n in zip(arrivals, models, iterations, strict=True)
    )


def sequences(
    rate_per_hour: float, count: int, jobs: int, seed: int
) -> tuple[tuple[ChicJob, ...], ...]:
    """``count`` sequences from one seeded generator (training, validation or test sets are
    told apart by their seeds)."""
    rng = np.random.default_rng(seed)
    return tuple(generate(rate_per_hour, jobs, rng) for _ in range(count))


def write_csv(path: Path, jobs: Sequence[ChicJob]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(FIELDS)
        for job in jobs:
            out.writerow((f"{job.arrival_s:.3f}", MODELS[job.model].name, job.iterations))


def read_csv(path: Path) -> tuple[ChicJob, ...]:
    """A sequence written by :func:`write_csv`; ValueError naming the line of a bad row."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    jobs = []
    for line, row in enumerate(rows, start=2):
        try:
            job = ChicJob(
                float(row["arrival_s"]), model_index(row["model"]), int(row["iterations"])
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}:{line}: {e}") from None
        if job.iterations <= 0 or job.arrival_s < 0:
            raise ValueError(f"{path}:{line}: need iterations > 0 and arrival_s >= 0")
        jobs.append(job)
    return tuple(sorted(jobs, key=lambda j: j.arrival_s))
