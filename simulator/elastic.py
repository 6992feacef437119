"""Elastic jobs from measured tables (issue 14): the Pollux and ONES trace formats.

Speed against the GPU count comes from Pollux's measurements
(``pollux/traces/<app>/placements.csv``: step time per packed placement of 4-GPU nodes, e.g.
``"24"`` = 6 GPUs over two nodes, and per local batch; ``scalability.csv``: 6-64 replicas over
6-16 nodes) at the job's fixed global batch: the local batch is ``global / g``, the step time is
interpolated linearly in the local batch between the measured rows of that placement, and GPU
counts without a row are interpolated in throughput. Loss curves are measured too: Pollux's
``validation-<batch>.csv`` (the metric of the batch closest to the job's, as a loss: the metric
itself where it falls, its negative where it rises) and ONES' per-epoch losses
(``ones/job_history.csv``).

``load_pollux(path, data)`` reads ``workload-*.csv`` (``name,time,application,num_replicas,
batch_size``; seconds, global batch); ``load_ones(path, data)`` reads ``trace_1.csv``
(``time,model,task,epoch_size,patience,batch_size,lr,max_lr,target_acc,num_gpus``; seconds,
per-GPU batch). ``data`` is the shared data folder (holding ``pollux/`` and ``ones/``).
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from simulator.jobmodel import SpeedModel, TraceJobModel
from simulator.trace import TraceError
from simulator.types import ElasticProfile, TraceJob

NODE_GPUS = 4  # Pollux's measurements are on 4-GPU nodes
STRETCH = 2  # ours: an elastic job may grow to twice its request (and shrink to 1 GPU)
ONES_APP = {
    "imagenet": "imagenet",
    "cifar": "cifar10",
    "sst2": "bert",
    "mrpc": "bert",
    "cola": "bert",
}


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class AppTables:
    """One Pollux application's measurements."""

    steps: dict[str, tuple[tuple[float, float], ...]]  # placement -> (local batch, step time)
    curves: dict[int, tuple[tuple[int, float], ...]]  # global batch -> (iteration, metric)

    def step_time(self, gpus: int, global_batch: int) -> float | None:
        rows = self.steps.get(placement_key(gpus))
        if not rows:
            return None
        local = global_batch / gpus
        if len(rows) == 1 or local <= rows[0][0]:
            return rows[0][1]  # never faster than the smallest batch measured
        if local >= rows[-1][0]:
            return rows[-1][1] * local / rows[-1][0]  # beyond the largest: time grows with it
        xs = [b for b, _ in rows]
        i = bisect.bisect_left(xs, local)
        (b0, t0), (b1, t1) = rows[i - 1], rows[i]
        return t0 + (t1 - t0) * (local - b0) / (b1 - b0)

    def speedups(self, requested: int, most: int, global_batch: int) -> tuple[float, ...]:
        """Throughput on 1..most GPUs over that on ``requested`` (interpolated where no row)."""
        known = {
            g: global_batch / t
            for g in range(1, most + 1)
            if (t := self.step_time(g, global_batch)) is not None and t > 0
        }
        gs = sorted(known)
        out = []
        for g in range(1, most + 1):
            if g in known:
                out.append(known[g])
                continue
            j = bisect.bisect_left(gs, g)
            lo, hi = gs[max(j - 1, 0)], gs[min(j, len(gs) - 1)]
            y = (
                known[lo]
                if hi == lo
                else known[lo] + (known[hi] - known[lo]) * (g - lo) / (hi - lo)
            )
            out.append(y)
        base = out[requested - 1]
        return tuple(v / base for v in out)


