"""The identity a caller proved: the ``<kind>:<name>`` common name of its verified client
certificate (the server requires one and checks it against the cluster CA during the TLS
handshake). On a controller started ``--insecure`` nobody proves anything: callers are taken
at their word, which only a development setup may accept."""

from __future__ import annotations

import grpc

from mlsched.security.names import Identity, parse_common_name


def is_tls(context: grpc.ServicerContext) -> bool:
    kinds = context.auth_context().get("transport_security_type", [])
    return b"ssl" in kinds


def certified(context: grpc.ServicerContext) -> Identity | None:
    """The identity named by the caller's verified certificate; None without one."""
    names = context.auth_context().get("x509_common_name", [])
    if len(names) != 1:
        return None
    return parse_common_name(names[0].decode("utf-8", "replace"))
