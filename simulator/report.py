"""Reports over several policies' runs of one trace: JSON, a text table and a PNG figure.

The inputs are ``compute_metrics`` dicts (for JSON and the table) or ``SimResult`` objects (for
the figure), keyed by policy name. The table shows JCT and queue times in minutes (as UniSched's
Table III), the makespan in hours and fractions as percentages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simulator.metrics import CLASS_KEYS, cumulative_busy, first_submit_s
from simulator.quality import normalised_loss_series
from simulator.types import SimResult

MAX_POINTS = 2000  # most points drawn per series
MISSING = "-"

Format = Callable[[object], str]


SPEED_MODEL_KEY = "speed_model"


def json_text(
    metrics_by_policy: Mapping[str, dict],
    *,
    speed_model: Mapping[str, object] | None = None,
) -> str:
    """One JSON object keyed by policy name, led by ``"speed_model"`` (which speed model the
    runs used, :meth:`simulator.jobmodel.SpeedModel.to_json`) when given, with a final
    newline: what ``simulate --json`` prints and ``--json-out`` writes."""
    report: dict[str, object] = {}
    if speed_model is not None:
        if SPEED_MODEL_KEY in metrics_by_policy:
            raise ValueError(f"a policy named {SPEED_MODEL_KEY!r} clashes with the report key")
        report[SPEED_MODEL_KEY] = dict(speed_model)
    report.update(metrics_by_policy)
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


def write_json(
    metrics_by_policy: Mapping[str, dict],
    path: str | Path,
    *,
    speed_model: Mapping[str, object] | None = None,
) -> Path:
    """Write :func:`json_text` to ``path`` (its folder made if missing); returns the path."""
    text = json_text(metrics_by_policy, speed_model=speed_model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --- Table ------------------------------------------------------------------------------------


def fmt_scaled(scale: float, decimals: int) -> Format:
    return lambda v: f"{v * scale:.{decimals}f}"


PERCENT = fmt_scaled(100, 2)
MINUTES = fmt_scaled(1 / 60, 1)
HOURS = fmt_scaled(1 / 3600, 2)
MILLIS = fmt_scaled(1000, 1)
PLAIN = fmt_scaled(1, 2)
COUNT: Format = str

CLASS_LABELS = {"all": "all", **{key: key.replace("_", "-") for key in CLASS_KEYS.values()}}


def lookup(metrics: Mapping, path: tuple[str, ...]) -> object:
    """``metrics[path[0]][path[1]]...``, or None where a level is missing."""
    value: object = metrics
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def latency_rows(key: str, name: str) -> list[tuple[str, tuple[str, ...], Format]]:
    return [
        (f"{name} {stat} {CLASS_LABELS[cls]} (min)", (key, cls, stat), MINUTES)
        for cls in CLASS_LABELS
        for stat in ("avg", "median", "p95")
    ]


ROWS: list[tuple[str, tuple[str, ...], Format]] = [
    ("R^slo (%)", ("r_slo",), PERCENT),
    ("Deadline miss rate (%)", ("deadline_miss_rate",), PERCENT),
    ("SLO jobs scored", ("slo_jobs",), COUNT),
    *latency_rows("jct_s", "JCT"),
    *latency_rows("queue_s", "Queue"),
    ("Makespan (h)", ("makespan_s",), HOURS),
    ("Preemptions / job", ("preemptions_per_job",), PLAIN),
    ("GPU utilisation (%)", ("gpu_utilization",), PERCENT),
    ("Jobs completed", ("jobs_completed",), COUNT),
    ("Jobs total", ("jobs_total",), COUNT),
    ("Accuracy by deadline (%)", ("accuracy_by_deadline",), PERCENT),
    ("Accuracy guarantee (%)", ("accuracy_guarantee_ratio",), PERCENT),
    ("Deadline guarantee (%)", ("deadline_guarantee_ratio",), PERCENT),
    ("Bandwidth cost (GB)", ("bandwidth_cost_gb",), fmt_scaled(1, 1)),
    ("Migrations / job", ("migrations_per_job",), PLAIN),
    ("Resumed elsewhere / job", ("resumed_elsewhere_per_job",), PLAIN),
    ("Quality avg (%)", ("quality_avg",), PERCENT),
    ("Delay to 90% avg (min)", ("delay_90_s", "avg"), MINUTES),
    ("Delay to 90% median (min)", ("delay_90_s", "median"), MINUTES),
    ("Delay to 95% avg (min)", ("delay_95_s", "avg"), MINUTES),
    ("Delay to 95% median (min)", ("delay_95_s", "median"), MINUTES),
    ("Resizes / job", ("resizes_per_job",), PLAIN),
    ("Jobs stopped early", ("jobs_stopped",), COUNT),
    ("Wall time (s)", ("wall_s",), fmt_scaled(1, 1)),
    ("Decision p50 (ms)", ("decision_time_s", "p50"), MILLIS),
    ("Decision p95 (ms)", ("decision_time_s", "p95"), MILLIS),
    ("Decision max (ms)", ("decision_time_s", "max"), MILLIS),
    ("Decision cycles", ("decision_time_s", "cycles"), COUNT),
    ("Refused launches", ("refused_launches",), COUNT),
    ("Overload retreats", ("overload_retreats",), COUNT),
    ("Refused migrations", ("refused_migrations",), COUNT),
]


# Which way each metric is better (by its top-level key); counts that are no score have none.
# R^slo is UniSched's weighted deadline miss rate (Eq. 15): lower is better.
HIGHER_IS_BETTER = frozenset(
    {
        "gpu_utilization",
        "jobs_completed",
        "accuracy_by_deadline",
        "accuracy_guarantee_ratio",
        "deadline_guarantee_ratio",
        "quality_avg",
    }
)
NO_DIRECTION = frozenset({"slo_jobs", "jobs_total", "resizes_per_job", "jobs_stopped"})


def better(path: tuple[str, ...]) -> str:
    """``higher``, ``lower`` or ``""`` (a count that is no score)."""
    if path[0] in NO_DIRECTION:
        return ""
    return "higher" if path[0] in HIGHER_IS_BETTER else "lower"


def format_table(metrics_by_policy: Mapping[str, dict]) -> str:
    """A text table: one row per metric, one column per policy (``-`` where there is no
    value), and which way the metric is better."""
    policies = list(metrics_by_policy)
    lines = [["metric", *policies, "better"]]
    for label, path, fmt in ROWS:
        values = [lookup(metrics_by_policy[p], path) for p in policies]
        lines.append([label, *(MISSING if v is None else fmt(v) for v in values), better(path)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    rule = ["-" * w for w in widths]
    rendered = []
    for line in [lines[0], rule, *lines[1:]]:
        values = zip(line[1:-1], widths[1:-1], strict=True)
        cells = [line[0].ljust(widths[0]), *(c.rjust(w) for c, w in values), line[-1]]
        rendered.append("  ".join(cells).rstrip())
    return "\n".join(rendered)


def underload_warning(metrics_by_policy: Mapping[str, dict], share: float = 0.01) -> str | None:
    """A warning when no job waited under any policy (average queueing time at most ``share``
    of the average JCT in every run): the cluster is so underloaded that policies that order
    or place jobs differently cannot differ. None otherwise."""
    waits = []
    for metrics in metrics_by_policy.values():
        queue = lookup(metrics, ("queue_s", "all", "avg"))
        jct = lookup(metrics, ("jct_s", "all", "avg"))
        if not isinstance(queue, int | float) or not isinstance(jct, int | float) or jct <= 0:
            return None
        if queue > share * jct:
            return None
        waits.append(queue)
    if not waits:
        return None
    return (
        f"warning: the simulated cluster is underloaded: jobs waited {max(waits):.3g} s on"
        f" average at most (under {share:.0%} of their JCT) under every policy, so policies"
        " cannot differ much; try a smaller --cluster or a denser trace"
    )


# --- Figure -----------------------------------------------------------------------------------


def jct_cdf(result: SimResult, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Sorted JCTs (s) of finished jobs and the fraction of ALL jobs finished within each, so a
    curve tops out at the completion ratio; at most ``max_points`` points, the last one kept."""
    jcts = np.sort([r.jct_s for r in result.records if r.jct_s is not None])
    if jcts.size == 0:
        return jcts, jcts
    fraction = np.arange(1, jcts.size + 1) / len(result.records)
    if jcts.size > max_points:
        keep = np.unique(np.linspace(0, jcts.size - 1, max_points).round().astype(int))
        jcts, fraction = jcts[keep], fraction[keep]
    return jcts, fraction