def placement_key(gpus: int) -> str:
    """Pollux's name of ``gpus`` GPUs packed onto 4-GPU nodes: per-node counts, ascending."""
    counts = [NODE_GPUS] * (gpus // NODE_GPUS) + ([gpus % NODE_GPUS] if gpus % NODE_GPUS else [])
    return "".join(str(c) for c in sorted(counts))


@cache
def app_tables(data: Path, app: str) -> AppTables:
    folder = data / "pollux" / "traces" / app
    steps: dict[str, list[tuple[float, float]]] = {}
    for row in _read(folder / "placements.csv"):
        steps.setdefault(row["placement"], []).append(
            (float(row["local_bsz"]), float(row["step_time"]))
        )
    for row in _read(folder / "scalability.csv"):  # beyond 16 GPUs: the fewest nodes measured
        replicas, nodes = int(row["num_replicas"]), int(row["num_nodes"])
        if replicas > 4 * NODE_GPUS and nodes == math.ceil(replicas / NODE_GPUS):
            key = placement_key(replicas)
            steps.setdefault(key, []).append((float(row["local_bsz"]), float(row["step_time"])))
    curves = {}
    for path in folder.glob("validation-*.csv"):
        rows = _read(path)
        curves[int(path.stem.split("-")[1])] = tuple(
            (int(r["iteration"]), float(r["metric"])) for r in rows
        )
    return AppTables({k: tuple(sorted(v)) for k, v in steps.items()}, curves)


def _as_loss(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Metric points as a loss: kept where the metric falls, negated where it rises."""
    sign = -1.0 if points[-1][1] > points[0][1] else 1.0
    return tuple((x, sign * y) for x, y in points)


def _profile(
    app: AppTables, requested: int, batch: int, loss: tuple[tuple[float, float], ...], src: str
) -> ElasticProfile:
    most = min(STRETCH * requested, max(batch, 1), 64)
    most = max(most, requested)
    return ElasticProfile(1, most, app.speedups(requested, most, batch), loss, src)


def load_pollux(path: str | Path, data: str | Path) -> list[TraceJob]:
    """A Pollux workload: each job trains its application's curve at the nearest measured
    batch to its last iteration there; duration from the measured step time."""
    data, jobs = Path(data), []
    for line, row in enumerate(_read(Path(path)), start=2):
        try:
            app_name, gpus = row["application"], int(row["num_replicas"])
            batch, submit = int(row["batch_size"]), float(row["time"])
        except (KeyError, ValueError) as exc:
            raise TraceError(path, line, None, f"bad row: {exc}") from None
        app = app_tables(data, app_name)
        nearest = min(app.curves, key=lambda b: (abs(math.log(b / batch)), b))
        curve = app.curves[nearest]
        last = curve[-1][0]
        iterations = round(last * nearest / batch)  # the same samples at the job's batch
        step = app.step_time(gpus, batch)
        if step is None or gpus < 1:
            raise TraceError(path, line, "num_replicas", f"no measurement for {gpus} GPUs")
        loss = _as_loss([(0.0, curve[0][1])] + [(k / last, v) for k, v in curve])
        jobs.append(
            TraceJob(
                id=row["name"],
                user="",
                submit_s=submit,
                duration_s=iterations * step,
                gpus=gpus,
                model=app_name,
                iterations=iterations,
                elastic=_profile(app, gpus, batch, loss, f"pollux/{app_name}"),
            )
        )
    return sorted(jobs, key=lambda j: j.submit_s)


@dataclass(frozen=True)
class OnesCurve:
    epoch_size: int
    initial: float
    losses: tuple[float, ...]
    accs: tuple[float, ...]
    throughput: float  # samples per second, mean over the epochs

    @property
    def family(self) -> str:
        return "bert" if self.initial < 1.0 else "imagenet"


@cache
def ones_curves(data: Path) -> tuple[OnesCurve, ...]:
    by_id: dict[str, list[dict[str, str]]] = {}
    for row in _read(data / "ones" / "job_history.csv"):
        by_id.setdefault(row["id"], []).append(row)
    out = []
    for rows in by_id.values():
        rows.sort(key=lambda r: int(r["epoch"]))
        out.append(
            OnesCurve(
                int(rows[0]["epoch_size"]),
                float(rows[0]["initial_loss"]),
                tuple(float(r["loss"]) for r in rows),
                tuple(float(r["acc"]) for r in rows),
                sum(float(r["throughput"]) for r in rows) / len(rows),
            )
        )
    return tuple(out)


def load_ones(path: str | Path, data: str | Path) -> list[TraceJob]:
    """The ONES trace: bert and ImageNet jobs take the ONES history of their family with the
    closest epoch size (epochs until ``target_acc``, its throughput); CIFAR jobs, which the
    history lacks, take Pollux's cifar10 curve (to ``target_acc``) and step times."""
    data, jobs = Path(data), []
    for line, row in enumerate(_read(Path(path)), start=2):
        try:
            gpus, per_gpu = int(row["num_gpus"]), int(row["batch_size"])
            epoch, target = int(row["epoch_size"]), float(row["target_acc"])
            submit, task = float(row["time"]), row["task"]
        except (KeyError, ValueError) as exc:
            raise TraceError(path, line, None, f"bad row: {exc}") from None
        if task not in ONES_APP:
            raise TraceError(path, line, "task", f"unknown task {task!r}")
        app = app_tables(data, ONES_APP[task])
        batch = per_gpu * gpus
        if task == "cifar":
            loss, seconds, iterations = _pollux_cifar(app, batch, target, gpus)
        else:
            loss, seconds, iterations = _ones_history(data, task, epoch, target, batch)
        jobs.append(
            TraceJob(
                id=f"{line - 2}",
                user="",
                submit_s=submit,
                duration_s=seconds,
                gpus=gpus,
                model=f"{row['model']}-{task}",
                iterations=iterations,
                elastic=_profile(app, gpus, batch, loss, f"ones/{task}"),
            )
        )
    return sorted(jobs, key=lambda j: j.submit_s)


def _ones_history(
    data: Path, task: str, epoch: int, target: float, batch: int
) -> tuple[tuple[tuple[float, float], ...], float, int]:
    family = "bert" if ONES_APP[task] == "bert" else "imagenet"
    pool = [c for c in ones_curves(data) if c.family == family]
    curve = min(pool, key=lambda c: (abs(math.log(c.epoch_size / epoch)), -len(c.losses)))
    reached = [i for i, a in enumerate(curve.accs) if a >= target]
    epochs = (reached[0] if reached else len(curve.accs) - 1) + 1
    epochs = max(epochs, 2)
    losses = curve.losses[:epochs]
    points = [(k / epochs, v) for k, v in enumerate(losses, start=1)]
    if curve.initial >= losses[0]:
        points.insert(0, (0.0, curve.initial))
    else:
        points[0] = (0.0, losses[0])
    samples = epochs * epoch
    return tuple(points), samples / curve.throughput, max(1, samples // batch)


def _pollux_cifar(
    app: AppTables, batch: int, target: float, gpus: int
) -> tuple[tuple[tuple[float, float], ...], float, int]:
    nearest = min(app.curves, key=lambda b: (abs(math.log(b / batch)), b))
    curve = app.curves[nearest]
    end = next((i for i, (_, v) in enumerate(curve) if v >= target), len(curve) - 1)
    end = max(end, 2)
    last = curve[end][0]
    loss = _as_loss([(0.0, curve[0][1])] + [(k / last, v) for k, v in curve[: end + 1]])
    iterations = max(1, round(last * nearest / batch))
    step = app.step_time(gpus, batch) or 1.0
    return loss, iterations * step, iterations


class ElasticJobModel(TraceJobModel):
    """:class:`TraceJobModel` (suspend and resume costs, rigid jobs) with elastic jobs' speed
    and iteration time from their profile; their accuracy is not modelled (``loss_at``)."""

    def __init__(self, source: str = "", **kwargs) -> None:
        super().__init__(**kwargs)
        self._source = source

    @property
    def speed_model(self) -> SpeedModel:
        return SpeedModel("table", self._source or None)

    def check_jobs(self, jobs: Sequence[TraceJob]) -> None:
        return None

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        if job.elastic is None:
            return super().speed(job, gpus, nodes)
        return job.elastic.speedup[min(gpus, len(job.elastic.speedup)) - 1]

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        if job.elastic is None:
            return super().iteration_time(job, gpus, nodes)
        t = job.duration_s / max(1, job.iterations) / self.speed(job, gpus, nodes)
        return t, t

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s if job.elastic is not None else super().work_s(job)

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        return None if job.elastic is not None else super().metric_at(job, fraction)


LOADERS: dict[str, Callable[[str | Path, str | Path], list[TraceJob]]] = {
    "ones": load_ones,
    "pollux": load_pollux,
}


def data_folder(trace: Path) -> Path:
    """The shared data folder of a trace under ``<data>/ones/`` or ``<data>/pollux/*/``."""
    for parent in trace.resolve().parents:
        if (parent / "pollux" / "traces").is_dir():
            return parent
    raise ValueError(f"{trace}: no pollux/traces folder above it (the measured tables)")
