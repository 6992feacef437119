"""The controller's server credentials: the operator's files (``--tls-cert/--tls-key/--tls-ca``)
or its own CA's, made on the first start in ``<state-dir>/tls``.

Two endpoints share them: the main one requires a client certificate of the CA (mutual TLS:
users, admins, nodes); the join endpoint authenticates only the server and serves nothing a
caller without a certificate may use but IdentityService.JoinNode."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from mlsched.security.authority import Authority, local_names

log = logging.getLogger(__name__)

_ANY_HOST = ("", "0.0.0.0", "::", "[::]", "*")


@dataclass(frozen=True)
class OperatorTls:
    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True)
class ServerTls:
    key_pem: bytes
    cert_pem: bytes
    ca_pem: bytes
    authority: Authority | None  # None: the operator's CA, whose key we do not hold

    def mutual(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_pem)], root_certificates=self.ca_pem, require_client_auth=True
        )

    def server_only(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)])


def server_names(listen: str, extra: tuple[str, ...]) -> list[str]:
    host = listen.rsplit(":", 1)[0].strip("[]")
    names = local_names() + list(extra)
    if host not in _ANY_HOST:
        names.append(host)
    return names


def load_server_tls(
    state_dir: Path, listen: str, extra_names: tuple[str, ...], operator: OperatorTls | None
) -> ServerTls:
    if operator is not None:
        try:
            key, cert, ca = (p.read_bytes() for p in (operator.key, operator.cert, operator.ca))
        except OSError as exc:
            raise OSError(f"cannot read TLS file {exc.filename}: {exc.strerror}") from None
        return ServerTls(key, cert, ca, None)
    authority = Authority(state_dir)
    if authority.ensure():
        log.info("created the cluster CA in %s (keep ca.key secret)", authority.dir)
    key, cert = authority.server_credentials_pem(server_names(listen, extra_names))
    return ServerTls(key, cert, authority.ca_pem(), authority)


def join_listen_for(listen: str) -> str:
    """The join endpoint's default: the main port + 1 (any free port when that is 0)."""
    host, _, port = listen.rpartition(":")
    number = int(port) if port.isdigit() else 0
    return f"{host}:{number + 1 if number else 0}"