def utilization_series(
    result: SimResult, max_points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """Busy/total GPUs averaged over at most ``max_points`` equal bins spanning [first
    submission, makespan]: (bin start times in s, fractions). Bin means keep the integral exact."""
    start = first_submit_s(result)
    end = result.makespan_s
    if start is None or end <= start or result.total_gpus <= 0:
        return np.array([]), np.array([])
    edges = np.linspace(start, end, max_points + 1)
    area = cumulative_busy(result.utilization, edges)
    return edges[:-1], np.diff(area) / (np.diff(edges) * result.total_gpus)


def output_png(path: str | Path) -> Path:
    """``path`` itself if it ends with .png; otherwise ``metrics.png`` inside directory ``path``."""
    path = Path(path)
    if path.suffix.lower() == ".png":
        return path
    return path / "metrics.png"


def queue_cdf(result: SimResult) -> tuple[np.ndarray, np.ndarray]:
    """Sorted queueing times (s, submission to first start) of started jobs and the fraction of
    ALL jobs started within each."""
    waits = np.sort([r.queue_s for r in result.records if r.queue_s is not None])
    return waits, np.arange(1, waits.size + 1) / max(len(result.records), 1)


def class_mean_jct_s(result: SimResult) -> dict[str, float]:
    """Mean JCT (s) of the finished jobs of each class that has any, in CLASS_KEYS order."""
    groups: dict[str, list[float]] = {}
    for record in result.records:
        if record.jct_s is not None:
            groups.setdefault(CLASS_KEYS[record.job.job_class], []).append(record.jct_s)
    return {k: float(np.mean(groups[k])) for k in CLASS_KEYS.values() if k in groups}


def _class_bars(ax: Any, results: Mapping[str, SimResult]) -> None:
    """Grouped bars: per class, one bar per policy (mean JCT in minutes)."""
    classes = list(CLASS_KEYS.values())
    width = 0.8 / max(len(results), 1)
    for i, (name, result) in enumerate(results.items()):
        means = class_mean_jct_s(result)
        xs = [c + i * width for c, key in enumerate(classes) if key in means]
        ax.bar(xs, [means[k] / 60 for k in classes if k in means], width, label=name)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(classes))])
    ax.set_xticklabels([CLASS_LABELS[k] for k in classes])


