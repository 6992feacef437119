"""JSON encoding of domain objects for the SQL store's columns."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from mlsched.jobspec import mlfs_to_dict
from mlsched.model import (
    BatchRule,
    Deadline,
    ElasticSpec,
    GpuInfo,
    IterationStop,
    Job,
    JobClass,
    JobEstimate,
    JobSpec,
    JobState,
    Launcher,
    MetricGoal,
    MigrationTarget,
    MlfsSpec,
    Node,
    OverloadRetreat,
    PsSpec,
    ResumeRecord,
    SpeedSample,
    StopOption,
    StoppingCriterion,
    TargetMetricStop,
    Task,
    TaskState,
)
from mlsched.spec_elastic import elastic_to_dict
from mlsched.spec_ps import parse_ps, ps_to_dict


def _stopping_to_dict(stopping: StoppingCriterion) -> dict[str, Any]:
    if isinstance(stopping, IterationStop):
        return {"kind": "iterations", "iterations": stopping.iterations}
    return {
        "kind": "target",
        "metric": stopping.metric,
        "target": stopping.target,
        "goal": stopping.goal.value,
        "max_iterations": stopping.max_iterations,
    }


def _stopping_from_dict(d: dict[str, Any]) -> StoppingCriterion:
    if d["kind"] == "iterations":
        return IterationStop(d["iterations"])
    return TargetMetricStop(d["metric"], d["target"], MetricGoal(d["goal"]), d["max_iterations"])


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "command": list(spec.command),
        "gpus": spec.gpus,
        "gpus_per_process": spec.gpus_per_process,
        "stopping": _stopping_to_dict(spec.stopping),
        "job_class": spec.job_class.value,
        "deadlines": [[d.seconds_after_submit, d.reward] for d in spec.deadlines],
        "working_dir": spec.working_dir,
        "env": [list(p) for p in spec.env],
        "max_retries": spec.max_retries,
        "batch_size": spec.batch_size,
        "mlfs": mlfs_to_dict(spec.mlfs),
        "elastic": elastic_to_dict(spec.elastic),
        "ps": ps_to_dict(spec.ps) if spec.ps.enabled else None,
        "launcher": spec.launcher.value,
        "suspend_grace_s": spec.suspend_grace_s,
    }


def spec_from_dict(d: dict[str, Any]) -> JobSpec:
    return JobSpec(
        name=d["name"],
        command=tuple(d["command"]),
        gpus=d["gpus"],
        gpus_per_process=d["gpus_per_process"],
        stopping=_stopping_from_dict(d["stopping"]),
        job_class=JobClass(d["job_class"]),
        deadlines=tuple(Deadline(a, r) for a, r in d["deadlines"]),
        working_dir=d["working_dir"],
        env=tuple((k, v) for k, v in d["env"]),
        max_retries=d["max_retries"],
        batch_size=d["batch_size"],
        mlfs=_mlfs_from_dict(d.get("mlfs")),  # absent in rows written before MLFS
        elastic=_elastic_from_dict(d.get("elastic")),  # absent in rows written before issue 14
        ps=_ps_from_dict(d.get("ps")),  # absent in rows written before issue 16
        launcher=Launcher(d.get("launcher", Launcher.AGENT.value)),  # absent before issue 18
        suspend_grace_s=d.get("suspend_grace_s", 0.0),
    )


def _ps_from_dict(d: dict[str, Any] | None) -> PsSpec:
    if d is None:
        return PsSpec()
    problems: list[str] = []
    ps = parse_ps(d, problems)
    if problems:
        raise ValueError(f"stored ps section: {'; '.join(problems)}")
    return ps


def _elastic_from_dict(d: dict[str, Any] | None) -> ElasticSpec:
    if d is None:
        return ElasticSpec()
    return ElasticSpec(
        min_gpus=d["min_gpus"],
        max_gpus=d["max_gpus"],
        batch=BatchRule(d["batch"]),
        max_batch_size=d.get("max_batch_size", 0),
        linear_lr=d["lr_scaling"] == "linear",
    )


def _mlfs_from_dict(d: dict[str, Any] | None) -> MlfsSpec:
    if d is None:
        return MlfsSpec()
    return MlfsSpec(
        urgency=d["urgency"],
        partitions=tuple(d["partitions"]),
        dependencies=tuple((parent, child) for parent, child in d["dependencies"]),
        stop_option=StopOption(d["stop_option"]),
        system_may_switch=d["system_may_switch"],
        required_accuracy=d["required_accuracy"],
    )


def job_to_json(job: Job) -> str:
    d = asdict(job)
    d["spec"] = spec_to_dict(job.spec)
    d["state"] = job.state.value
    return json.dumps(d)


def job_from_json(text: str) -> Job:
    """Decode a job row; rows written before a field existed get its default."""
    d = json.loads(text)
    d["spec"] = spec_from_dict(d["spec"])
    d["state"] = JobState(d["state"])
    d["resumes"] = [
        ResumeRecord(
            **{**r, "from_nodes": tuple(r["from_nodes"]), "to_nodes": tuple(r["to_nodes"])}
        )
        for r in d["resumes"]
    ]
    d["speed_samples"] = [SpeedSample(**s) for s in d.get("speed_samples", [])]
    d["metric_history"] = [(int(i), float(v)) for i, v in d.get("metric_history", [])]
    d["sr_overheads_s"] = list(d.get("sr_overheads_s", []))
    estimate = d.get("estimate")
    d["estimate"] = None if estimate is None else JobEstimate(**estimate)
    d["losses"] = tuple(float(v) for v in d.get("losses", ()))
    d["migration_requested_at"] = d.get("migration_requested_at")
    target = d.get("migration_target")
    d["migration_target"] = None if target is None else _migration_target_from_dict(target)
    retreat = d.get("overload_retreat")
    d["overload_retreat"] = None if retreat is None else _retreat_from_dict(retreat)
    return Job(**d)


def _retreat_from_dict(d: dict[str, Any]) -> OverloadRetreat:
    return OverloadRetreat(
        nodes=tuple(str(n) for n in d["nodes"]),
        demand={
            str(node): {str(r): float(v) for r, v in shares.items()}
            for node, shares in d["demand"].items()
        },
        at=float(d["at"]),
    )


def _migration_target_from_dict(d: dict[str, Any]) -> MigrationTarget:
    return MigrationTarget(
        placement=tuple(
            (int(rank), str(node), tuple(int(g) for g in gpus))
            for rank, node, gpus in d["placement"]
        ),
        lease_s=float(d["lease_s"]),
        reason=str(d["reason"]),
        from_nodes=tuple(d.get("from_nodes", ())),
        ordered_at=float(d.get("ordered_at", 0.0)),
    )


def task_to_json(task: Task) -> str:
    d = asdict(task)
    d["state"] = task.state.value
    return json.dumps(d)


def task_from_json(text: str) -> Task:
    d = json.loads(text)
    d["state"] = TaskState(d["state"])
    d["gpu_indices"] = tuple(d["gpu_indices"])
    return Task(**d)


def node_to_json(node: Node) -> str:
    d = asdict(node)
    d["metrics"] = None
    d["load"] = None  # measurements are not persisted
    return json.dumps(d)


def node_from_json(text: str) -> Node:
    d = json.loads(text)
    d["gpus"] = tuple(GpuInfo(**g) for g in d["gpus"])
    d["load"] = None
    return Node(**d)
