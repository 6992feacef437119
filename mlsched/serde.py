"""The one place where protobuf messages and domain dataclasses are converted."""

from __future__ import annotations

from mlsched.model import (
    BatchRule,
    Deadline,
    ElasticSpec,
    Event,
    GpuInfo,
    GpuMetrics,
    IterationStop,
    Job,
    JobClass,
    JobEstimate,
    JobSpec,
    JobState,
    Launcher,
    MetricGoal,
    MlfsSpec,
    Node,
    NodeMetrics,
    Progress,
    PsSpec,
    ResumeRecord,
    RoleResources,
    SpeedSample,
    StopOption,
    StoppingCriterion,
    TargetMetricStop,
    Task,
    TaskMetrics,
    TaskState,
)
from mlsched.v1 import common_pb2 as pb

_JOB_CLASS = {
    JobClass.BEST_EFFORT: pb.JOB_CLASS_BEST_EFFORT,
    JobClass.STRICT_SLO: pb.JOB_CLASS_STRICT_SLO,
    JobClass.SOFT_SLO: pb.JOB_CLASS_SOFT_SLO,
}
_LAUNCHER = {Launcher.AGENT: pb.LAUNCHER_UNSPECIFIED, Launcher.TORCHRUN: pb.LAUNCHER_TORCHRUN}
_GOAL = {MetricGoal.MAXIMIZE: pb.METRIC_GOAL_MAXIMIZE, MetricGoal.MINIMIZE: pb.METRIC_GOAL_MINIMIZE}
_JOB_STATE = {s: pb.JobState.Value(f"JOB_STATE_{s.value}") for s in JobState}
_TASK_STATE = {s: pb.TaskState.Value(f"TASK_STATE_{s.value}") for s in TaskState}
_STOP_OPTION = {
    StopOption.ITERATIONS: pb.STOP_OPTION_ITERATIONS,
    StopOption.OPT_STOP: pb.STOP_OPTION_OPT_STOP,
    StopOption.REQUIRED: pb.STOP_OPTION_REQUIRED_ACCURACY,
}


class WireError(ValueError):
    """A message from the wire cannot be turned into a domain object."""


_BATCH_RULE = {
    BatchRule.FIXED_GLOBAL: pb.BATCH_RULE_FIXED_GLOBAL,
    BatchRule.FIXED_PER_GPU: pb.BATCH_RULE_FIXED_PER_GPU,
    BatchRule.SCHEDULER: pb.BATCH_RULE_SCHEDULER,
}


def _reverse(mapping: dict) -> dict:
    return {v: k for k, v in mapping.items()}


def job_state_to_proto(state: JobState) -> int:
    return _JOB_STATE[state]


def job_state_from_proto(value: int) -> JobState:
    try:
        return _reverse(_JOB_STATE)[value]
    except KeyError:
        raise WireError(f"unknown job state {value}") from None


def task_state_to_proto(state: TaskState) -> int:
    return _TASK_STATE[state]


def task_state_from_proto(value: int) -> TaskState:
    try:
        return _reverse(_TASK_STATE)[value]
    except KeyError:
        raise WireError(f"unknown task state {value}") from None


def stopping_to_proto(stopping: StoppingCriterion) -> pb.StoppingCriterion:
    if isinstance(stopping, IterationStop):
        return pb.StoppingCriterion(
            iterations=pb.IterationCriterion(iterations=stopping.iterations)
        )
    return pb.StoppingCriterion(
        target_metric=pb.TargetMetricCriterion(
            metric=stopping.metric,
            target=stopping.target,
            goal=_GOAL[stopping.goal],
            max_iterations=stopping.max_iterations,
        )
    )


def stopping_from_proto(msg: pb.StoppingCriterion) -> StoppingCriterion:
    kind = msg.WhichOneof("criterion")
    if kind == "iterations":
        return IterationStop(msg.iterations.iterations)
    if kind == "target_metric":
        t = msg.target_metric
        goal = _reverse(_GOAL).get(t.goal)
        if goal is None:
            raise WireError("stopping.target_metric.goal must be MAXIMIZE or MINIMIZE")
        return TargetMetricStop(t.metric, t.target, goal, t.max_iterations)
    raise WireError("stopping criterion is required (iterations or target_metric)")


