"""The controller's own small CA, kept in ``<state-dir>/tls`` (keys 0600).

Made on the controller's first start when the operator brings no certificates; it signs the
controller's server certificate, agents' node certificates (through a redeemed join token) and
users' certificates (``mlsched admin issue-user``).
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import Callable, Iterable
from pathlib import Path

import psutil
from cryptography.hazmat.primitives.asymmetric import ec

from mlsched.security import pki
from mlsched.security.bundle import Bundle
from mlsched.security.names import CONTROLLER, Identity

TLS_DIR = "tls"
CA_KEY = "ca.key"
CA_CERT = "ca.pem"
SERVER_KEY = "server.key"
SERVER_CERT = "server.pem"


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def local_names() -> list[str]:
    """Names a controller on this machine is dialled by: loopback, this host's names and the
    addresses of its interfaces (link-local ones excepted: they need a zone)."""
    names = ["localhost", "127.0.0.1", "::1"]
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names.append(name)
    for addrs in psutil.net_if_addrs().values():
        names += [a.address for a in addrs if _routable(a.family, a.address)]
    return list(dict.fromkeys(names))


def _routable(family: int, address: str) -> bool:
    if family not in (socket.AF_INET, socket.AF_INET6) or "%" in address:
        return False
    return not ipaddress.ip_address(address).is_link_local


class Authority:
    """The CA files under ``state_dir/tls``."""

    def __init__(self, state_dir: Path, now: Callable[[], datetime.datetime] = _utcnow) -> None:
        self.dir = state_dir / TLS_DIR
        self._now = now

    @property
    def ca_file(self) -> Path:
        return self.dir / CA_CERT

    def exists(self) -> bool:
        return (self.dir / CA_KEY).is_file() and self.ca_file.is_file()

    def ensure(self) -> bool:
        """Create the CA unless it exists; True when it was created now."""
        if self.exists():
            return False
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        key, cert = pki.make_ca("mlsched cluster CA", self._now())
        pki.write_secret(self.dir / CA_KEY, key)
        pki.write_public(self.ca_file, cert)
        return True

    def ca_pem(self) -> bytes:
        return self.ca_file.read_bytes()

    def _ca_key_pem(self) -> bytes:
        try:
            return (self.dir / CA_KEY).read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(
                f"no cluster CA in {self.dir}: start the controller once on this state"
                " directory (it creates the CA), or pass the right --state-dir"
            ) from None

    def sign(self, who: Identity, public_key: ec.EllipticCurvePublicKey) -> bytes:
        """A client certificate naming ``who``."""
        return pki.issue(
            self._ca_key_pem(), self.ca_pem(), who.common_name(), public_key, self._now()
        )

    def server_credentials_pem(self, names: Iterable[str]) -> tuple[bytes, bytes]:
        """A fresh server certificate for ``names`` (written next to the CA): (key, cert)."""
        key = pki.new_key()
        cert = pki.issue(
            self._ca_key_pem(),
            self.ca_pem(),
            f"{CONTROLLER}:controller",
            key.public_key(),
            self._now(),
            server_names=names,
        )
        key_pem = pki.key_pem(key)
        pki.write_secret(self.dir / SERVER_KEY, key_pem)
        pki.write_public(self.dir / SERVER_CERT, cert)
        return key_pem, cert

    def issue_bundle(self, who: Identity) -> Bundle:
        """A new key and certificate for ``who`` with the CA to trust (key made here)."""
        key = pki.new_key()
        return Bundle(self.ca_pem(), self.sign(who, key.public_key()), pki.key_pem(key))
