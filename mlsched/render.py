"""Turning domain objects into tables and JSON-ready dictionaries for the CLI."""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Iterable, Sequence
from typing import Any

from mlsched.jobspec import mlfs_to_dict, stopping_to_dict
from mlsched.model import (
    BatchRule,
    Event,
    Job,
    JobEstimate,
    JobState,
    MlfsSpec,
    Node,
    SpeedSample,
    StopOption,
    Task,
    TaskState,
)

_TRAINER_SAYS = "; trainer: "  # how a node agent quotes the trainer's exit reason
_STOP_OPTIONS = {
    StopOption.ITERATIONS: "(i) run the iterations asked for",
    StopOption.OPT_STOP: "(ii) OptStop, stop near the predicted best accuracy",
    StopOption.REQUIRED: "(iii) stop once the required accuracy is reached",
}


def jct_s(job: Job) -> float | None:
    """Job completion time: submission to end."""
    return None if job.end_time is None else round(job.end_time - job.submit_time, 3)


def task_dict(task: Task) -> dict[str, Any]:
    return {
        "rank": task.rank,
        "node": task.node_id,
        "gpus": list(task.gpu_indices),
        "state": task.state.value,
        "attempt": task.attempt,
        "exit_code": task.exit_code,
        "message": task.message,
    }


def stop_reason(job: Job, tasks: Sequence[Task]) -> str | None:
    """Why a COMPLETED job stopped, in its rank-0 trainer's words (e.g. ``StopNow: MLF-C:
    required accuracy 0.8 reached (0.81)``, ``target reached: accuracy=0.9 >= 0.9``); None for
    other jobs or when the trainer gave no reason."""
    if job.state is not JobState.COMPLETED:
        return None
    rank0 = next((t for t in tasks if t.rank == 0 and t.state is TaskState.COMPLETED), None)
    said = rank0.message.partition(_TRAINER_SAYS)[2].strip() if rank0 is not None else ""
    return said or None


def mean_sr_overhead_s(job: Job) -> float | None:
    """Mean measured suspend + resume overhead (UniSched's t_sr); None before any."""
    if not job.sr_overheads_s:
        return None
    return sum(job.sr_overheads_s) / len(job.sr_overheads_s)


def estimate_dict(estimate: JobEstimate | None) -> dict[str, Any] | None:
    if estimate is None:
        return None
    return {
        "phase": estimate.phase,
        "iterations": estimate.iterations,
        "iteration_time_s": estimate.iteration_time_s,
        "remaining_s": estimate.remaining_s,
        "reward": estimate.reward,
        "allocation": estimate.allocation,
        "time": estimate.time,
    }


def speed_sample_dict(sample: SpeedSample) -> dict[str, Any]:
    return {
        "gpus": sample.gpus,
        "nodes": sample.nodes,
        "iteration_time_s": sample.iteration_time_s,
        "compute_time_s": sample.compute_time_s,
        "count": sample.count,
    }


def job_dict(job: Job, tasks: Sequence[Task] = ()) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.spec.name,
        "user": job.user,
        "state": job.state.value,
        "class": job.spec.job_class.value,
        "gpus": job.spec.gpus,
        "command": list(job.spec.command),
        "stop": stopping_to_dict(job.spec.stopping),
        "mlfs": mlfs_to_dict(job.spec.mlfs),
        "deadlines": [
            {"after_s": d.seconds_after_submit, "reward": d.reward} for d in job.spec.deadlines
        ],
        "submit_time": job.submit_time,
        "first_start_time": job.first_start_time,
        "end_time": job.end_time,
        "jct_s": jct_s(job),
        "attempts": job.attempt,
        "suspensions": job.suspensions,
        "failures": job.failures,
        "nodes": list(job.node_history),
        "iteration": job.iteration,
        "metrics": dict(job.metrics),
        "checkpoint_step": job.checkpoint_step,
        "restored_step": job.restored_step,
        "lease_expires_at": job.lease_expires_at,
        "message": job.message,
        "stop_reason": stop_reason(job, tasks),
        "resumptions": [
            {
                "suspended_at": r.suspended_at,
                "checkpoint_step": r.checkpoint_step,
                "from_nodes": list(r.from_nodes),
                "resumed_at": r.resumed_at,
                "restored_step": r.restored_step,
                "to_nodes": list(r.to_nodes),
            }
            for r in job.resumes
        ],
        "estimate": estimate_dict(job.estimate),
        "speed_samples": [speed_sample_dict(x) for x in job.speed_samples],
        "sr_overheads_s": list(job.sr_overheads_s),
        "sr_overhead_mean_s": mean_sr_overhead_s(job),
        "tasks": [task_dict(t) for t in tasks],
    }