def mlfs_to_proto(mlfs: MlfsSpec) -> pb.MlfsSpec:
    msg = pb.MlfsSpec(
        urgency=mlfs.urgency,
        partitions=list(mlfs.partitions),
        dependencies=[
            pb.PartitionDependency(parent=parent, child=child)
            for parent, child in mlfs.dependencies
        ],
        stop_option=_STOP_OPTION[mlfs.stop_option],
        system_may_switch=mlfs.system_may_switch,
    )
    if mlfs.required_accuracy is not None:
        msg.required_accuracy = mlfs.required_accuracy
    return msg


def mlfs_from_proto(msg: pb.MlfsSpec) -> MlfsSpec:
    """Zero values are the defaults: urgency 0 is 1, an unspecified option is ITERATIONS."""
    if msg.stop_option == pb.STOP_OPTION_UNSPECIFIED:
        option = StopOption.ITERATIONS
    elif (option := _reverse(_STOP_OPTION).get(msg.stop_option)) is None:
        raise WireError(f"mlfs.stop_option: unknown value {msg.stop_option}")
    return MlfsSpec(
        urgency=msg.urgency or MlfsSpec.urgency,
        partitions=tuple(msg.partitions),
        dependencies=tuple((d.parent, d.child) for d in msg.dependencies),
        stop_option=option,
        system_may_switch=msg.system_may_switch,
        required_accuracy=msg.required_accuracy if msg.HasField("required_accuracy") else None,
    )


def elastic_to_proto(elastic: ElasticSpec) -> pb.ElasticSpec:
    return pb.ElasticSpec(
        min_gpus=elastic.min_gpus,
        max_gpus=elastic.max_gpus,
        batch=_BATCH_RULE[elastic.batch],
        max_batch_size=elastic.max_batch_size,
        linear_lr=elastic.linear_lr,
    )


def elastic_from_proto(msg: pb.ElasticSpec) -> ElasticSpec:
    """An unspecified batch rule is FIXED_GLOBAL (a rigid job's spec has no elastic at all)."""
    if msg.batch == pb.BATCH_RULE_UNSPECIFIED:
        rule = BatchRule.FIXED_GLOBAL
    elif (rule := _reverse(_BATCH_RULE).get(msg.batch)) is None:
        raise WireError(f"elastic.batch: unknown value {msg.batch}")
    return ElasticSpec(msg.min_gpus, msg.max_gpus, rule, msg.max_batch_size, msg.linear_lr)


def ps_to_proto(ps: PsSpec) -> pb.PsSpec:
    def role(r: RoleResources) -> pb.RoleResources:
        return pb.RoleResources(gpus=r.gpus, cpus=r.cpus, memory_gb=r.memory_gb)

    return pb.PsSpec(
        min_workers=ps.min_workers,
        max_workers=ps.max_workers,
        min_servers=ps.min_servers,
        max_servers=ps.max_servers,
        worker=role(ps.worker),
        server=role(ps.server),
    )


def ps_from_proto(msg: pb.PsSpec) -> PsSpec:
    def role(r: pb.RoleResources) -> RoleResources:
        return RoleResources(r.gpus, r.cpus, r.memory_gb)

    return PsSpec(
        msg.min_workers,
        msg.max_workers,
        msg.min_servers,
        msg.max_servers,
        role(msg.worker),
        role(msg.server),
    )


