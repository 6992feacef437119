from mlsched.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_STATUS_UNSPECIFIED: _ClassVar[LeaseStatus]
    LEASE_STATUS_GRANTED: _ClassVar[LeaseStatus]
    LEASE_STATUS_RENEWED: _ClassVar[LeaseStatus]
    LEASE_STATUS_EXPIRED: _ClassVar[LeaseStatus]
LEASE_STATUS_UNSPECIFIED: LeaseStatus
LEASE_STATUS_GRANTED: LeaseStatus
LEASE_STATUS_RENEWED: LeaseStatus
LEASE_STATUS_EXPIRED: LeaseStatus

class TaskRef(_message.Message):
    __slots__ = ("job_id", "rank", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("task", "state", "exit_code", "message", "checkpoint_step", "restored_step", "pid", "restored", "last_progress")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    RESTORED_STEP_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    LAST_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    state: _common_pb2.TaskState
    exit_code: int
    message: str
    checkpoint_step: int
    restored_step: int
    pid: int
    restored: bool
    last_progress: _common_pb2.Progress
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.TaskState, str]] = ..., exit_code: _Optional[int] = ..., message: _Optional[str] = ..., checkpoint_step: _Optional[int] = ..., restored_step: _Optional[int] = ..., pid: _Optional[int] = ..., restored: _Optional[bool] = ..., last_progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ...) -> None: ...

class RegisterAgent(_message.Message):
    __slots__ = ("node_id", "address", "hostname", "gpus", "cpu_count", "memory_total_bytes", "tasks", "agent_version", "self_fence_margin_s")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SELF_FENCE_MARGIN_S_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    address: str
    hostname: str
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.GpuInfo]
    cpu_count: int
    memory_total_bytes: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    agent_version: str
    self_fence_margin_s: float
    def __init__(self, node_id: _Optional[str] = ..., address: _Optional[str] = ..., hostname: _Optional[str] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.GpuInfo, _Mapping]]] = ..., cpu_count: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., agent_version: _Optional[str] = ..., self_fence_margin_s: _Optional[float] = ...) -> None: ...

class MetricsReport(_message.Message):
    __slots__ = ("node", "tasks", "load")
    NODE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    node: _common_pb2.NodeMetrics
    tasks: _containers.RepeatedCompositeFieldContainer[_common_pb2.TaskMetrics]
    load: NodeLoad
    def __init__(self, node: _Optional[_Union[_common_pb2.NodeMetrics, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[_common_pb2.TaskMetrics, _Mapping]]] = ..., load: _Optional[_Union[NodeLoad, _Mapping]] = ...) -> None: ...

class NodeCapacity(_message.Message):
    __slots__ = ("cpu_cores", "memory_bytes", "bandwidth_bytes_per_s")
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    BANDWIDTH_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    cpu_cores: float
    memory_bytes: int
    bandwidth_bytes_per_s: float
    def __init__(self, cpu_cores: _Optional[float] = ..., memory_bytes: _Optional[int] = ..., bandwidth_bytes_per_s: _Optional[float] = ...) -> None: ...

class NodeLoad(_message.Message):
    __slots__ = ("utilization", "gpu_utilization", "capacity", "tasks")
    class UtilizationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class GpuUtilizationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    GPU_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    utilization: _containers.ScalarMap[str, float]
    gpu_utilization: _containers.ScalarMap[int, float]
    capacity: NodeCapacity
    tasks: _containers.RepeatedCompositeFieldContainer[TaskLoad]
    def __init__(self, utilization: _Optional[_Mapping[str, float]] = ..., gpu_utilization: _Optional[_Mapping[int, float]] = ..., capacity: _Optional[_Union[NodeCapacity, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskLoad, _Mapping]]] = ...) -> None: ...

class TaskLoad(_message.Message):
    __slots__ = ("task", "demand", "gpu_index", "gpu_utilization")
    class DemandEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    GPU_INDEX_FIELD_NUMBER: _ClassVar[int]
    GPU_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    demand: _containers.ScalarMap[str, float]
    gpu_index: int
    gpu_utilization: float
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., demand: _Optional[_Mapping[str, float]] = ..., gpu_index: _Optional[int] = ..., gpu_utilization: _Optional[float] = ...) -> None: ...

class MigrationRequest(_message.Message):
    __slots__ = ("task", "server_utilization", "demand", "reason")
    class ServerUtilizationEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class DemandEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TASK_FIELD_NUMBER: _ClassVar[int]
    SERVER_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    server_utilization: _containers.ScalarMap[str, float]
    demand: _containers.ScalarMap[str, float]
    reason: str
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., server_utilization: _Optional[_Mapping[str, float]] = ..., demand: _Optional[_Mapping[str, float]] = ..., reason: _Optional[str] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("task", "progress")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    progress: _common_pb2.Progress
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ...) -> None: ...

