"""Which local processes, and which uids, hold the other end of a trainer's TCP connection.

A task's token alone does not open its trainer session. The agent also asks the kernel who owns
the connecting socket: under ``--run-tasks-as job-user`` the socket's uid must be the task's own
(the kernel's TCP table names it, readable without privileges); otherwise, with every job under
the agent's uid, one of the owning processes must be in the task's own session (every task
starts one: nodeagent/launcher.py) or descend from a process in it, which another job's process
cannot do."""

from __future__ import annotations

import contextlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

PROC_TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))


@dataclass(frozen=True)
class Peer:
    """Who holds the client end of a connection: the processes (those this agent may see) and
    the uids owning the socket."""

    pids: frozenset[int]
    uids: frozenset[int]


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
    """True when one of ``pids``, or a process it descends from, belongs to the session
    ``session_id``: torchrun starts each training process in a session of its own (issue 18)."""
    for pid in pids:
        with contextlib.suppress(OSError, psutil.Error):
            process = psutil.Process(pid)
            for member in (process, *process.parents()):
                if os.getsid(member.pid) == session_id:
                    return True
    return False


def _hex_address(text: str) -> tuple[str, int] | None:
    """``0100007F:1F90`` (a /proc/net/tcp address: 32-bit words in host order, little-endian
    here) as ("127.0.0.1", 8080); IPv6 addresses likewise, in their shortest form."""
    addr, _, port = text.partition(":")
    try:
        raw = bytes.fromhex(addr)
        words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
        ip = ipaddress.ip_address(words)
        return _plain(str(ip)), int(port, 16)
    except ValueError:
        return None


def socket_uids(client: tuple[str, int], local_port: int, tables: str) -> set[int]:
    """Uids owning a socket whose local end is ``client`` and remote port ``local_port``, from
    the text of /proc/net/tcp{,6} (``tables``)."""
    uids: set[int] = set()
    for line in tables.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[7].isdigit():
            continue  # the header, or a line this parser does not know
        local, remote = _hex_address(fields[1]), _hex_address(fields[2])
        if local == client and remote is not None and remote[1] == local_port:
            uids.add(int(fields[7]))
    return uids


def peer_processes(peer: str, local_port: int) -> Peer:
    """The processes and uids on the client end ``peer`` of a connection to ``local_port``."""
    client = parse_peer(peer)
    if client is None:
        return Peer(frozenset(), frozenset())
    tables = ""
    for table in PROC_TCP_TABLES:
        with contextlib.suppress(OSError):
            tables += table.read_text(encoding="ascii", errors="replace")
    return Peer(
        frozenset(peer_pids(peer, local_port)), frozenset(socket_uids(client, local_port, tables))
    )


def peer_is_task(peer: Peer, run_uid: int, session_id: int) -> bool:
    """True when ``peer`` is the task: its socket owned by ``run_uid`` when the task runs under
    its own uid (``run_uid`` >= 0), else one of its processes in the session ``session_id``."""
    if run_uid >= 0:
        return run_uid in peer.uids
    return in_session(set(peer.pids), session_id)