def spec_to_proto(spec: JobSpec) -> pb.JobSpec:
    mlfs = None if spec.mlfs == MlfsSpec() else mlfs_to_proto(spec.mlfs)
    elastic = None if spec.elastic == ElasticSpec() else elastic_to_proto(spec.elastic)
    return pb.JobSpec(
        name=spec.name,
        command=list(spec.command),
        working_dir=spec.working_dir,
        env=dict(spec.env),
        gpus=spec.gpus,
        gpus_per_process=spec.gpus_per_process,
        job_class=_JOB_CLASS[spec.job_class],
        deadlines=[
            pb.Deadline(seconds_after_submit=d.seconds_after_submit, reward=d.reward)
            for d in spec.deadlines
        ],
        stopping=stopping_to_proto(spec.stopping),
        max_retries=spec.max_retries,
        batch_size=spec.batch_size,
        mlfs=mlfs,
        elastic=elastic,
        ps=ps_to_proto(spec.ps) if spec.ps.enabled else None,
        launcher=_LAUNCHER[spec.launcher],
        suspend_grace_s=spec.suspend_grace_s,
    )


def spec_from_proto(msg: pb.JobSpec) -> JobSpec:
    """Decode without judging the values; ``mlsched.jobspec.validate_spec`` judges them."""
    if msg.job_class == pb.JOB_CLASS_UNSPECIFIED:
        job_class = JobClass.BEST_EFFORT
    elif (job_class := _reverse(_JOB_CLASS).get(msg.job_class)) is None:
        raise WireError(f"job_class: unknown value {msg.job_class}")
    return JobSpec(
        name=msg.name,
        command=tuple(msg.command),
        gpus=msg.gpus,
        gpus_per_process=msg.gpus_per_process or 1,
        stopping=stopping_from_proto(msg.stopping),
        job_class=job_class,
        deadlines=tuple(Deadline(d.seconds_after_submit, d.reward) for d in msg.deadlines),
        working_dir=msg.working_dir,
        env=tuple(sorted(msg.env.items())),
        max_retries=msg.max_retries,
        batch_size=msg.batch_size,
        mlfs=mlfs_from_proto(msg.mlfs) if msg.HasField("mlfs") else MlfsSpec(),
        elastic=elastic_from_proto(msg.elastic) if msg.HasField("elastic") else ElasticSpec(),
        ps=ps_from_proto(msg.ps) if msg.HasField("ps") else PsSpec(),
        launcher=launcher_from_proto(msg.launcher),
        suspend_grace_s=msg.suspend_grace_s,
    )


def launcher_from_proto(value: int) -> Launcher:
    """``JobSpec.launcher`` from the wire; unset (an older sender) is the agent's launcher."""
    if value == pb.LAUNCHER_UNSPECIFIED:
        return Launcher.AGENT
    launcher = _reverse(_LAUNCHER).get(value)
    if launcher is None:
        raise WireError(f"launcher: unknown value {value}")
    return launcher


def task_to_proto(task: Task) -> pb.TaskInfo:
    return pb.TaskInfo(
        rank=task.rank,
        node_id=task.node_id,
        gpu_indices=list(task.gpu_indices),
        state=_TASK_STATE[task.state],
        attempt=task.attempt,
        exit_code=task.exit_code or 0,
        message=task.message,
    )


def speed_sample_to_proto(sample: SpeedSample) -> pb.SpeedSample:
    return pb.SpeedSample(
        gpus=sample.gpus,
        nodes=sample.nodes,
        iteration_time_s=sample.iteration_time_s,
        compute_time_s=sample.compute_time_s,
        count=sample.count,
    )


def speed_sample_from_proto(msg: pb.SpeedSample) -> SpeedSample:
    return SpeedSample(
        gpus=msg.gpus,
        nodes=msg.nodes,
        iteration_time_s=msg.iteration_time_s,
        compute_time_s=msg.compute_time_s,
        count=msg.count,
    )


def estimate_to_proto(estimate: JobEstimate) -> pb.JobEstimate:
    return pb.JobEstimate(
        phase=estimate.phase,
        iterations=estimate.iterations,
        iteration_time_s=estimate.iteration_time_s,
        remaining_s=estimate.remaining_s,
        reward=estimate.reward,
        allocation=estimate.allocation,
        time=estimate.time,
    )


