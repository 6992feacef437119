"""The JobService's door: who the caller is (authenticated), whether they are within their
request rate, and stream slots for long calls."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import grpc

from controller.auth.limits import RateLimiter, StreamSlots, UserLimits
from controller.auth.peer import certified, is_tls
from mlsched.client import RATE_LIMITED
from mlsched.security.names import USER, Identity, NameError_, check_name

USER_KEY = "mlsched-user"


class Guard:
    def __init__(
        self,
        limits: UserLimits | None = None,
        *,
        allow_claims: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        limits = limits or UserLimits()
        self._allow_claims = allow_claims
        self._rate = RateLimiter(limits.requests_per_s, limits.burst, monotonic)
        self._streams = StreamSlots(limits.streams_per_user, limits.streams_total)

    def person(self, context: grpc.ServicerContext) -> Identity:
        """The authenticated user or admin calling; aborts UNAUTHENTICATED, PERMISSION_DENIED
        (a node's certificate) or RESOURCE_EXHAUSTED (over the rate limit)."""
        who = self._identify(context)
        if not self._rate.allow(who.name):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"{RATE_LIMITED} from {who.name}; slow down"
            )
        return who

    def _identify(self, context: grpc.ServicerContext) -> Identity:
        if is_tls(context):
            who = certified(context)
            if who is None:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "no client certificate")
            if not who.is_person:
                context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"a {who.kind} certificate cannot use the job service",
                )
            return who
        if not self._allow_claims:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "plaintext callers are not accepted")
        claimed = dict(context.invocation_metadata()).get(USER_KEY, "")
        try:
            return Identity(USER, check_name(str(claimed).strip(), "user name"))
        except NameError_ as exc:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, f"'{USER_KEY}' metadata: {exc}")

    @contextlib.contextmanager
    def stream(self, who: Identity, context: grpc.ServicerContext) -> Iterator[None]:
        """Hold a slot for a long call of ``who`` (an event stream, a log fetch) while the body
        runs; RESOURCE_EXHAUSTED without one."""
        refusal = self._streams.take(who.name)
        if refusal:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        try:
            yield
        finally:
            self._streams.give_back(who.name)
