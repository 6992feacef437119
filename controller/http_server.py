"""The controller's observability, assembled: metrics, the event follower (log lines and
counters), the gRPC health service and the HTTP listener (/metrics, the dashboard, its API).

Safe default (docs/observability.md): no listener unless ``--http-listen`` is given. With TLS on
(the default), a loopback address serves plain HTTP to this host only; any other address serves
HTTPS with the controller's certificate and asks for a client certificate of the cluster CA
(a user's bundle, or one issued for Prometheus), as the gRPC endpoint does."""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controller import http_api
from controller.auth.tls_setup import ServerTls
from controller.event_follower import EventFollower, log_event, log_renewals
from controller.http_metrics import ControllerMetrics
from controller.policy.base import Decision
from controller.scheduler import Scheduler
from controller.state import ControllerState
from mlsched.grpcobs import AioRpcMetricsInterceptor, Health, RpcMetricsInterceptor
from mlsched.httplisten import HttpListener, Reply, is_loopback, split_listen

log = logging.getLogger(__name__)

HEALTH_SERVICES = ("mlsched.v1.JobService", "mlsched.v1.AgentService")
STATIC = {  # dashboard files (package data) and their content types
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
}
HTTP_ADDRESS_FILE = "controller.http"


def https_context(tls: ServerTls) -> ssl.SSLContext:
    """HTTPS with the controller's certificate; clients must present one of its CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory() as folder:  # ssl loads a key only from a file
        key = Path(folder) / "key.pem"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(tls.key_pem)
        cert = Path(folder) / "cert.pem"
        cert.write_bytes(tls.cert_pem)
        context.load_cert_chain(cert, key)
    context.load_verify_locations(cadata=tls.ca_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class ControllerObservability:
    """Built before the gRPC server (it brings the interceptor), started after it."""

    def __init__(self, state: ControllerState, scheduler: Scheduler) -> None:
        self.state = state
        self.scheduler = scheduler
        self.metrics = ControllerMetrics(state)
        self.interceptor = RpcMetricsInterceptor(self.metrics.rpc)  # for a grpc.server
        self.aio_interceptor = AioRpcMetricsInterceptor(self.metrics.rpc)  # grpc.aio.server
        scheduler.on_cycle = self._on_cycle
        self.follower = EventFollower(state, [log_event, self.metrics.observe_event])
        self.health: Health | None = None
        self.listener: HttpListener | None = None

    def _on_cycle(self, decision: Decision, cycle_s: float, decide_s: float) -> None:
        self.metrics.observe_cycle(decision, cycle_s, decide_s)
        log_renewals(decision)

    def add_health(self, server: Any, run_on_loop: Callable[[Any], Any] | None = None) -> None:
        """The health service on the gRPC server (``run_on_loop``: for an aio server)."""
        self.health = Health(server, HEALTH_SERVICES, run_on_loop)

    def start(self, http_listen: str, tls: ServerTls | None, state_dir: Path) -> str:
        """Follow events, serve HTTP when asked (returns its URL, else ""), report SERVING."""
        self.follower.start()
        url = ""
        if http_listen:
            host, _ = split_listen(http_listen)
            context = None if tls is None or is_loopback(host) else https_context(tls)
            self.listener = HttpListener(http_listen, self.route, context)
            url = self.listener.start()
            (state_dir / HTTP_ADDRESS_FILE).write_text(url + "\n")
            log.info("metrics and dashboard on %s", url)
        if self.health is not None:
            self.health.set_ready(True)  # store open, policy loaded, gRPC serving
        return url

    def stop(self) -> None:
        if self.health is not None:
            self.health.set_ready(False)
        if self.listener is not None:
            self.listener.stop()
        self.follower.stop()

    def route(self, path: str, query: Mapping[str, str]) -> Reply | None:
        if path == "/metrics":
            return Reply(generate_latest(self.metrics.registry), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return Reply(b"ok\n")
        if path in STATIC or path.startswith("/job/"):
            name, kind = STATIC.get(path, STATIC["/"])  # a job page is the app at its URL
            return Reply(resources.files("controller.dashboard").joinpath(name).read_bytes(), kind)
        return self._api(path, query)

    def _api(self, path: str, query: Mapping[str, str]) -> Reply | None:
        state = self.state
        if path == "/api/overview":
            return _json(http_api.overview(state, self.scheduler.policy.name))
        if path == "/api/jobs":
            return _json(http_api.jobs(state))
        if path.startswith("/api/jobs/"):
            page = http_api.job_page(state, path.removeprefix("/api/jobs/"))
            return None if page is None else _json(page)
        if path == "/api/events":
            try:
                after = int(query.get("after", "-1"))
            except ValueError:
                return Reply(b"after: an event sequence number\n", status=400)
            return _json(http_api.events(state, after))
        return None


def _json(value: Any) -> Reply:
    return Reply(json.dumps(value).encode(), "application/json")