def estimate_from_proto(msg: pb.JobEstimate) -> JobEstimate:
    return JobEstimate(
        phase=msg.phase,
        iterations=msg.iterations,
        iteration_time_s=msg.iteration_time_s,
        remaining_s=msg.remaining_s,
        reward=msg.reward,
        allocation=msg.allocation,
        time=msg.time,
    )


def job_to_proto(job: Job, tasks: list[Task]) -> pb.Job:
    return pb.Job(
        id=job.id,
        user=job.user,
        spec=spec_to_proto(job.spec),
        state=_JOB_STATE[job.state],
        submit_time=job.submit_time,
        first_start_time=job.first_start_time or 0.0,
        end_time=job.end_time or 0.0,
        attempt=job.attempt,
        suspensions=job.suspensions,
        node_history=job.node_history,
        metrics=job.metrics,
        iteration=job.iteration,
        checkpoint_step=job.checkpoint_step,
        restored_step=job.restored_step,
        lease_expires_at=job.lease_expires_at or 0.0,
        message=job.message,
        tasks=[task_to_proto(t) for t in tasks],
        failures=job.failures,
        resumptions=[
            pb.Resumption(
                suspended_at=r.suspended_at,
                checkpoint_step=r.checkpoint_step,
                from_nodes=r.from_nodes,
                resumed_at=r.resumed_at or 0.0,
                restored_step=-1 if r.restored_step is None else r.restored_step,
                to_nodes=r.to_nodes,
            )
            for r in job.resumes
        ],
        estimate=None if job.estimate is None else estimate_to_proto(job.estimate),
        speed_samples=[speed_sample_to_proto(s) for s in job.speed_samples],
        sr_overheads_s=job.sr_overheads_s,
    )


def job_from_proto(msg: pb.Job) -> tuple[Job, list[Task]]:
    """Client side: a job as the controller reported it, with its current tasks."""
    job = Job(
        id=msg.id,
        user=msg.user,
        spec=spec_from_proto(msg.spec),
        state=job_state_from_proto(msg.state),
        submit_time=msg.submit_time,
        queued_since=msg.submit_time,
        first_start_time=msg.first_start_time or None,
        end_time=msg.end_time or None,
        attempt=msg.attempt,
        suspensions=msg.suspensions,
        failures=msg.failures,
        node_history=list(msg.node_history),
        metrics=dict(msg.metrics),
        iteration=msg.iteration,
        checkpoint_step=msg.checkpoint_step,
        restored_step=msg.restored_step,
        lease_expires_at=msg.lease_expires_at or None,
        message=msg.message,
        resumes=[
            ResumeRecord(
                suspended_at=r.suspended_at,
                checkpoint_step=r.checkpoint_step,
                from_nodes=tuple(r.from_nodes),
                resumed_at=r.resumed_at or None,
                restored_step=None if r.restored_step < 0 else r.restored_step,
                to_nodes=tuple(r.to_nodes),
            )
            for r in msg.resumptions
        ],
        speed_samples=[speed_sample_from_proto(s) for s in msg.speed_samples],
        sr_overheads_s=list(msg.sr_overheads_s),
        estimate=estimate_from_proto(msg.estimate) if msg.HasField("estimate") else None,
    )
    tasks = [
        Task(
            job_id=msg.id,
            rank=t.rank,
            attempt=t.attempt,
            node_id=t.node_id,
            gpu_indices=tuple(t.gpu_indices),
            state=task_state_from_proto(t.state),
            exit_code=t.exit_code,
            message=t.message,
        )
        for t in msg.tasks
    ]
    return job, tasks


def gpu_info_from_proto(msg: pb.GpuInfo) -> GpuInfo:
    return GpuInfo(msg.index, msg.name, msg.virtual, msg.memory_total_bytes)


def gpu_info_to_proto(gpu: GpuInfo) -> pb.GpuInfo:
    return pb.GpuInfo(
        index=gpu.index,
        name=gpu.name,
        virtual=gpu.virtual,
        memory_total_bytes=gpu.memory_total_bytes,
    )


