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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType

from simulator.jobmodel import SpeedModel, TraceJobModel
from simulator.trace import TraceError
from simulator.types import ElasticProfile, TraceJob

NODE_GPUS = 4  # Pollux's measurements are on 4-GPU nodes
RESCALE_S = 1.0  # ONES §4.3, Fig. 16: an in-place batch change pauses training about 1 s
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


@dataclass(frozen=True)
class BatchProfile(ElasticProfile):
    """An elastic job whose batch the scheduler picks (``elastic.batch: scheduler``, issue 15).

    ``batch``: the trace's global batch on ``gpus`` (its request), at which the trace's
    duration ``base_s`` and ``samples`` (samples to the target) hold; ``max_batch``: the largest
    the scheduler may pick; ``critical``: B_crit of the samples-to-target model
    E(b) = E_min (1 + b / B_crit) (:func:`critical_batch`); ``accuracy``: (fraction of work,
    validation metric) points; ``epoch``: samples per epoch; ``tables``: the step times of the
    job's Pollux application."""

    batch: int = 0
    gpus: int = 1
    base_s: float = 1.0
    max_batch: int = 0
    samples: float = 0.0
    critical: float = math.inf
    accuracy: tuple[tuple[float, float], ...] = ()
    epoch: int = 0
    tables: AppTables | None = field(default=None, compare=False, repr=False)

    def samples_needed(self, batch: int) -> float:
        """E(b): samples to the target at global batch ``b`` (E(batch) = ``samples``)."""
        if math.isinf(self.critical):
            return self.samples
        return self.samples * (self.critical + batch) / (self.critical + self.batch)

    def throughput(self, gpus: int, batch: int) -> float:
        """Samples per second on ``gpus`` packed GPUs at global batch ``batch``: the measured
        rate (batch / step time) over the rate at the trace's allocation, times the trace's
        throughput (``samples / base_s``)."""
        own = self.samples / self.base_s
        if self.tables is None:
            return own * self.speedup[min(gpus, len(self.speedup)) - 1]
        return own * _rate(self.tables, gpus, batch) / _rate(self.tables, self.gpus, self.batch)

    def speed(self, gpus: int, batch: int) -> float:
        """Progress per second over that at the trace's allocation: the throughput ratio times
        E(batch) / E(b) (a larger batch needs more samples)."""
        ratio = self.throughput(gpus, batch) * self.base_s / self.samples
        return ratio * self.samples / self.samples_needed(batch)


