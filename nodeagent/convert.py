"""Conversions between protobuf messages and the agent's dataclasses (the only such module)."""

from __future__ import annotations

import logging
from types import MappingProxyType

from mlsched import serde
from mlsched.v1 import agent_pb2, common_pb2, trainer_pb2
from nodeagent.model import (
    BatchSizeCommand,
    LaunchRequest,
    LeaseCommand,
    LogsResult,
    NodeMetrics,
    ProgressInfo,
    Registration,
    RegroupCommand,
    RegroupRequest,
    StopCommand,
    SuspendCommand,
    TargetMetric,
    TaskMetrics,
    TaskRef,
    TaskStatusInfo,
    TrainerCommand,
)
from nodeagent.overload import MigrationWish, NodeLoadReport

log = logging.getLogger(__name__)

_GOALS = MappingProxyType(
    {common_pb2.METRIC_GOAL_MAXIMIZE: "max", common_pb2.METRIC_GOAL_MINIMIZE: "min"}
)


def task_ref_from_pb(msg: agent_pb2.TaskRef) -> TaskRef:
    """TaskRef message to dataclass."""
    return TaskRef(msg.job_id, msg.rank, msg.attempt)


def task_ref_to_pb(ref: TaskRef) -> agent_pb2.TaskRef:
    """TaskRef dataclass to message."""
    return agent_pb2.TaskRef(job_id=ref.job_id, rank=ref.rank, attempt=ref.attempt)


def launch_from_pb(msg: agent_pb2.LaunchTask) -> LaunchRequest:
    """LaunchTask to LaunchRequest (flattening the job spec's stopping criterion).

    A target-metric criterion with an unspecified goal is passed on as ``max`` (with a warning).
    """
    spec = msg.spec
    max_iterations: int | None = None
    target: TargetMetric | None = None
    kind = spec.stopping.WhichOneof("criterion")
    if kind == "iterations":
        max_iterations = spec.stopping.iterations.iterations or None
    elif kind == "target_metric":
        crit = spec.stopping.target_metric
        goal = _GOALS.get(crit.goal)
        if goal is None:
            log.warning("job %s: target metric without a goal; assuming max", msg.task.job_id)
            goal = "max"
        target = TargetMetric(crit.metric, crit.target, goal)
        max_iterations = crit.max_iterations or None
    return LaunchRequest(
        ref=task_ref_from_pb(msg.task),
        command=tuple(spec.command),
        working_dir=spec.working_dir,
        env=dict(spec.env),
        gpu_indices=tuple(msg.gpu_indices),
        world_size=msg.world_size,
        local_rank=msg.local_rank,
        local_world_size=msg.local_world_size,
        master_addr=msg.master_addr,
        master_port=msg.master_port,
        resume=msg.resume,
        user=msg.user,
        batch_size=spec.batch_size,
        max_iterations=max_iterations,
        target=target,
        ps_workers=msg.ps_workers,
        launcher=serde.launcher_from_proto(spec.launcher),
    )


def regroup_from_pb(msg: agent_pb2.RegroupTask) -> RegroupRequest:
    """RegroupTask to RegroupRequest: each new rank becomes the launch of that rank."""
    launches = tuple(
        launch_from_pb(
            agent_pb2.LaunchTask(
                task=agent_pb2.TaskRef(job_id=msg.job_id, rank=new.rank, attempt=msg.attempt),
                spec=msg.spec,
                gpu_indices=new.gpu_indices,
                world_size=msg.world_size,
                local_rank=new.rank,
                local_world_size=msg.world_size,
                master_port=msg.master_port,
                user=msg.user,
            )
        )
        for new in msg.new_ranks
    )
    return RegroupRequest(
        job_id=msg.job_id,
        attempt=msg.attempt,
        generation=msg.generation,
        world_size=msg.world_size,
        launches=launches,
        master_port=msg.master_port,
        batch_size=msg.batch_size,
    )


