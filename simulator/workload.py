"""Turning a trace into an evaluation workload (UniSched §IV-B, MLFS §4.1).

Pure functions over lists of :class:`~simulator.types.TraceJob`: each returns a new list (the
input is not changed) and draws only from the ``random.Random`` it is given, so a seed fixes
the result. Jobs keep their input order unless said otherwise.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise

from mlsched.model import Deadline, JobClass, MlfsSpec, StopOption
from simulator.types import ResourceDemand, TraceJob

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


# --- MLFS job features (MLFS §4.1, §4.3) -------------------------------------------------------

URGENCY_LEVELS = (1, 10)  # §4.3: urgency levels drawn uniformly (integers, m = 10 levels)
# §4.1: each job runs one of five algorithms; SVM is data-parallel only, MLP and AlexNet are cut
# sequentially, LSTM and ResNet per layer: 4 of 5 jobs (of 2 GPUs or more) are model-parallel,
# half of them chains, half layered graphs.
MODEL_PARALLEL_FRACTION = 0.8
LAYER_WIDTH = 2  # partitions per layer of a layered graph
PARTITION_SIZE_RANGE = (0.5, 1.5)  # relative partition sizes before normalisation (ours)
# Per-task load, shares of one server (ours; docs/simulator.md): 8 tasks of the same job
# overload CPU or bandwidth (sum > 0.9) when theirs is above 0.1125, about one 8-task job in
# four per resource; a node of mixed tasks rarely does.
GPU_UTIL_RANGE = (0.3, 0.85)
CPU_RANGE = (0.03, 0.14)
MEMORY_RANGE = (0.02, 0.10)
BANDWIDTH_RANGE = (0.02, 0.14)
COMM_MB_RANGE = (50.0, 100.0)  # §4.1: two values in [50, 100] MB per communication
# a^r_J: the accuracy after a fraction of the job's work drawn in this range (ours; the paper
# takes the trace's final accuracy, i.e. 1.0, which leaves MLF-C's option (iii) nothing to save)
REQUIRED_FRACTION_RANGE = (0.7, 1.0)

AccuracyAt = Callable[[TraceJob, float], float | None]


def partition_graph(
    count: int, shape: str, rng: random.Random
) -> tuple[tuple[float, ...], tuple[tuple[int, int], ...]]:
    """(sizes S_p / S^J, (parent, child) edges) of ``count`` partitions shaped ``"chain"``
    (0 -> 1 -> ... -> count-1) or ``"layered"`` (layers of ``LAYER_WIDTH`` partitions, every
    partition feeding every partition of the next layer; a chain when that makes fewer than
    two layers); sizes drawn in ``PARTITION_SIZE_RANGE`` and normalised to sum to 1."""
    if shape not in ("chain", "layered"):
        raise ValueError(f"unknown partition graph shape {shape!r}")
    raw = [rng.uniform(*PARTITION_SIZE_RANGE) for _ in range(count)]
    sizes = tuple(v / sum(raw) for v in raw)
    if shape == "chain" or count <= LAYER_WIDTH:
        return sizes, tuple((p, p + 1) for p in range(count - 1))
    layers = [list(range(i, min(count, i + LAYER_WIDTH))) for i in range(0, count, LAYER_WIDTH)]
    edges = tuple((a, b) for upper, lower in pairwise(layers) for a in upper for b in lower)
    return sizes, edges


def assign_mlfs_features(
    jobs: Sequence[TraceJob],
    rng: random.Random,
    *,
    model_parallel_fraction: float = MODEL_PARALLEL_FRACTION,
    accuracy_at: AccuracyAt | None = None,
) -> list[TraceJob]:
    """Give every job MLFS features and a resource demand (MLFS §4.1, §4.3).

    Per job, in this order of draws: urgency L^J, an integer uniform in ``URGENCY_LEVELS``;
    with probability ``model_parallel_fraction`` (jobs of 2 GPUs or more) a model-parallel
    graph of one partition per GPU (§4.1 "we also set the number of model partitions to this
    number"), a chain or a layered graph with equal odds (:func:`partition_graph`), else none
    (data parallel); per-task GPU utilisation, CPU, memory and bandwidth shares uniform in
    their ranges; two communication volumes in ``COMM_MB_RANGE`` (ring, partition edges); the
    required accuracy ``accuracy_at(job, f)``, ``f`` uniform in ``REQUIRED_FRACTION_RANGE``
    (none without ``accuracy_at``). Every job takes MLF-C's option (ii), OptStop, and lets the
    system switch it (§4.1: "we assume that all jobs use OptStop").
    """
    _check_fraction("model_parallel_fraction", model_parallel_fraction)
    out = []
    for job in jobs:
        urgency = float(rng.randint(*URGENCY_LEVELS))
        parallel = rng.random() < model_parallel_fraction
        chain = rng.random() < 0.5
        partitions: tuple[float, ...] = ()
        edges: tuple[tuple[int, int], ...] = ()
        if parallel and job.gpus >= 2:
            partitions, edges = partition_graph(job.gpus, "chain" if chain else "layered", rng)
        demand = ResourceDemand(
            gpu=rng.uniform(*GPU_UTIL_RANGE),
            cpu=rng.uniform(*CPU_RANGE),
            memory=rng.uniform(*MEMORY_RANGE),
            bandwidth=rng.uniform(*BANDWIDTH_RANGE),
            ring_mb=rng.uniform(*COMM_MB_RANGE),
            pipeline_mb=rng.uniform(*COMM_MB_RANGE),
        )
        fraction = rng.uniform(*REQUIRED_FRACTION_RANGE)
        required = None if accuracy_at is None else accuracy_at(job, fraction)
        mlfs = MlfsSpec(
            urgency=urgency,
            partitions=partitions,
            dependencies=edges,
            stop_option=StopOption.OPT_STOP,
            system_may_switch=True,
            required_accuracy=required,
        )
        out.append(replace(job, mlfs=mlfs, demand=demand))
    return out
