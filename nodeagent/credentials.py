"""The agent's credentials for the controller: a certificate naming its node, in
``<state-dir>/tls`` (ca.pem, cert.pem, key.pem 0600).

On the first start there is none: the agent makes a key, and redeems its one-time join token
for a certificate at the controller's join endpoint, over TLS checked against the CA file it
was installed with (``--ca-file``), so the token only ever goes to the real controller. From
then on it opens its session with mutual TLS, and the token is spent."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc

from mlsched.security import bundle, pki
from mlsched.security.names import NODE, Identity, parse_common_name
from mlsched.v1 import identity_pb2, identity_pb2_grpc
from nodeagent.config import AgentConfig, ConfigError

log = logging.getLogger(__name__)

TLS_DIR = "tls"
TOKEN_FLAGS = "--join-token-file, --join-token or $MLSCHED_JOIN_TOKEN"
JOIN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SecurityArgs:
    insecure: bool
    ca_file: Path | None
    join_address: str


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "security",
        "The agent talks mutual TLS with a certificate naming its node, kept in"
        " <state-dir>/tls. Without one, it redeems its one-time join token (`mlsched admin"
        " join-token NODE` on the controller's host) at the join endpoint, trusting only"
        " --ca-file.",
    )
    group.add_argument(
        "--ca-file",
        dest="agent_ca_file",
        type=Path,
        metavar="PATH",
        help="the cluster CA (the controller's <state-dir>/tls/ca.pem), needed to join",
    )
    group.add_argument(
        "--join-controller",
        dest="agent_join_address",
        metavar="HOST:PORT",
        default="",
        help="the controller's join endpoint (default: the --controller port + 1)",
    )
    group.add_argument(
        "--insecure",
        dest="agent_insecure",
        action="store_true",
        help="DEVELOPMENT ONLY: plaintext to a controller started --insecure (shared token)",
    )


def security_args(args: argparse.Namespace) -> SecurityArgs:
    return SecurityArgs(
        insecure=bool(getattr(args, "agent_insecure", False)),
        ca_file=getattr(args, "agent_ca_file", None),
        join_address=getattr(args, "agent_join_address", "") or "",
    )


def default_join_address(controller: str) -> str:
    """The first controller's port + 1 (of a list, the first: an HA pair's, docs in deploy/)."""
    host, _, port = controller.split(",")[0].strip().rpartition(":")
    if not port.isdigit():
        raise ConfigError(f"cannot derive the join endpoint from {controller!r}")
    return f"{host}:{int(port) + 1}"


def channel_credentials(
    config: AgentConfig, security: SecurityArgs
) -> grpc.ChannelCredentials | None:
    """Mutual-TLS credentials naming this node (joining first if needed); None: --insecure."""
    if security.insecure:
        if not config.join_token:
            raise ConfigError(f"--insecure needs the shared join token ({TOKEN_FLAGS})")
        log.warning(
            "INSECURE: plaintext to the controller; the join token crosses the network in"
            " clear text (--insecure is for development only)"
        )
        return None
    tls_dir = config.paths().state_dir / TLS_DIR
    if not bundle.exists(tls_dir):
        join(config, security, tls_dir)
    creds = bundle.load(tls_dir)
    named = parse_common_name(creds.common_name())
    if named != Identity(NODE, config.node_id):
        raise ConfigError(
            f"the certificate in {tls_dir} names {creds.common_name()!r}, not node"
            f" {config.node_id!r}; use that node id or another state directory"
        )
    return creds.channel_credentials()


def join(config: AgentConfig, security: SecurityArgs, tls_dir: Path) -> None:
    """Redeem the join token for a certificate; writes the bundle into ``tls_dir``."""
    if security.ca_file is None:
        raise ConfigError(
            f"no certificate in {tls_dir}: joining needs --ca-file (the cluster CA) and a"
            " one-time join token"
        )
    if not config.join_token:
        raise ConfigError(
            f"no certificate in {tls_dir} yet: a join token is required to join ({TOKEN_FLAGS})"
        )
    try:
        ca_pem = security.ca_file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read --ca-file {security.ca_file}: {exc.strerror}") from None
    key = pki.new_key()
    request = identity_pb2.JoinNodeRequest(
        join_token=config.join_token,
        node_id=config.node_id,
        csr_pem=pki.make_csr(key, f"{NODE}:{config.node_id}"),
    )
    address = security.join_address or default_join_address(config.controller)
    with grpc.secure_channel(address, grpc.ssl_channel_credentials(ca_pem)) as channel:
        try:
            reply = identity_pb2_grpc.IdentityServiceStub(channel).JoinNode(
                request, timeout=JOIN_TIMEOUT_S, wait_for_ready=True
            )
        except grpc.RpcError as exc:
            raise ConfigError(
                f"joining at {address} failed: {exc.code().name}: {exc.details()}"
            ) from None
    bundle.Bundle(ca_pem, reply.certificate_pem, pki.key_pem(key)).write(tls_dir)
    log.info("joined as node %s: certificate in %s", config.node_id, tls_dir)