def task_status_to_pb(status: TaskStatusInfo) -> agent_pb2.TaskStatus:
    """TaskStatusInfo to TaskStatus."""
    return agent_pb2.TaskStatus(
        task=task_ref_to_pb(status.ref),
        state=int(status.state),
        exit_code=status.exit_code,
        message=status.message,
        checkpoint_step=status.checkpoint_step,
        restored_step=status.restored_step,
        pid=status.pid,
        restored=status.restored,
        last_progress=None if status.progress is None else progress_to_pb(status.progress),
    )


# GPU and node metrics are the shared domain types: their conversion lives in mlsched.serde.
gpu_info_to_pb = serde.gpu_info_to_proto
node_metrics_to_pb = serde.node_metrics_to_proto


def task_metrics_to_pb(m: TaskMetrics) -> common_pb2.TaskMetrics:
    """TaskMetrics dataclass to message."""
    return common_pb2.TaskMetrics(
        job_id=m.ref.job_id,
        rank=m.ref.rank,
        attempt=m.ref.attempt,
        cpu_percent=m.cpu_percent,
        memory_rss_bytes=m.memory_rss_bytes,
        gpu_memory_bytes=m.gpu_memory_bytes,
        net_bytes_per_s=m.net_bytes_per_s,
    )


def progress_from_pb(msg: common_pb2.Progress) -> ProgressInfo:
    """Progress message to dataclass."""
    return ProgressInfo(
        iteration=msg.iteration,
        loss=msg.loss,
        metrics=dict(msg.metrics),
        iteration_time_s=msg.iteration_time_s,
        batch_size=msg.batch_size,
        time=msg.time,
        compute_time_s=msg.compute_time_s,
    )


def progress_to_pb(p: ProgressInfo) -> common_pb2.Progress:
    """ProgressInfo dataclass to message."""
    return common_pb2.Progress(
        iteration=p.iteration,
        loss=p.loss,
        metrics=dict(p.metrics),
        iteration_time_s=p.iteration_time_s,
        batch_size=p.batch_size,
        time=p.time,
        compute_time_s=p.compute_time_s,
    )


def registration_to_pb(r: Registration) -> agent_pb2.RegisterAgent:
    """Registration dataclass to RegisterAgent."""
    return agent_pb2.RegisterAgent(
        node_id=r.node_id,
        address=r.address,
        hostname=r.hostname,
        gpus=[gpu_info_to_pb(g) for g in r.gpus],
        cpu_count=r.cpu_count,
        memory_total_bytes=r.memory_total_bytes,
        tasks=[task_status_to_pb(t) for t in r.tasks],
        agent_version=r.agent_version,
        self_fence_margin_s=r.self_fence_margin_s,
    )


def metrics_request(
    node: NodeMetrics, tasks: list[TaskMetrics], load: NodeLoadReport | None = None
) -> agent_pb2.AgentSessionRequest:
    """A MetricsReport session message (with the node's load when measured)."""
    report = agent_pb2.MetricsReport(
        node=node_metrics_to_pb(node), tasks=[task_metrics_to_pb(t) for t in tasks]
    )
    if load is not None:
        report.load.CopyFrom(node_load_to_pb(load))
    return agent_pb2.AgentSessionRequest(metrics=report)


def node_load_to_pb(load: NodeLoadReport) -> agent_pb2.NodeLoad:
    """The node's load shares, capacities and task demands."""
    capacity = load.capacity
    return agent_pb2.NodeLoad(
        utilization=dict(load.utilization),
        gpu_utilization=dict(load.gpu_utilization),
        capacity=agent_pb2.NodeCapacity(
            cpu_cores=capacity.cpu_cores,
            memory_bytes=capacity.memory_bytes,
            bandwidth_bytes_per_s=capacity.bandwidth_bytes_per_s,
        ),
        tasks=[
            agent_pb2.TaskLoad(
                task=task_ref_to_pb(t.ref),
                demand=dict(t.demand),
                gpu_index=t.gpu_index if t.gpu_index is not None else 0,
                gpu_utilization=t.gpu_utilization,
            )
            for t in load.tasks
        ],
    )


