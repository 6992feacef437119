from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class JoinNodeRequest(_message.Message):
    __slots__ = ("join_token", "node_id", "csr_pem")
    JOIN_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    CSR_PEM_FIELD_NUMBER: _ClassVar[int]
    join_token: str
    node_id: str
    csr_pem: bytes
    def __init__(self, join_token: _Optional[str] = ..., node_id: _Optional[str] = ..., csr_pem: _Optional[bytes] = ...) -> None: ...

class JoinNodeResponse(_message.Message):
    __slots__ = ("certificate_pem", "ca_pem")
    CERTIFICATE_PEM_FIELD_NUMBER: _ClassVar[int]
    CA_PEM_FIELD_NUMBER: _ClassVar[int]
    certificate_pem: bytes
    ca_pem: bytes
    def __init__(self, certificate_pem: _Optional[bytes] = ..., ca_pem: _Optional[bytes] = ...) -> None: ...