class LogsReply(_message.Message):
    __slots__ = ("request_id", "content", "truncated", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    content: str
    truncated: bool
    error: str
    def __init__(self, request_id: _Optional[str] = ..., content: _Optional[str] = ..., truncated: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class AgentSessionRequest(_message.Message):
    __slots__ = ("register", "metrics", "task_status", "progress", "logs", "migration_request")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    TASK_STATUS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    MIGRATION_REQUEST_FIELD_NUMBER: _ClassVar[int]
    register: RegisterAgent
    metrics: MetricsReport
    task_status: TaskStatus
    progress: ProgressReport
    logs: LogsReply
    migration_request: MigrationRequest
    def __init__(self, register: _Optional[_Union[RegisterAgent, _Mapping]] = ..., metrics: _Optional[_Union[MetricsReport, _Mapping]] = ..., task_status: _Optional[_Union[TaskStatus, _Mapping]] = ..., progress: _Optional[_Union[ProgressReport, _Mapping]] = ..., logs: _Optional[_Union[LogsReply, _Mapping]] = ..., migration_request: _Optional[_Union[MigrationRequest, _Mapping]] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("node_id", "heartbeat_interval_s", "heartbeat_timeout_s")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    def __init__(self, node_id: _Optional[str] = ..., heartbeat_interval_s: _Optional[float] = ..., heartbeat_timeout_s: _Optional[float] = ...) -> None: ...

class LaunchTask(_message.Message):
    __slots__ = ("task", "spec", "gpu_indices", "world_size", "local_rank", "local_world_size", "master_addr", "master_port", "resume", "user", "ps_workers")
    TASK_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    PS_WORKERS_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    spec: _common_pb2.JobSpec
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    resume: bool
    user: str
    ps_workers: int
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., world_size: _Optional[int] = ..., local_rank: _Optional[int] = ..., local_world_size: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., resume: _Optional[bool] = ..., user: _Optional[str] = ..., ps_workers: _Optional[int] = ...) -> None: ...

class SuspendTask(_message.Message):
    __slots__ = ("task", "grace_s", "reason")
    TASK_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    grace_s: float
    reason: str
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., grace_s: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class KillTask(_message.Message):
    __slots__ = ("task", "reason")
    TASK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    reason: str
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., reason: _Optional[str] = ...) -> None: ...

class LeaseUpdate(_message.Message):
    __slots__ = ("task", "status", "expires_at")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    status: LeaseStatus
    expires_at: float
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., status: _Optional[_Union[LeaseStatus, str]] = ..., expires_at: _Optional[float] = ...) -> None: ...

class TrainerCommand(_message.Message):
    __slots__ = ("task", "stop", "set_batch_size")
    TASK_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SET_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    stop: StopTraining
    set_batch_size: SetBatchSize
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., stop: _Optional[_Union[StopTraining, _Mapping]] = ..., set_batch_size: _Optional[_Union[SetBatchSize, _Mapping]] = ...) -> None: ...

class StopTraining(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class SetBatchSize(_message.Message):
    __slots__ = ("batch_size",)
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    def __init__(self, batch_size: _Optional[int] = ...) -> None: ...

class FetchLogs(_message.Message):
    __slots__ = ("request_id", "task", "max_bytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    task: TaskRef
    max_bytes: int
    def __init__(self, request_id: _Optional[str] = ..., task: _Optional[_Union[TaskRef, _Mapping]] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class AgentSessionResponse(_message.Message):
    __slots__ = ("registered", "launch", "suspend", "kill", "lease", "trainer_command", "fetch_logs", "ack", "priority", "regroup")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    KILL_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    TRAINER_COMMAND_FIELD_NUMBER: _ClassVar[int]
    FETCH_LOGS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REGROUP_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    launch: LaunchTask
    suspend: SuspendTask
    kill: KillTask
    lease: LeaseUpdate
    trainer_command: TrainerCommand
    fetch_logs: FetchLogs
    ack: TaskStatusAck
    priority: TaskPriority
    regroup: RegroupTask
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., launch: _Optional[_Union[LaunchTask, _Mapping]] = ..., suspend: _Optional[_Union[SuspendTask, _Mapping]] = ..., kill: _Optional[_Union[KillTask, _Mapping]] = ..., lease: _Optional[_Union[LeaseUpdate, _Mapping]] = ..., trainer_command: _Optional[_Union[TrainerCommand, _Mapping]] = ..., fetch_logs: _Optional[_Union[FetchLogs, _Mapping]] = ..., ack: _Optional[_Union[TaskStatusAck, _Mapping]] = ..., priority: _Optional[_Union[TaskPriority, _Mapping]] = ..., regroup: _Optional[_Union[RegroupTask, _Mapping]] = ...) -> None: ...

class RegroupTask(_message.Message):
    __slots__ = ("job_id", "attempt", "generation", "world_size", "new_ranks", "spec", "user", "master_port", "batch_size")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NEW_RANKS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    generation: int
    world_size: int
    new_ranks: _containers.RepeatedCompositeFieldContainer[RegroupRank]
    spec: _common_pb2.JobSpec
    user: str
    master_port: int
    batch_size: int
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., generation: _Optional[int] = ..., world_size: _Optional[int] = ..., new_ranks: _Optional[_Iterable[_Union[RegroupRank, _Mapping]]] = ..., spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., user: _Optional[str] = ..., master_port: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class RegroupRank(_message.Message):
    __slots__ = ("rank", "gpu_indices")
    RANK_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    rank: int
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, rank: _Optional[int] = ..., gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskPriority(_message.Message):
    __slots__ = ("task", "priority")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    priority: float
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ..., priority: _Optional[float] = ...) -> None: ...

class TaskStatusAck(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: TaskRef
    def __init__(self, task: _Optional[_Union[TaskRef, _Mapping]] = ...) -> None: ...