def node_metrics_from_proto(msg: pb.NodeMetrics) -> NodeMetrics:
    return NodeMetrics(
        time=msg.time,
        cpu_percent=msg.cpu_percent,
        memory_used_bytes=msg.memory_used_bytes,
        memory_total_bytes=msg.memory_total_bytes,
        net_rx_bytes_per_s=msg.net_rx_bytes_per_s,
        net_tx_bytes_per_s=msg.net_tx_bytes_per_s,
        gpus=tuple(
            GpuMetrics(
                g.index, g.utilization_percent, g.memory_used_bytes, g.memory_total_bytes, g.virtual
            )
            for g in msg.gpus
        ),
        state_disk_free_bytes=msg.state_disk_free_bytes,
        state_disk_full=msg.state_disk_full,
    )


def node_metrics_to_proto(m: NodeMetrics) -> pb.NodeMetrics:
    return pb.NodeMetrics(
        time=m.time,
        cpu_percent=m.cpu_percent,
        memory_used_bytes=m.memory_used_bytes,
        memory_total_bytes=m.memory_total_bytes,
        net_rx_bytes_per_s=m.net_rx_bytes_per_s,
        net_tx_bytes_per_s=m.net_tx_bytes_per_s,
        gpus=[
            pb.GpuMetrics(
                index=g.index,
                utilization_percent=g.utilization_percent,
                memory_used_bytes=g.memory_used_bytes,
                memory_total_bytes=g.memory_total_bytes,
                virtual=g.virtual,
            )
            for g in m.gpus
        ],
        state_disk_free_bytes=m.state_disk_free_bytes,
        state_disk_full=m.state_disk_full,
    )


def task_metrics_from_proto(msg: pb.TaskMetrics) -> TaskMetrics:
    return TaskMetrics(
        msg.job_id,
        msg.rank,
        msg.attempt,
        msg.cpu_percent,
        msg.memory_rss_bytes,
        msg.gpu_memory_bytes,
        msg.net_bytes_per_s,
    )


def node_to_proto(node: Node, busy_gpus: list[int]) -> pb.Node:
    msg = pb.Node(
        id=node.id,
        address=node.address,
        hostname=node.hostname,
        gpus=[gpu_info_to_proto(g) for g in node.gpus],
        cpu_count=node.cpu_count,
        memory_total_bytes=node.memory_total_bytes,
        alive=node.alive,
        last_seen=node.last_seen,
        busy_gpu_indices=busy_gpus,
    )
    if node.metrics is not None:
        msg.metrics.CopyFrom(node_metrics_to_proto(node.metrics))
    return msg


def node_from_proto(msg: pb.Node) -> tuple[Node, list[int]]:
    node = Node(
        id=msg.id,
        address=msg.address,
        hostname=msg.hostname,
        gpus=tuple(gpu_info_from_proto(g) for g in msg.gpus),
        cpu_count=msg.cpu_count,
        memory_total_bytes=msg.memory_total_bytes,
        alive=msg.alive,
        last_seen=msg.last_seen,
        metrics=node_metrics_from_proto(msg.metrics) if msg.HasField("metrics") else None,
    )
    return node, list(msg.busy_gpu_indices)


def progress_from_proto(msg: pb.Progress) -> Progress:
    return Progress(
        iteration=msg.iteration,
        loss=msg.loss,
        metrics=dict(msg.metrics),
        iteration_time_s=msg.iteration_time_s,
        batch_size=msg.batch_size,
        time=msg.time,
        compute_time_s=msg.compute_time_s,
    )


def event_to_proto(event: Event) -> pb.Event:
    return pb.Event(
        seq=event.seq,
        time=event.time,
        job_id=event.job_id,
        node_id=event.node_id,
        kind=event.kind,
        message=event.message,
    )


def event_from_proto(msg: pb.Event) -> Event:
    return Event(
        seq=msg.seq,
        time=msg.time,
        kind=msg.kind,
        message=msg.message,
        job_id=msg.job_id,
        node_id=msg.node_id,
    )
