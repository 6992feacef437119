"""Per-task network traffic from the kernel's TCP socket counters (Linux sock_diag; what
``ss -ti`` shows as ``bytes_acked`` / ``bytes_received``), for MLFS' per-task bandwidth demand
(``docs/overload.md``, *Network attribution*).

One netlink dump per address family (``NETLINK_SOCK_DIAG``, ``SOCK_DIAG_BY_FAMILY`` with
``INET_DIAG_INFO``) gives every TCP socket's inode, peer address and ``tcp_info``; a task's
sockets are those whose inode one of its processes holds open (``/proc/<pid>/fd``). Sent bytes
are ``bytes_acked`` (what the peer has acknowledged), received ``bytes_received``. Sockets to a
loopback peer are left out unless asked (their traffic never crosses a link, like the node
counters, which skip ``lo``). Works unprivileged for the agent's own processes and as root for
all; where it cannot (not Linux, a kernel without ``tcp_info`` byte counters (< 4.1), netlink
refused) :func:`read_tcp_sockets` raises :class:`Unavailable` and the agent keeps the equal
split of the node's traffic.

Not counted: UDP and RDMA traffic (NCCL over InfiniBand bypasses the kernel's sockets), and the
bytes of a socket that opened and closed between two samples.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_INFO = 2
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2 before its 48-byte socket id
_DIAG_MSG = 72  # inet_diag_msg: 4 bytes, the 48-byte id, expires, rqueue, wqueue, uid, inode
_INODE_AT = 68
_SRC_AT, _DST_AT = 8, 24  # the id's addresses (16 bytes each; IPv4 in the first 4)
_BYTES_AT = 120  # tcp_info: bytes_acked (u64) at 120, bytes_received (u64) at 128
_RTA = struct.Struct("=HH")


class Unavailable(OSError):
    """The kernel's per-socket counters cannot be read here."""


@dataclass(frozen=True)
class SocketBytes:
    """One TCP socket's counters."""

    inode: int
    sent: int  # bytes_acked
    received: int  # bytes_received
    loopback: bool  # the peer is a loopback address


def read_tcp_sockets() -> dict[int, SocketBytes]:
    """Every TCP socket's byte counters, by inode (module docstring)."""
    out: dict[int, SocketBytes] = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        for sock in _dump(family):
            if sock.inode:
                out[sock.inode] = sock
    return out


def _dump(family: int) -> list[SocketBytes]:
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    except (OSError, AttributeError) as exc:
        raise Unavailable(f"sock_diag netlink socket: {exc}") from exc
    with sock:
        states = 0xFFFFFFFF
        request = _REQUEST.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, states)
        request += b"\0" * 48
        flags = NLM_F_REQUEST | NLM_F_DUMP
        sock.sendto(
            _HEADER.pack(_HEADER.size + len(request), SOCK_DIAG_BY_FAMILY, flags, 1, 0) + request,
            (0, 0),
        )
        found: list[SocketBytes] = []
        while True:
            data = sock.recv(1 << 20)
            if not data:
                return found
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind = _HEADER.unpack_from(data, offset)[:2]
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR:
                    raise Unavailable("sock_diag dump refused by the kernel")
                parsed = _socket(data[offset + _HEADER.size : offset + length], family)
                if parsed is not None:
                    found.append(parsed)
                offset += (length + 3) & ~3
                if length == 0:
                    return found


def _socket(body: bytes, family: int) -> SocketBytes | None:
    """One inet_diag_msg and its attributes; None without a usable ``tcp_info``."""
    if len(body) < _DIAG_MSG:
        return None
    inode = struct.unpack_from("=I", body, _INODE_AT)[0]
    at = _DIAG_MSG
    while at + _RTA.size <= len(body):
        size, kind = _RTA.unpack_from(body, at)
        if size < _RTA.size:
            return None
        if kind == INET_DIAG_INFO:
            if size - _RTA.size < _BYTES_AT + 16:
                raise Unavailable("this kernel's tcp_info has no byte counters (Linux < 4.1)")
            sent, received = struct.unpack_from("=QQ", body, at + _RTA.size + _BYTES_AT)
            return SocketBytes(inode, sent, received, _is_loopback(body, family))
        at += (size + 3) & ~3
    return None


def _is_loopback(body: bytes, family: int) -> bool:
    raw = body[_DST_AT : _DST_AT + 16]
    if family == socket.AF_INET:
        return ipaddress.IPv4Address(raw[:4]).is_loopback
    address = ipaddress.IPv6Address(raw)
    return address.is_loopback or (
        address.ipv4_mapped is not None and address.ipv4_mapped.is_loopback
    )


def socket_inodes(pids: Iterable[int]) -> set[int]:
    """Inodes of the sockets the processes hold open (those that vanish are skipped)."""
    inodes: set[int] = set()
    for pid in pids:
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"{fd_dir}/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    return inodes
