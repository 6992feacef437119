"""Turning a trace into an evaluation workload (UniSched §IV-B).

Pure functions over lists of :class:`~simulator.types.TraceJob`: each returns a new list (the
input is not changed) and draws only from the ``random.Random`` it is given, so a seed fixes
the result. Jobs keep their input order unless said otherwise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from mlsched.model import Deadline, JobClass
from simulator.types import TraceJob

# UniSched §IV-B: a strict deadline is drawn uniformly in [1.1, 2] x the duration; a soft-SLO
# job's first deadline D0 is drawn the same way, with extra deadlines at 1.1, 1.2 and 1.5 x D0.
DEADLINE_RANGE = (1.1, 2.0)
SOFT_DEADLINE_FACTORS = (1.0, 1.1, 1.2, 1.5)
# Rewards (§III-C2, §IV-B): meeting a strict deadline earns 100 ("Strict SLO jobs need to be
# finished before the deadlines (= 100)"); the soft extras earn 80, 50, 20. The paper gives no
# separate value for D0 of a soft job; it is "set in the same way as strict SLO jobs", so it
# earns 100 too (Chronus's MIX2 trace agrees: 10-8-5-2, a tenth of 100-80-50-20).
STRICT_REWARD = 100.0
SOFT_REWARDS = (100.0, 80.0, 50.0, 20.0)


def _check_fraction(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {value}")


def assign_slo(
    jobs: Sequence[TraceJob],
    rng: random.Random,
    strict_fraction: float,
    soft_fraction: float,
    *,
    deadline_range: tuple[float, float] = DEADLINE_RANGE,
) -> list[TraceJob]:
    """Give jobs service classes and deadlines as UniSched §IV-B does.

    ``round(n * strict_fraction)`` jobs, picked at random, become strict-SLO jobs with one
    deadline ``u * duration`` (``u`` uniform in ``deadline_range``, default [1.1, 2]), reward
    100. ``round(n * soft_fraction)`` others become soft-SLO jobs with deadlines
    ``D0, 1.1 D0, 1.2 D0, 1.5 D0`` (``D0`` drawn as for strict jobs) earning 100, 80, 50, 20:
    the paper states 80 / 50 / 20 for the extra deadlines and sets ``D0`` "in the same way as
    strict SLO jobs", whose reward is 100. All remaining jobs become best-effort without
    deadlines, whatever class they had. Deadlines are seconds after submission.
    """
    _check_fraction("strict_fraction", strict_fraction)
    _check_fraction("soft_fraction", soft_fraction)
    if strict_fraction + soft_fraction > 1.0 + 1e-9:
        raise ValueError(
            f"strict_fraction + soft_fraction must be at most 1, got "
            f"{strict_fraction} + {soft_fraction}"
        )
    lo, hi = deadline_range
    if not 1.0 <= lo <= hi:
        raise ValueError(f"deadline_range must satisfy 1 <= low <= high, got {deadline_range}")
    n = len(jobs)
    n_strict = round(n * strict_fraction)
    n_soft = min(round(n * soft_fraction), n - n_strict)
    chosen = rng.sample(range(n), n_strict + n_soft)
    classes = dict.fromkeys(chosen[:n_strict], JobClass.STRICT_SLO)
    classes.update(dict.fromkeys(chosen[n_strict:], JobClass.SOFT_SLO))
    out = []
    for i, job in enumerate(jobs):
        job_class = classes.get(i, JobClass.BEST_EFFORT)
        deadlines: tuple[Deadline, ...] = ()
        if job_class is not JobClass.BEST_EFFORT:
            first = rng.uniform(lo, hi) * job.duration_s
            if job_class is JobClass.STRICT_SLO:
                deadlines = (Deadline(first, STRICT_REWARD),)
            else:
                deadlines = tuple(
                    Deadline(first * k, r)
                    for k, r in zip(SOFT_DEADLINE_FACTORS, SOFT_REWARDS, strict=True)
                )
        out.append(replace(job, job_class=job_class, deadlines=deadlines))
    return out


def assign_stopping(
    jobs: Sequence[TraceJob], rng: random.Random, performance_fraction: float = 0.2
) -> list[TraceJob]:
    """Mark ``round(n * performance_fraction)`` random jobs performance-based, the rest
    iteration-based (UniSched §IV-B: 80 % iteration-based, 20 % performance-based)."""
    _check_fraction("performance_fraction", performance_fraction)
    n = len(jobs)
    chosen = set(rng.sample(range(n), round(n * performance_fraction)))
    return [replace(job, performance_based=i in chosen) for i, job in enumerate(jobs)]


def scale_density(jobs: Sequence[TraceJob], factor: float, rng: random.Random) -> list[TraceJob]:
    """Scale the job density of a trace by ``factor`` (UniSched Fig. 6c: 0.8 to 1.6).

    As in UniSched §V-B (after MLFS): ``factor < 1`` removes ``round(n * (1 - factor))`` jobs
    picked at random; ``factor > 1`` injects ``round(n * (factor - 1))`` copies of jobs drawn at
    random (with replacement). A copy keeps everything of its original (GPUs, duration, class,
    deadlines relative to its submission, model, stopping criterion) except its id,
    ``<original id>~<k>`` with ``k`` the copy's number, and its submission time, drawn
    uniformly within the trace's span [first, last submission]. Result sorted by submission
    time (ties keep input order, copies after originals).
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"density factor must be a positive number, got {factor}")
    n = len(jobs)
    if factor <= 1.0:
        drop = set(rng.sample(range(n), round(n * (1.0 - factor))))
        return sorted(
            (job for i, job in enumerate(jobs) if i not in drop), key=lambda j: j.submit_s
        )
    extra = round(n * (factor - 1.0))
    out = list(jobs)
    if extra and n:
        first = min(j.submit_s for j in jobs)
        last = max(j.submit_s for j in jobs)
        ids = {j.id for j in jobs}
        for k in range(extra):
            source = jobs[rng.randrange(n)]
            submit = rng.uniform(first, last)
            new_id = f"{source.id}~{k}"
            while new_id in ids:
                new_id += "~"
            ids.add(new_id)
            out.append(replace(source, id=new_id, submit_s=submit))
    out.sort(key=lambda j: j.submit_s)
    return out
