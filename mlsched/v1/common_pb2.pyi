from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_STARTING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUSPENDING: _ClassVar[JobState]
    JOB_STATE_SUSPENDED: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLING: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_LAUNCHING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_SUSPENDING: _ClassVar[TaskState]
    TASK_STATE_SUSPENDED: _ClassVar[TaskState]
    TASK_STATE_COMPLETED: _ClassVar[TaskState]
    TASK_STATE_FAILED: _ClassVar[TaskState]
    TASK_STATE_KILLED: _ClassVar[TaskState]
    TASK_STATE_LOST: _ClassVar[TaskState]

class JobClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_CLASS_UNSPECIFIED: _ClassVar[JobClass]
    JOB_CLASS_BEST_EFFORT: _ClassVar[JobClass]
    JOB_CLASS_STRICT_SLO: _ClassVar[JobClass]
    JOB_CLASS_SOFT_SLO: _ClassVar[JobClass]

class MetricGoal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    METRIC_GOAL_UNSPECIFIED: _ClassVar[MetricGoal]
    METRIC_GOAL_MAXIMIZE: _ClassVar[MetricGoal]
    METRIC_GOAL_MINIMIZE: _ClassVar[MetricGoal]

class Launcher(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAUNCHER_UNSPECIFIED: _ClassVar[Launcher]
    LAUNCHER_TORCHRUN: _ClassVar[Launcher]

class BatchRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BATCH_RULE_UNSPECIFIED: _ClassVar[BatchRule]
    BATCH_RULE_FIXED_GLOBAL: _ClassVar[BatchRule]
    BATCH_RULE_FIXED_PER_GPU: _ClassVar[BatchRule]
    BATCH_RULE_SCHEDULER: _ClassVar[BatchRule]

class StopOption(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_OPTION_UNSPECIFIED: _ClassVar[StopOption]
    STOP_OPTION_ITERATIONS: _ClassVar[StopOption]
    STOP_OPTION_OPT_STOP: _ClassVar[StopOption]
    STOP_OPTION_REQUIRED_ACCURACY: _ClassVar[StopOption]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_STARTING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUSPENDING: JobState
JOB_STATE_SUSPENDED: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLING: JobState
JOB_STATE_CANCELLED: JobState
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_LAUNCHING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_SUSPENDING: TaskState
TASK_STATE_SUSPENDED: TaskState
TASK_STATE_COMPLETED: TaskState
TASK_STATE_FAILED: TaskState
TASK_STATE_KILLED: TaskState
TASK_STATE_LOST: TaskState
JOB_CLASS_UNSPECIFIED: JobClass
JOB_CLASS_BEST_EFFORT: JobClass
JOB_CLASS_STRICT_SLO: JobClass
JOB_CLASS_SOFT_SLO: JobClass
METRIC_GOAL_UNSPECIFIED: MetricGoal
METRIC_GOAL_MAXIMIZE: MetricGoal
METRIC_GOAL_MINIMIZE: MetricGoal
LAUNCHER_UNSPECIFIED: Launcher
LAUNCHER_TORCHRUN: Launcher
BATCH_RULE_UNSPECIFIED: BatchRule
BATCH_RULE_FIXED_GLOBAL: BatchRule
BATCH_RULE_FIXED_PER_GPU: BatchRule
BATCH_RULE_SCHEDULER: BatchRule
STOP_OPTION_UNSPECIFIED: StopOption
STOP_OPTION_ITERATIONS: StopOption
STOP_OPTION_OPT_STOP: StopOption
STOP_OPTION_REQUIRED_ACCURACY: StopOption

class Deadline(_message.Message):
    __slots__ = ("seconds_after_submit", "reward")
    SECONDS_AFTER_SUBMIT_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    seconds_after_submit: float
    reward: float
    def __init__(self, seconds_after_submit: _Optional[float] = ..., reward: _Optional[float] = ...) -> None: ...

class IterationCriterion(_message.Message):
    __slots__ = ("iterations",)
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    iterations: int
    def __init__(self, iterations: _Optional[int] = ...) -> None: ...

class TargetMetricCriterion(_message.Message):
    __slots__ = ("metric", "target", "goal", "max_iterations")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    GOAL_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    metric: str
    target: float
    goal: MetricGoal
    max_iterations: int
    def __init__(self, metric: _Optional[str] = ..., target: _Optional[float] = ..., goal: _Optional[_Union[MetricGoal, str]] = ..., max_iterations: _Optional[int] = ...) -> None: ...

class StoppingCriterion(_message.Message):
    __slots__ = ("iterations", "target_metric")
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    TARGET_METRIC_FIELD_NUMBER: _ClassVar[int]
    iterations: IterationCriterion
    target_metric: TargetMetricCriterion
    def __init__(self, iterations: _Optional[_Union[IterationCriterion, _Mapping]] = ..., target_metric: _Optional[_Union[TargetMetricCriterion, _Mapping]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "command", "working_dir", "env", "gpus", "gpus_per_process", "job_class", "deadlines", "stopping", "max_retries", "batch_size", "mlfs", "elastic", "ps", "launcher", "suspend_grace_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_PROCESS_FIELD_NUMBER: _ClassVar[int]
    JOB_CLASS_FIELD_NUMBER: _ClassVar[int]
    DEADLINES_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MLFS_FIELD_NUMBER: _ClassVar[int]
    ELASTIC_FIELD_NUMBER: _ClassVar[int]
    PS_FIELD_NUMBER: _ClassVar[int]
    LAUNCHER_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_GRACE_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    command: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    env: _containers.ScalarMap[str, str]
    gpus: int
    gpus_per_process: int
    job_class: JobClass
    deadlines: _containers.RepeatedCompositeFieldContainer[Deadline]
    stopping: StoppingCriterion
    max_retries: int
    batch_size: int
    mlfs: MlfsSpec
    elastic: ElasticSpec
    ps: PsSpec
    launcher: Launcher
    suspend_grace_s: float
    def __init__(self, name: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., gpus: _Optional[int] = ..., gpus_per_process: _Optional[int] = ..., job_class: _Optional[_Union[JobClass, str]] = ..., deadlines: _Optional[_Iterable[_Union[Deadline, _Mapping]]] = ..., stopping: _Optional[_Union[StoppingCriterion, _Mapping]] = ..., max_retries: _Optional[int] = ..., batch_size: _Optional[int] = ..., mlfs: _Optional[_Union[MlfsSpec, _Mapping]] = ..., elastic: _Optional[_Union[ElasticSpec, _Mapping]] = ..., ps: _Optional[_Union[PsSpec, _Mapping]] = ..., launcher: _Optional[_Union[Launcher, str]] = ..., suspend_grace_s: _Optional[float] = ...) -> None: ...

class RoleResources(_message.Message):
    __slots__ = ("gpus", "cpus", "memory_gb")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GB_FIELD_NUMBER: _ClassVar[int]
    gpus: float
    cpus: float
    memory_gb: float
    def __init__(self, gpus: _Optional[float] = ..., cpus: _Optional[float] = ..., memory_gb: _Optional[float] = ...) -> None: ...

class PsSpec(_message.Message):
    __slots__ = ("min_workers", "max_workers", "min_servers", "max_servers", "worker", "server")
    MIN_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MAX_WORKERS_FIELD_NUMBER: _ClassVar[int]
    MIN_SERVERS_FIELD_NUMBER: _ClassVar[int]
    MAX_SERVERS_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    SERVER_FIELD_NUMBER: _ClassVar[int]
    min_workers: int
    max_workers: int
    min_servers: int
    max_servers: int
    worker: RoleResources
    server: RoleResources
    def __init__(self, min_workers: _Optional[int] = ..., max_workers: _Optional[int] = ..., min_servers: _Optional[int] = ..., max_servers: _Optional[int] = ..., worker: _Optional[_Union[RoleResources, _Mapping]] = ..., server: _Optional[_Union[RoleResources, _Mapping]] = ...) -> None: ...

class ElasticSpec(_message.Message):
    __slots__ = ("min_gpus", "max_gpus", "batch", "max_batch_size", "linear_lr")
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LINEAR_LR_FIELD_NUMBER: _ClassVar[int]
    min_gpus: int
    max_gpus: int
    batch: BatchRule
    max_batch_size: int
    linear_lr: bool
    def __init__(self, min_gpus: _Optional[int] = ..., max_gpus: _Optional[int] = ..., batch: _Optional[_Union[BatchRule, str]] = ..., max_batch_size: _Optional[int] = ..., linear_lr: _Optional[bool] = ...) -> None: ...

class PartitionDependency(_message.Message):
    __slots__ = ("parent", "child")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    CHILD_FIELD_NUMBER: _ClassVar[int]
    parent: int
    child: int
    def __init__(self, parent: _Optional[int] = ..., child: _Optional[int] = ...) -> None: ...

class MlfsSpec(_message.Message):
    __slots__ = ("urgency", "partitions", "dependencies", "stop_option", "system_may_switch", "required_accuracy")
    URGENCY_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    STOP_OPTION_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_MAY_SWITCH_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    urgency: float
    partitions: _containers.RepeatedScalarFieldContainer[float]
    dependencies: _containers.RepeatedCompositeFieldContainer[PartitionDependency]
    stop_option: StopOption
    system_may_switch: bool
    required_accuracy: float
    def __init__(self, urgency: _Optional[float] = ..., partitions: _Optional[_Iterable[float]] = ..., dependencies: _Optional[_Iterable[_Union[PartitionDependency, _Mapping]]] = ..., stop_option: _Optional[_Union[StopOption, str]] = ..., system_may_switch: _Optional[bool] = ..., required_accuracy: _Optional[float] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("rank", "node_id", "gpu_indices", "state", "attempt", "exit_code", "message")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node_id: str
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    state: TaskState
    attempt: int
    exit_code: int
    message: str
    def __init__(self, rank: _Optional[int] = ..., node_id: _Optional[str] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., state: _Optional[_Union[TaskState, str]] = ..., attempt: _Optional[int] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "user", "spec", "state", "submit_time", "first_start_time", "end_time", "attempt", "suspensions", "node_history", "metrics", "iteration", "checkpoint_step", "restored_step", "lease_expires_at", "message", "tasks", "failures", "resumptions", "estimate", "speed_samples", "sr_overheads_s")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    FIRST_START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SUSPENSIONS_FIELD_NUMBER: _ClassVar[int]
    NODE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    RESTORED_STEP_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    RESUMPTIONS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATE_FIELD_NUMBER: _ClassVar[int]
    SPEED_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SR_OVERHEADS_S_FIELD_NUMBER: _ClassVar[int]
    id: str
    user: str
    spec: JobSpec
    state: JobState
    submit_time: float
    first_start_time: float
    end_time: float
    attempt: int
    suspensions: int
    node_history: _containers.RepeatedScalarFieldContainer[str]
    metrics: _containers.ScalarMap[str, float]
    iteration: int
    checkpoint_step: int
    restored_step: int
    lease_expires_at: float
    message: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    failures: int
    resumptions: _containers.RepeatedCompositeFieldContainer[Resumption]
    estimate: JobEstimate
    speed_samples: _containers.RepeatedCompositeFieldContainer[SpeedSample]
    sr_overheads_s: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[str] = ..., user: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., submit_time: _Optional[float] = ..., first_start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., attempt: _Optional[int] = ..., suspensions: _Optional[int] = ..., node_history: _Optional[_Iterable[str]] = ..., metrics: _Optional[_Mapping[str, float]] = ..., iteration: _Optional[int] = ..., checkpoint_step: _Optional[int] = ..., restored_step: _Optional[int] = ..., lease_expires_at: _Optional[float] = ..., message: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., failures: _Optional[int] = ..., resumptions: _Optional[_Iterable[_Union[Resumption, _Mapping]]] = ..., estimate: _Optional[_Union[JobEstimate, _Mapping]] = ..., speed_samples: _Optional[_Iterable[_Union[SpeedSample, _Mapping]]] = ..., sr_overheads_s: _Optional[_Iterable[float]] = ...) -> None: ...

class SpeedSample(_message.Message):
    __slots__ = ("gpus", "nodes", "iteration_time_s", "compute_time_s", "count")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    nodes: int
    iteration_time_s: float
    compute_time_s: float
    count: int
    def __init__(self, gpus: _Optional[int] = ..., nodes: _Optional[int] = ..., iteration_time_s: _Optional[float] = ..., compute_time_s: _Optional[float] = ..., count: _Optional[int] = ...) -> None: ...

class JobEstimate(_message.Message):
    __slots__ = ("phase", "iterations", "iteration_time_s", "remaining_s", "reward", "allocation", "time")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    phase: str
    iterations: int
    iteration_time_s: float
    remaining_s: float
    reward: float
    allocation: str
    time: float
    def __init__(self, phase: _Optional[str] = ..., iterations: _Optional[int] = ..., iteration_time_s: _Optional[float] = ..., remaining_s: _Optional[float] = ..., reward: _Optional[float] = ..., allocation: _Optional[str] = ..., time: _Optional[float] = ...) -> None: ...

class Resumption(_message.Message):
    __slots__ = ("suspended_at", "checkpoint_step", "from_nodes", "resumed_at", "restored_step", "to_nodes")
    SUSPENDED_AT_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    FROM_NODES_FIELD_NUMBER: _ClassVar[int]
    RESUMED_AT_FIELD_NUMBER: _ClassVar[int]
    RESTORED_STEP_FIELD_NUMBER: _ClassVar[int]
    TO_NODES_FIELD_NUMBER: _ClassVar[int]
    suspended_at: float
    checkpoint_step: int
    from_nodes: _containers.RepeatedScalarFieldContainer[str]
    resumed_at: float
    restored_step: int
    to_nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, suspended_at: _Optional[float] = ..., checkpoint_step: _Optional[int] = ..., from_nodes: _Optional[_Iterable[str]] = ..., resumed_at: _Optional[float] = ..., restored_step: _Optional[int] = ..., to_nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class GpuInfo(_message.Message):
    __slots__ = ("index", "name", "virtual", "memory_total_bytes")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    index: int
    name: str
    virtual: bool
    memory_total_bytes: int
    def __init__(self, index: _Optional[int] = ..., name: _Optional[str] = ..., virtual: _Optional[bool] = ..., memory_total_bytes: _Optional[int] = ...) -> None: ...

class GpuMetrics(_message.Message):
    __slots__ = ("index", "utilization_percent", "memory_used_bytes", "memory_total_bytes", "virtual")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    VIRTUAL_FIELD_NUMBER: _ClassVar[int]
    index: int
    utilization_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    virtual: bool
    def __init__(self, index: _Optional[int] = ..., utilization_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., virtual: _Optional[bool] = ...) -> None: ...

class NodeMetrics(_message.Message):
    __slots__ = ("time", "cpu_percent", "memory_used_bytes", "memory_total_bytes", "net_rx_bytes_per_s", "net_tx_bytes_per_s", "gpus", "state_disk_free_bytes", "state_disk_full")
    TIME_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_RX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    NET_TX_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    STATE_DISK_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    time: float
    cpu_percent: float
    memory_used_bytes: int
    memory_total_bytes: int
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float
    gpus: _containers.RepeatedCompositeFieldContainer[GpuMetrics]
    state_disk_free_bytes: int
    state_disk_full: bool
    def __init__(self, time: _Optional[float] = ..., cpu_percent: _Optional[float] = ..., memory_used_bytes: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., net_rx_bytes_per_s: _Optional[float] = ..., net_tx_bytes_per_s: _Optional[float] = ..., gpus: _Optional[_Iterable[_Union[GpuMetrics, _Mapping]]] = ..., state_disk_free_bytes: _Optional[int] = ..., state_disk_full: _Optional[bool] = ...) -> None: ...

class TaskMetrics(_message.Message):
    __slots__ = ("job_id", "rank", "attempt", "cpu_percent", "memory_rss_bytes", "gpu_memory_bytes", "net_bytes_per_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NET_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    attempt: int
    cpu_percent: float
    memory_rss_bytes: int
    gpu_memory_bytes: int
    net_bytes_per_s: float
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., attempt: _Optional[int] = ..., cpu_percent: _Optional[float] = ..., memory_rss_bytes: _Optional[int] = ..., gpu_memory_bytes: _Optional[int] = ..., net_bytes_per_s: _Optional[float] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("id", "address", "hostname", "gpus", "cpu_count", "memory_total_bytes", "alive", "last_seen", "metrics", "busy_gpu_indices")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    BUSY_GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    hostname: str
    gpus: _containers.RepeatedCompositeFieldContainer[GpuInfo]
    cpu_count: int
    memory_total_bytes: int
    alive: bool
    last_seen: float
    metrics: NodeMetrics
    busy_gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., hostname: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[GpuInfo, _Mapping]]] = ..., cpu_count: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., alive: _Optional[bool] = ..., last_seen: _Optional[float] = ..., metrics: _Optional[_Union[NodeMetrics, _Mapping]] = ..., busy_gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("iteration", "loss", "metrics", "iteration_time_s", "batch_size", "time", "compute_time_s")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ITERATION_TIME_S_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_TIME_S_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    loss: float
    metrics: _containers.ScalarMap[str, float]
    iteration_time_s: float
    batch_size: int
    time: float
    compute_time_s: float
    def __init__(self, iteration: _Optional[int] = ..., loss: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ..., iteration_time_s: _Optional[float] = ..., batch_size: _Optional[int] = ..., time: _Optional[float] = ..., compute_time_s: _Optional[float] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("seq", "time", "job_id", "node_id", "kind", "message")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: float
    job_id: str
    node_id: str
    kind: str
    message: str
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[float] = ..., job_id: _Optional[str] = ..., node_id: _Optional[str] = ..., kind: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
