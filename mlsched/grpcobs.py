"""gRPC observability for every daemon's server: request metrics (an interceptor) and the
standard health service (``grpc.health.v1.Health``, grpcio-health-checking)."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Counter, Histogram

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class RpcMetrics:
    """``mlsched_grpc_requests_total{method,code}`` and the handling time per method (a
    stream's time is its whole life)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "mlsched_grpc_requests",
            "gRPC requests handled, by full method name and status code",
            ["method", "code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "mlsched_grpc_request_duration_seconds",
            "Time from a request's arrival to its answer (streams: to their end)",
            ["method"],
            registry=registry,
        )

    def observe(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        self.requests.labels(method, code.name).inc()
        self.seconds.labels(method).observe(seconds)


def _code(context: grpc.ServicerContext, failed: bool) -> grpc.StatusCode:
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK


def timed(metrics: RpcMetrics, method: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    """``behaviour`` counted and timed, of the same kind (function, coroutine function,
    generator or async generator: a grpc.aio server runs each kind its own way)."""

    def done(context: Any, started: float, failed: bool) -> None:
        metrics.observe(method, _code(context, failed), time.perf_counter() - started)

    if inspect.isasyncgenfunction(behaviour):

        async def agen(request: Any, context: Any) -> AsyncIterator[Any]:
            started, failed = time.perf_counter(), True
            try:
                async for reply in behaviour(request, context):
                    yield reply
                failed = False
            finally:
                done(context, started, failed)

        return agen
    if inspect.iscoroutinefunction(behaviour):

        async def coro(request: Any, context: Any) -> Any:
            started, failed = time.perf_counter(), True
            try:
                reply = await behaviour(request, context)
                failed = False
                return reply
            finally:
                done(context, started, failed)

        return coro
    if inspect.isgeneratorfunction(behaviour):

        def gen(request: Any, context: Any) -> Iterator[Any]:
            started, failed = time.perf_counter(), True
            try:
                yield from behaviour(request, context)
                failed = False
            finally:
                done(context, started, failed)

        return gen

    def plain(request: Any, context: Any) -> Any:
        started, failed = time.perf_counter(), True
        try:
            reply = behaviour(request, context)
            failed = False
            return reply
        finally:
            done(context, started, failed)

    return plain


_KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def _instrument(metrics: RpcMetrics, handler: Any, method: str) -> Any:
    if handler is None:
        return None
    for kind in _KINDS:
        behaviour = getattr(handler, kind)
        if behaviour is not None:
            return handler._replace(**{kind: timed(metrics, method, behaviour)})
    return handler


class RpcMetricsInterceptor(grpc.ServerInterceptor):
    """Counts and times every RPC of a synchronous ``grpc.server``."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        return _instrument(self._metrics, continuation(details), details.method)


class AioRpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC of a ``grpc.aio.server``."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        return _instrument(self._metrics, await continuation(details), details.method)


class Health:
    """The health service on ``server`` (a ``grpc.server`` or a ``grpc.aio.server``):
    NOT_SERVING, overall and for each of ``services``, until :meth:`set_ready`.

    On an aio server the statuses are set on its event loop, through ``run_on_loop`` (a function
    that runs a coroutine there and waits for it)."""

    def __init__(
        self,
        server: Any,
        services: tuple[str, ...] = (),
        run_on_loop: Callable[[Any], Any] | None = None,
    ) -> None:
        self._names = ("", *services)
        self._aio = isinstance(server, grpc.aio.Server)
        if self._aio and run_on_loop is None:
            raise ValueError("an aio server's health needs run_on_loop")
        self._run = run_on_loop
        self.servicer: Any = health.aio.HealthServicer() if self._aio else health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        self.set_ready(False)

    def set_ready(self, ready: bool) -> None:
        status = SERVING if ready else NOT_SERVING
        for name in self._names:
            if self._aio:
                assert self._run is not None
                self._run(self.servicer.set(name, status))
            else:
                self.servicer.set(name, status)
