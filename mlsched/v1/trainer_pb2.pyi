from mlsched.v1 import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckpointSaved(_message.Message):
    __slots__ = ("step", "path")
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    step: int
    path: str
    def __init__(self, step: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class Restored(_message.Message):
    __slots__ = ("step",)
    STEP_FIELD_NUMBER: _ClassVar[int]
    step: int
    def __init__(self, step: _Optional[int] = ...) -> None: ...

class SaveState(_message.Message):
    __slots__ = ("in_progress", "step")
    IN_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    in_progress: bool
    step: int
    def __init__(self, in_progress: _Optional[bool] = ..., step: _Optional[int] = ...) -> None: ...

class TrainerSessionRequest(_message.Message):
    __slots__ = ("progress", "checkpoint_saved", "restored", "save")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_SAVED_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    SAVE_FIELD_NUMBER: _ClassVar[int]
    progress: _common_pb2.Progress
    checkpoint_saved: CheckpointSaved
    restored: Restored
    save: SaveState
    def __init__(self, progress: _Optional[_Union[_common_pb2.Progress, _Mapping]] = ..., checkpoint_saved: _Optional[_Union[CheckpointSaved, _Mapping]] = ..., restored: _Optional[_Union[Restored, _Mapping]] = ..., save: _Optional[_Union[SaveState, _Mapping]] = ...) -> None: ...

class SuspendNow(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class StopNow(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ChangeBatchSize(_message.Message):
    __slots__ = ("batch_size",)
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    batch_size: int
    def __init__(self, batch_size: _Optional[int] = ...) -> None: ...

class LeaseNotice(_message.Message):
    __slots__ = ("expires_at", "renewed")
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    expires_at: float
    renewed: bool
    def __init__(self, expires_at: _Optional[float] = ..., renewed: _Optional[bool] = ...) -> None: ...

class AgentAlive(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Regroup(_message.Message):
    __slots__ = ("generation", "world_size", "master_addr", "master_port", "batch_size")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    MASTER_ADDR_FIELD_NUMBER: _ClassVar[int]
    MASTER_PORT_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    generation: int
    world_size: int
    master_addr: str
    master_port: int
    batch_size: int
    def __init__(self, generation: _Optional[int] = ..., world_size: _Optional[int] = ..., master_addr: _Optional[str] = ..., master_port: _Optional[int] = ..., batch_size: _Optional[int] = ...) -> None: ...

class TrainerSessionResponse(_message.Message):
    __slots__ = ("suspend", "stop", "change_batch_size", "lease", "alive", "regroup")
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    CHANGE_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    REGROUP_FIELD_NUMBER: _ClassVar[int]
    suspend: SuspendNow
    stop: StopNow
    change_batch_size: ChangeBatchSize
    lease: LeaseNotice
    alive: AgentAlive
    regroup: Regroup
    def __init__(self, suspend: _Optional[_Union[SuspendNow, _Mapping]] = ..., stop: _Optional[_Union[StopNow, _Mapping]] = ..., change_batch_size: _Optional[_Union[ChangeBatchSize, _Mapping]] = ..., lease: _Optional[_Union[LeaseNotice, _Mapping]] = ..., alive: _Optional[_Union[AgentAlive, _Mapping]] = ..., regroup: _Optional[_Union[Regroup, _Mapping]] = ...) -> None: ...