def node_dict(node: Node, busy: Sequence[int]) -> dict[str, Any]:
    m = node.metrics
    return {
        "id": node.id,
        "address": node.address,
        "hostname": node.hostname,
        "alive": node.alive,
        "last_seen": node.last_seen,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "virtual": g.virtual,
                "memory_total_bytes": g.memory_total_bytes,
                "busy": g.index in busy,
            }
            for g in node.gpus
        ],
        "cpu_count": node.cpu_count,
        "memory_total_bytes": node.memory_total_bytes,
        "metrics": None
        if m is None
        else {
            "cpu_percent": m.cpu_percent,
            "memory_used_bytes": m.memory_used_bytes,
            "net_rx_bytes_per_s": m.net_rx_bytes_per_s,
            "net_tx_bytes_per_s": m.net_tx_bytes_per_s,
            "gpus": [
                {
                    "index": g.index,
                    "utilization_percent": g.utilization_percent,
                    "memory_used_bytes": g.memory_used_bytes,
                    "virtual": g.virtual,
                }
                for g in m.gpus
            ],
        },
    }


def event_dict(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "time": event.time,
        "kind": event.kind,
        "job": event.job_id,
        "node": event.node_id,
        "message": event.message,
    }


EVENT_KIND_WIDTH = 21  # the longest kind the controller records: state_row_quarantined
EVENT_WHERE_WIDTH = 24  # a job id and a node id


