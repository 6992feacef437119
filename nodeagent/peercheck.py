"""Which local processes hold the other end of a trainer's TCP connection.

A task's token alone does not open its trainer session: tasks of every job run under the agent's
uid, so one job could read another's token (its records, its /proc environment). The agent
also asks the kernel which processes own the connecting socket and accepts only processes of the
task's own session (every task starts one: nodeagent/launcher.py), which another job's process
cannot join."""

from __future__ import annotations

import contextlib
import ipaddress
import os

import psutil


def parse_peer(peer: str) -> tuple[str, int] | None:
    """``ipv4:127.0.0.1:5000`` or ``ipv6:[::1]:5000`` (gRPC's ``context.peer()``) as
    (host, port); None for anything else (a Unix socket, an unknown form)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    if not port.isdigit():
        return None
    return _plain(host.strip("[]")), int(port)


def _plain(ip: str) -> str:
    """An IPv4-mapped IPv6 address (gRPC's dual-stack sockets) as its IPv4 form."""
    with contextlib.suppress(ValueError):
        mapped = getattr(ipaddress.ip_address(ip), "ipv4_mapped", None)
        if mapped is not None:
            return str(mapped)
    return ip


def peer_pids(peer: str, local_port: int) -> set[int]:
    """Pids owning the client end ``peer`` of a connection to our ``local_port``."""
    client = parse_peer(peer)
    if client is None:
        return set()
    pids: set[int] = set()
    with contextlib.suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="tcp"):
            if conn.pid is None or not conn.laddr or not conn.raddr:
                continue
            mine = (_plain(conn.laddr.ip), conn.laddr.port) == client
            if mine and conn.raddr.port == local_port:
                pids.add(conn.pid)
    return pids


def in_session(pids: set[int], session_id: int) -> bool:
    """True when one of ``pids`` belongs to the session ``session_id``."""
    for pid in pids:
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session_id:
                return True
    return False