def migration_request(wish: MigrationWish) -> agent_pb2.AgentSessionRequest:
    """A MigrationRequest session message."""
    return agent_pb2.AgentSessionRequest(
        migration_request=agent_pb2.MigrationRequest(
            task=task_ref_to_pb(wish.ref),
            server_utilization=dict(wish.server_utilization),
            demand=dict(wish.demand),
            reason=wish.reason,
        )
    )


def status_request(status: TaskStatusInfo) -> agent_pb2.AgentSessionRequest:
    """A TaskStatus session message."""
    return agent_pb2.AgentSessionRequest(task_status=task_status_to_pb(status))


def progress_request(ref: TaskRef, progress: ProgressInfo) -> agent_pb2.AgentSessionRequest:
    """A ProgressReport session message."""
    report = agent_pb2.ProgressReport(task=task_ref_to_pb(ref), progress=progress_to_pb(progress))
    return agent_pb2.AgentSessionRequest(progress=report)


def logs_request(request_id: str, result: LogsResult) -> agent_pb2.AgentSessionRequest:
    """A LogsReply session message."""
    reply = agent_pb2.LogsReply(
        request_id=request_id,
        content=result.content,
        truncated=result.truncated,
        error=result.error,
    )
    return agent_pb2.AgentSessionRequest(logs=reply)


def register_request(r: Registration) -> agent_pb2.AgentSessionRequest:
    """A RegisterAgent session message."""
    return agent_pb2.AgentSessionRequest(register=registration_to_pb(r))


def lease_from_pb(msg: agent_pb2.LeaseUpdate) -> LeaseCommand:
    """LeaseUpdate to the LeaseNotice command for the trainer (renewed only for RENEWED)."""
    return LeaseCommand(
        expires_at=msg.expires_at, renewed=msg.status == agent_pb2.LEASE_STATUS_RENEWED
    )


def priority_from_pb(msg: agent_pb2.TaskPriority) -> tuple[TaskRef, float]:
    """TaskPriority to (task, priority)."""
    return task_ref_from_pb(msg.task), msg.priority


def trainer_command_from_pb(msg: agent_pb2.TrainerCommand) -> TrainerCommand | None:
    """TrainerCommand (StopTraining / SetBatchSize) to a command; None when empty."""
    kind = msg.WhichOneof("command")
    if kind == "stop":
        return StopCommand(msg.stop.reason)
    if kind == "set_batch_size":
        return BatchSizeCommand(msg.set_batch_size.batch_size)
    return None


def trainer_response_to_pb(command: TrainerCommand) -> trainer_pb2.TrainerSessionResponse:
    """A command to the TrainerSession response that carries it."""
    if isinstance(command, SuspendCommand):
        return trainer_pb2.TrainerSessionResponse(
            suspend=trainer_pb2.SuspendNow(reason=command.reason)
        )
    if isinstance(command, StopCommand):
        return trainer_pb2.TrainerSessionResponse(stop=trainer_pb2.StopNow(reason=command.reason))
    if isinstance(command, BatchSizeCommand):
        return trainer_pb2.TrainerSessionResponse(
            change_batch_size=trainer_pb2.ChangeBatchSize(batch_size=command.batch_size)
        )
    if isinstance(command, RegroupCommand):
        return trainer_pb2.TrainerSessionResponse(
            regroup=trainer_pb2.Regroup(
                generation=command.generation,
                world_size=command.world_size,
                master_addr=command.master_addr,
                master_port=command.master_port,
                batch_size=command.batch_size,
            )
        )
    return trainer_pb2.TrainerSessionResponse(
        lease=trainer_pb2.LeaseNotice(expires_at=command.expires_at, renewed=command.renewed)
    )