def event_line(event: Event) -> str:
    """One row of ``mlsched events``: sequence, UTC time, kind, job/node, message, in columns
    that line up for every kind (a longer job/node pair pushes only its own message)."""
    where = " ".join(x for x in (event.job_id, event.node_id) if x) or "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(event.time))
    return (
        f"{event.seq:>6}  {stamp}  {event.kind:<{EVENT_KIND_WIDTH}}  "
        f"{where:<{EVENT_WHERE_WIDTH}}  {event.message}"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _metric(job: Job, name: str) -> str:
    value = job.metrics.get(name)
    return "" if value is None else f"{value:.3f}"


def jobs_table(jobs: Sequence[tuple[Job, Sequence[Task]]], now: float | None = None) -> str:
    now = time.time() if now is None else now
    rows = []
    for job, tasks in jobs:
        live_nodes = sorted({t.node_id for t in tasks if not t.state.ended})
        rows.append(
            [
                job.id,
                job.spec.name,
                job.user,
                job.state.value,
                job.spec.gpus,
                ",".join(live_nodes) or "-",
                job.iteration,
                _metric(job, "accuracy"),
                job.suspensions,
                age(now - job.submit_time),
            ]
        )
    return table(
        ["ID", "NAME", "USER", "STATE", "GPUS", "NODES", "ITER", "ACC", "SUSP", "AGE"], rows
    )


def nodes_table(nodes: Sequence[tuple[Node, Sequence[int]]]) -> str:
    rows = []
    for node, busy in nodes:
        kind = "virtual" if node.gpus and all(g.virtual for g in node.gpus) else "real"
        m = node.metrics
        rows.append(
            [
                node.id,
                node.address,
                "alive" if node.alive else "dead",
                f"{len(busy)}/{len(node.gpus)} {kind}",
                _gpu_models(node),
                "" if m is None or not m.gpus else f"{_mean_gpu_use(m.gpus):.0f}%",
                "" if m is None else f"{m.cpu_percent:.0f}%",
                ""
                if m is None or not m.memory_total_bytes
                else f"{100 * m.memory_used_bytes / m.memory_total_bytes:.0f}%",
            ]
        )
    headers = ["NODE", "ADDRESS", "STATE", "GPUS BUSY", "GPU MODEL", "GPU USE", "CPU", "MEM"]
    return table(headers, rows)


def _gpu_models(node: Node) -> str:
    """The node's GPU models, each with its count when there are several kinds."""
    counts: dict[str, int] = {}
    for gpu in node.gpus:
        name = "virtual" if gpu.virtual else gpu.name
        counts[name] = counts.get(name, 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ",".join(f"{n}x{name}" for name, n in sorted(counts.items()))


def _mean_gpu_use(gpus: Sequence[Any]) -> float:
    return sum(g.utilization_percent for g in gpus) / len(gpus)


def age(seconds: float) -> str:
    """A short age: 45s, 12m05s, 3h07m, 2d05h (never negative)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def when(epoch_s: float | None) -> str:
    """A UTC wall-clock time to the second; '-' for none."""
    if epoch_s is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch_s))


def _human(key: str, value: Any) -> str:
    """A top-level field of ``job_dict`` as ``describe`` shows it (JSON keeps raw values)."""
    if value is None:
        return "-"
    if key.endswith(("_time", "_at")):
        return when(value)
    if key == "jct_s":
        return _duration(value)
    if key == "command":
        return shlex.join(value)
    if key == "nodes":
        return ", ".join(value) or "-"
    if key == "metrics":
        return ", ".join(f"{k} {v:.4g}" for k, v in sorted(value.items())) or "-"
    if key == "deadlines":
        return (
            "; ".join(
                f"{_duration(d['after_s'])} after submission: reward {d['reward']:g}" for d in value
            )
            or "none"
        )
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)


_SECTIONS = (
    "mlfs",
    "stop_reason",
    "tasks",
    "resumptions",
    "estimate",
    "speed_samples",
    "sr_overheads_s",
    "sr_overhead_mean_s",
)


def _seconds(value: float) -> str:
    return f"{value:.4g} s"


def _duration(value: float) -> str:
    """Seconds, with minutes and hours spelled out from a minute on."""
    if not math.isfinite(value):
        return "unknown"
    if value < 60:
        return _seconds(value)
    total = round(value)
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    spelled = f"{hours}h {minutes:02d}m {seconds:02d}s" if hours else f"{minutes}m {seconds:02d}s"
    return f"{total} s ({spelled})"


def _shape(gpus: int, nodes: int) -> str:
    return f"{gpus} GPU{'' if gpus == 1 else 's'} on {nodes} node{'' if nodes == 1 else 's'}"


def _estimate_lines(estimate: JobEstimate | None) -> list[str]:
    if estimate is None:
        return ["estimate: none"]
    return [
        "estimate:",
        f"  phase: {estimate.phase}",
        f"  predicted iterations: {estimate.iterations}",
        f"  iteration time: {_seconds(estimate.iteration_time_s)}",
        f"  predicted remaining: {_duration(estimate.remaining_s)}",
        f"  reward: {estimate.reward:g}",
        f"  allocation: {estimate.allocation or '-'}",
        f"  made at: {estimate.time}",
    ]


def _mlfs_lines(mlfs: MlfsSpec) -> list[str]:
    switch = (
        "the system may switch it under overload"
        if mlfs.system_may_switch
        else "not switched by the system"
    )
    required = "none" if mlfs.required_accuracy is None else f"{mlfs.required_accuracy:g}"
    partitions = ", ".join(f"{p:g}" for p in mlfs.partitions) or "none (data parallel)"
    dependencies = ", ".join(f"{p}->{c}" for p, c in mlfs.dependencies) or "none"
    return [
        "mlfs:",
        f"  urgency: {mlfs.urgency:g}",
        f"  stop option: {_STOP_OPTIONS[mlfs.stop_option]}; {switch}",
        f"  required accuracy: {required}",
        f"  partitions: {partitions}",
        f"  dependencies: {dependencies}",
    ]


def _observation_lines(job: Job) -> list[str]:
    lines = ["speed samples:"]
    for x in job.speed_samples:
        compute = (
            f"compute {_seconds(x.compute_time_s)}" if x.compute_time_s > 0 else "compute unknown"
        )
        reports = f"{x.count} report{'' if x.count == 1 else 's'}"
        lines.append(
            f"  {_shape(x.gpus, x.nodes)}: {_seconds(x.iteration_time_s)}/iteration, "
            f"{compute} ({reports})"
        )
    mean = mean_sr_overhead_s(job)
    if mean is None:
        lines.append("suspend/resume overhead: not measured yet")
    else:
        lines.append(
            f"suspend/resume overhead: {_duration(mean)} (mean of {len(job.sr_overheads_s)})"
        )
    return lines


RESIZE_EVENTS = {
    "resize_ordered": "ordered",
    "job_resized": "done",
    "resize_abandoned": "abandoned",
}


def resize_events(events: Iterable[Event]) -> list[Event]:
    """The events of a job's resizes (issue 14), oldest first."""
    return [e for e in events if e.kind in RESIZE_EVENTS]


def _elastic_lines(job: Job, events: Sequence[Event]) -> list[str]:
    """An elastic job's range and batch rule, and its resizes as the controller recorded them
    (each order with the policy's reason, each completion with its measured cost)."""
    elastic = job.spec.elastic
    if not elastic.enabled:
        return []
    batch = elastic.batch.value
    if elastic.batch is BatchRule.SCHEDULER:
        batch += f" up to {elastic.max_batch_size}"
    lines = [
        f"elastic: {elastic.min_gpus} to {elastic.max_gpus} GPUs; batch {batch} "
        f"(base {job.spec.batch_size}); learning rate "
        + ("scaled linearly" if elastic.linear_lr else "fixed"),
        "resizes:" if events else "resizes: none yet",
    ]
    start = events[0].time if events else 0.0
    lines.extend(f"  +{e.time - start:7.1f} s {RESIZE_EVENTS[e.kind]}: {e.message}" for e in events)
    return lines


def describe(job: Job, tasks: Sequence[Task], events: Sequence[Event] = ()) -> str:
    """The job in detail; ``events`` (the job's) add its resizes."""
    d = job_dict(job, tasks)
    lines = [f"{k}: {_human(k, v)}" for k, v in d.items() if k not in _SECTIONS]
    if d["stop_reason"] is not None:
        lines.append(f"stop reason: {d['stop_reason']}")
    lines.extend(_mlfs_lines(job.spec.mlfs))
    lines.extend(_estimate_lines(job.estimate))
    lines.extend(_observation_lines(job))
    lines.extend(_elastic_lines(job, resize_events(events)))
    lines.append("resumptions:")
    lines.extend(
        f"  suspended on {','.join(r.from_nodes)} at checkpoint step {r.checkpoint_step}"
        + (
            f"; resumed on {','.join(r.to_nodes)} from step {r.restored_step}"
            if r.resumed_at
            else "; waiting"
        )
        for r in job.resumes
    )
    lines.append("tasks:")
    lines.extend(
        f"  rank {t.rank}: {t.state.value} on {t.node_id} GPUs {list(t.gpu_indices)} "
        f"(attempt {t.attempt}){' exit ' + str(t.exit_code) if t.exit_code else ''}"
        f"{' - ' + t.message if t.message else ''}"
        for t in tasks
    )
    return "\n".join(lines)
