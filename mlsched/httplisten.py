"""One small HTTP(S) listener per daemon (``--http-listen HOST:PORT``): /metrics, the dashboard.

Routes are a function of the path and the query that returns a :class:`Reply` (None: 404). The
listener runs in its own threads; ``stop()`` joins them.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reply:
    body: bytes
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200


CONNECTION_TIMEOUT_S = 30.0
Routes = Callable[[str, Mapping[str, str]], "Reply | None"]


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) as host and port; ValueError names what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--http-listen {listen!r}: expected HOST:PORT (port 0 picks a free one)")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses; False for names and wildcard binds."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: Routes
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's own thread: the TLS handshake first (a client that stalls in it
        holds only its thread, never the accepting one), then the request."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(CONNECTION_TIMEOUT_S)
        try:
            secured = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = CONNECTION_TIMEOUT_S  # an idle or slow client's connection is dropped

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            reply = self.server.routes(parts.path, query)
        except Exception:  # one bad page must not take the listener down
            log.exception("HTTP %s failed", parts.path)
            reply = Reply(b"internal error\n", status=500)
        if reply is None:
            reply = Reply(b"not found\n", status=404)
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class HttpListener:
    """Serves ``routes`` on ``listen``; HTTPS when ``tls`` is given."""

    def __init__(self, listen: str, routes: Routes, tls: ssl.SSLContext | None = None) -> None:
        host, port = split_listen(listen)
        self._server = _Server((host, port), _Handler)
        self._server.routes = routes
        self._server.tls = tls
        scheme = "https" if tls is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{scheme}://{shown}:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http", kwargs={"poll_interval": 0.2}
        )

    def start(self) -> str:
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