def batch_metrics(
    profile: BatchProfile,
    reported: Mapping[str, float],
    fraction: float,
    samples: float,
    batch: int,
    gpus: int,
) -> Mapping[str, float]:
    """A scheduler-batched job's metrics: ``reported`` (its loss at the last epoch's end) plus
    ``samples`` processed, completed ``epoch``s, ``epoch_size``, ``initial_loss``, validation
    ``accuracy`` after ``fraction`` of its work, ``batch_size``, the gradient noise scale
    ``grad_noise_scale`` (= B_crit, with which E(b0) / E(b) is Pollux's efficiency
    (phi + b0) / (phi + b); absent when B_crit is infinite) and, training on ``gpus`` > 0 GPUs,
    the measured ``throughput`` (samples per second)."""
    out = dict(reported)
    out["samples"] = samples
    out["epoch_size"] = float(profile.epoch)
    out["epoch"] = float(int(samples // profile.epoch)) if profile.epoch else 0.0
    out["initial_loss"] = profile.loss[0][1]
    if profile.accuracy:
        out["accuracy"] = ElasticProfile(0, 0, (), profile.accuracy).loss_at(fraction)
    out["batch_size"] = float(batch)
    if not math.isinf(profile.critical):  # Pollux §3.1: the gradient noise scale phi
        out["grad_noise_scale"] = profile.critical
    if gpus:
        out["throughput"] = profile.throughput(gpus, batch)
    return MappingProxyType(out)


def _rate(tables: AppTables, gpus: int, batch: int) -> float:
    """Measured samples per second on ``gpus`` GPUs at global ``batch``; linear in the GPU
    count between the nearest counts with a row where ``gpus`` has none."""
    step = tables.step_time(gpus, batch)
    if step is not None and step > 0:
        return batch / step
    below = next((g for g in range(gpus - 1, 0, -1) if tables.step_time(g, batch)), None)
    above = next((g for g in range(gpus + 1, 129) if tables.step_time(g, batch)), None)
    if below is None and above is None:
        raise ValueError(f"no step time measured for any GPU count at batch {batch}")
    if below is None or above is None:
        g = below or above
        return _rate(tables, g, batch) * gpus / g  # beyond the table: linear in GPUs
    lo, hi = _rate(tables, below, batch), _rate(tables, above, batch)
    return lo + (hi - lo) * (gpus - below) / (above - below)


@cache
def critical_batch(data: Path, app: str) -> float:
    """B_crit of E(b) = E_min (1 + b / B_crit) (McCandlish et al.'s examples-to-result curve),
    fitted by weighted least squares (weights 1 / E) to the samples each of the app's Pollux
    validation curves needs to reach 97 % of the worst final metric among them (a falling
    metric: the worst over 0.97); infinite when E does not grow with the batch."""
    curves = app_tables(data, app).curves
    rising = [c[-1][1] > c[0][1] for c in curves.values()]
    up = sum(rising) * 2 >= len(rising)
    best = [max(v for _, v in c) if up else min(v for _, v in c) for c in curves.values()]
    target = min(best) * 0.97 if up else max(best) / 0.97
    xs, ys = [], []
    for batch, curve in curves.items():
        hit = next((k for k, v in curve if (v >= target if up else v <= target)), None)
        if hit is not None:
            xs.append(float(batch))
            ys.append(float(hit * batch))
    if len(xs) < 2:
        return math.inf
    # minimise sum ((a + c b - E) / E)^2 over a (E_min) and c (E_min / B_crit)
    w = [1.0 / y for y in ys]
    s00 = sum(wi * wi for wi in w)
    s01 = sum(wi * wi * x for wi, x in zip(w, xs, strict=True))
    s11 = sum(wi * wi * x * x for wi, x in zip(w, xs, strict=True))
    t0 = sum(wi * wi * y for wi, y in zip(w, ys, strict=True))
    t1 = sum(wi * wi * x * y for wi, x, y in zip(w, xs, ys, strict=True))
    det = s00 * s11 - s01 * s01
    a = (t0 * s11 - t1 * s01) / det
    c = (s00 * t1 - s01 * t0) / det
    return a / c if a > 0 and c > 0 else math.inf


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


@dataclass(frozen=True)
class _Run:
    """What a loader measured of one job: its curves, duration and samples at its batch."""

    loss: tuple[tuple[float, float], ...]
    accuracy: tuple[tuple[float, float], ...]
    seconds: float
    samples: float
    epoch: int


def _profile(
    app: AppTables,
    requested: int,
    batch: int,
    run: _Run,
    src: str,
    most_batch: int,
    critical: float,
) -> BatchProfile:
    most = min(STRETCH * requested, max(batch, 1), 64)
    most = max(most, requested)
    return BatchProfile(
        1,
        most,
        app.speedups(requested, most, batch),
        run.loss,
        src,
        batch=batch,
        gpus=requested,
        base_s=run.seconds,
        max_batch=max(most_batch, batch),
        samples=run.samples,
        critical=critical,
        accuracy=run.accuracy,
        epoch=run.epoch,
        tables=app,
    )


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
        metric = [(0.0, curve[0][1])] + [(k / last, v) for k, v in curve]
        small = min(app.curves)  # Pollux validates once an epoch at its smallest batch
        epoch = app.curves[small][0][0] * small
        run = _Run(_as_loss(metric), tuple(metric), iterations * step, last * nearest, epoch)
        jobs.append(
            TraceJob(
                id=row["name"],
                user="",
                submit_s=submit,
                duration_s=iterations * step,
                gpus=gpus,
                model=app_name,
                iterations=iterations,
                elastic=_profile(
                    app,
                    gpus,
                    batch,
                    run,
                    f"pollux/{app_name}",
                    max(app.curves),  # the largest batch Pollux trained it at
                    critical_batch(data, app_name),
                ),
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
            lr_room = float(row["max_lr"]) / float(row["lr"])
            submit, task = float(row["time"]), row["task"]
        except (KeyError, ValueError) as exc:
            raise TraceError(path, line, None, f"bad row: {exc}") from None
        if task not in ONES_APP:
            raise TraceError(path, line, "task", f"unknown task {task!r}")
        app = app_tables(data, ONES_APP[task])
        batch = per_gpu * gpus
        if task == "cifar":
            run = _pollux_cifar(app, batch, target, gpus, epoch)
        else:
            run = _ones_history(data, task, epoch, target)
        iterations = max(1, round(run.samples / batch))
        jobs.append(
            TraceJob(
                id=f"{line - 2}",
                user="",
                submit_s=submit,
                duration_s=run.seconds,
                gpus=gpus,
                model=f"{row['model']}-{task}",
                iterations=iterations,
                elastic=_profile(
                    app,
                    gpus,
                    batch,
                    run,
                    f"ones/{task}",
                    int(batch * max(lr_room, 1.0)),  # linear scaling up to max_lr
                    critical_batch(data, ONES_APP[task]),
                ),
            )
        )
    return sorted(jobs, key=lambda j: j.submit_s)


def _ones_history(data: Path, task: str, epoch: int, target: float) -> _Run:
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
    accuracy = ((0.0, 0.0), *((k / epochs, a) for k, a in enumerate(curve.accs[:epochs], 1)))
    return _Run(tuple(points), accuracy, samples / curve.throughput, samples, epoch)


def _pollux_cifar(app: AppTables, batch: int, target: float, gpus: int, epoch: int) -> _Run:
    nearest = min(app.curves, key=lambda b: (abs(math.log(b / batch)), b))
    curve = app.curves[nearest]
    end = next((i for i, (_, v) in enumerate(curve) if v >= target), len(curve) - 1)
    end = max(end, 2)
    last = curve[end][0]
    metric = [(0.0, curve[0][1])] + [(k / last, v) for k, v in curve[: end + 1]]
    iterations = max(1, round(last * nearest / batch))
    step = app.step_time(gpus, batch) or 1.0
    samples = float(iterations * batch)
    return _Run(_as_loss(metric), tuple(metric), iterations * step, samples, epoch)


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
