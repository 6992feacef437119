"""The shared observability parts: log setup, the gRPC metrics interceptor and health service on
a real server, the HTTP listener and the controller's HTTPS (cluster client certificates)."""

from __future__ import annotations

import io
import json
import logging
import socket
import ssl
import urllib.error
import urllib.request
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from controller.admin_cli import issue_user
from controller.auth.tls_setup import load_server_tls
from controller.http_server import https_context
from mlsched.grpcobs import Health, RpcMetrics, RpcMetricsInterceptor
from mlsched.httplisten import HttpListener, Reply, is_loopback, split_listen
from mlsched.logsetup import JsonFormatter, TextFormatter, configure, fields
from mlsched.security import bundle

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _record(**extra: str) -> logging.LogRecord:
    record = logging.LogRecord("mlsched.events", logging.INFO, "x.py", 1, "job %s", ("ran",), None)
    record.__dict__.update(extra)
    return record


def test_log_lines_carry_the_structured_fields():
    extra = fields(job_id="j-1", node_id="n1", policy="")
    assert extra == {"job_id": "j-1", "node_id": "n1"}  # empty fields are left out
    line = json.loads(JsonFormatter().format(_record(**extra)))
    assert (line["message"], line["job_id"], line["node_id"], line["level"]) == (
        "job ran",
        "j-1",
        "n1",
        "INFO",
    )
    assert (
        TextFormatter()
        .format(_record(**extra))
        .endswith("INFO mlsched.events: job ran [job_id=j-1 node_id=n1]")
    )
    assert TextFormatter().format(_record()).endswith("mlsched.events: job ran")
    with pytest.raises(ValueError, match="unknown log fields"):
        fields(jobid="j-1")


def test_configure_replaces_the_handlers_and_refuses_unknown_settings():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    try:
        configure("warning", "json", out)
        logging.getLogger("t").info("hidden")
        logging.getLogger("t").warning("shown", extra=fields(node_id="n2"))
        assert [json.loads(x)["node_id"] for x in out.getvalue().splitlines()] == ["n2"]
        with pytest.raises(ValueError, match="log format 'xml'"):
            configure("INFO", "xml")
        with pytest.raises(ValueError, match="log level 'LOUD'"):
            configure("LOUD", "text")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_the_interceptor_counts_health_checks_by_code_and_health_follows_readiness():
    registry = CollectorRegistry()
    metrics = RpcMetrics(registry)
    server = grpc.server(
        futures.ThreadPoolExecutor(4), interceptors=(RpcMetricsInterceptor(metrics),)
    )
    health = Health(server, ("mlsched.v1.Thing",))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest
            assert (
                stub.Check(check(), timeout=30).status == health_pb2.HealthCheckResponse.NOT_SERVING
            )
            health.set_ready(True)
            for service in ("", "mlsched.v1.Thing"):
                reply = stub.Check(check(service=service), timeout=30)
                assert reply.status == SERVING
            with pytest.raises(grpc.RpcError) as unknown:
                stub.Check(check(service="nope"), timeout=30)
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        server.stop(None).wait()
    value = registry.get_sample_value
    assert value("mlsched_grpc_requests_total", {"method": HEALTH_CHECK, "code": "OK"}) == 3
    assert value("mlsched_grpc_requests_total", {"method": HEALTH_CHECK, "code": "NOT_FOUND"}) == 1
    assert value("mlsched_grpc_request_duration_seconds_count", {"method": HEALTH_CHECK}) == 4


def test_listen_addresses():
    assert split_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert split_listen("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", ":9464", "host:", "host:port", "host:70000"):
        with pytest.raises(ValueError, match="expected HOST:PORT"):
            split_listen(bad)
    assert [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "ctl")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_https_asks_for_a_certificate_of_the_cluster_ca(tmp_path: Path):
    state_dir = tmp_path / "ctl"
    tls = load_server_tls(state_dir, "127.0.0.1:0", (), None)
    issue_user(state_dir, "prometheus", False, tmp_path / "prom")
    listener = HttpListener("127.0.0.1:0", lambda path, query: Reply(b"up 1\n"), https_context(tls))
    url = listener.start()
    try:
        assert url.startswith("https://127.0.0.1:")
        ca = str(tmp_path / "prom" / bundle.CA_FILE)
        anonymous = ssl.create_default_context(cafile=ca)
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            urllib.request.urlopen(url + "/metrics", timeout=30, context=anonymous).read()
        holder = ssl.create_default_context(cafile=ca)
        holder.load_cert_chain(
            tmp_path / "prom" / bundle.CERT_FILE, tmp_path / "prom" / bundle.KEY_FILE
        )
        with urllib.request.urlopen(url + "/metrics", timeout=30, context=holder) as reply:
            assert reply.read() == b"up 1\n"
    finally:
        listener.stop()


def test_a_client_stalled_before_its_handshake_blocks_no_other(tmp_path: Path):
    state_dir = tmp_path / "ctl"
    tls = load_server_tls(state_dir, "127.0.0.1:0", (), None)
    issue_user(state_dir, "alice", False, tmp_path / "alice")
    listener = HttpListener("127.0.0.1:0", lambda path, query: Reply(b"ok\n"), https_context(tls))
    url = listener.start()
    host, port = split_listen(url.removeprefix("https://"))
    holder = ssl.create_default_context(cafile=str(tmp_path / "alice" / bundle.CA_FILE))
    holder.load_cert_chain(
        tmp_path / "alice" / bundle.CERT_FILE, tmp_path / "alice" / bundle.KEY_FILE
    )
    try:
        with (
            socket.create_connection((host, port), timeout=30),  # connects, says nothing
            urllib.request.urlopen(url + "/", timeout=20, context=holder) as reply,
        ):
            assert reply.read() == b"ok\n"
    finally:
        listener.stop()