def plot(results: Mapping[str, SimResult], path: str | Path) -> Path:
    """Write a PNG with four panels: JCT CDF per policy (log x), GPU utilisation over time,
    queueing time CDF, mean JCT per job class; and, when jobs have loss curves (elastic traces),
    a fifth: the mean normalised loss of the jobs present over time (SLAQ Fig. 7a). Returns the
    file written."""
    # Imported here so that the JSON and table reports work without matplotlib; the Figure API
    # with the Agg canvas needs no display and leaves pyplot's global state alone.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    losses = {name: series for name, r in results.items() if (series := normalised_loss_series(r))}
    mosaic = [["cdf", "util"], ["queue", "class"]] + ([["loss", "loss"]] if losses else [])
    fig = Figure(figsize=(12, 9 + 4 * bool(losses)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplot_mosaic(mosaic)
    cdf_ax, util_ax, queue_ax, class_ax = (axes[k] for k in ("cdf", "util", "queue", "class"))
    for name, result in results.items():
        jcts, fraction = jct_cdf(result)
        positive = jcts > 0  # a log axis cannot show a zero JCT
        if positive.any():
            cdf_ax.step(jcts[positive] / 60, fraction[positive], where="post", label=name)
        times, util = utilization_series(result)
        if times.size:
            origin = first_submit_s(result)
            util_ax.step((times - origin) / 3600, util * 100, where="post", label=name)
        waits, started = queue_cdf(result)
        if waits.size:
            queue_ax.step(waits / 60, started, where="post", label=name)
    _class_bars(class_ax, results)
    cdf_ax.set(xscale="log", xlabel="JCT (min)", ylabel="fraction of all jobs", ylim=(0, 1.02))
    cdf_ax.set_title("Job completion time CDF")
    cdf_ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    cdf_ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap
    util_ax.set(xlabel="time since first submission (h)", ylabel="busy GPUs (%)", ylim=(0, 102))
    util_ax.set_title("GPU utilisation")
    queue_ax.set(xlabel="queueing time (min)", ylabel="fraction of all jobs", ylim=(0, 1.02))
    queue_ax.set_title("Queueing time CDF (submission to first start)")
    class_ax.set(ylabel="mean JCT (min)")
    class_ax.set_title("Mean JCT per job class (finished jobs)")
    if losses:
        loss_ax = axes["loss"]
        origin = min(first_submit_s(results[name]) for name in losses)
        for name, (times, loss) in losses.items():
            loss_ax.plot((times - origin) / 3600, loss, label=name)
        loss_ax.set(
            xlabel="time since first submission (h)",
            ylabel="mean normalised loss of the jobs present",
            ylim=(0, 1.02),
        )
        loss_ax.set_title("Normalised loss over time (SLAQ Fig. 7a; lower is better)")
    for ax in axes.values():
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    out = output_png(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=120)
    return out
