"""IdentityService: a node redeems its one-time join token for a certificate naming it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import grpc

from controller.auth.jointokens import JoinRefused, JoinTokens
from mlsched.security import pki
from mlsched.security.authority import Authority
from mlsched.security.names import NODE, NameError_, identity
from mlsched.v1 import identity_pb2, identity_pb2_grpc

log = logging.getLogger(__name__)

MAX_CSR_BYTES = 8 * 1024


class IdentityServicer(identity_pb2_grpc.IdentityServiceServicer):
    def __init__(
        self,
        authority: Authority,
        tokens: JoinTokens,
        audit: Callable[[str, str], None],
        now: Callable[[], float] = time.time,
    ) -> None:
        self._authority = authority
        self._tokens = tokens
        self._audit = audit
        self._now = now

    def JoinNode(
        self, request: identity_pb2.JoinNodeRequest, context: grpc.ServicerContext
    ) -> identity_pb2.JoinNodeResponse:
        try:
            who = identity(NODE, request.node_id)
        except NameError_ as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if len(request.csr_pem) > MAX_CSR_BYTES:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the certificate request is too big")
        try:
            public_key = pki.csr_public_key(request.csr_pem)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"certificate request: {exc}")
        try:
            self._tokens.redeem(request.join_token, who.name, self._now())
        except JoinRefused as exc:
            log.warning("join of node %s refused: %s (from %s)", who.name, exc, context.peer())
            context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        certificate = self._authority.sign(who, public_key)
        self._audit(who.name, f"node {who.name} joined with a one-time token from {context.peer()}")
        return identity_pb2.JoinNodeResponse(
            certificate_pem=certificate, ca_pem=self._authority.ca_pem()
        )
