"""A credential bundle: a directory with ``ca.pem`` (the cluster CA to trust), ``cert.pem``
and ``key.pem`` (0600) naming its holder. Users keep theirs in ``$MLSCHED_CREDENTIALS`` or
``~/.config/mlsched`` (``mlsched admin issue-user`` writes one); agents in ``<state-dir>/tls``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from mlsched.security import pki

CREDENTIALS_ENV = "MLSCHED_CREDENTIALS"
CA_FILE = "ca.pem"
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"


class CredentialsError(Exception):
    """No usable credentials where they were looked for."""


def default_dir() -> Path:
    """``$MLSCHED_CREDENTIALS``, else ``$XDG_CONFIG_HOME/mlsched``, else ``~/.config/mlsched``."""
    explicit = os.environ.get(CREDENTIALS_ENV)
    if explicit:
        return Path(explicit)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "mlsched"


@dataclass(frozen=True)
class Bundle:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes

    def common_name(self) -> str:
        return pki.common_name(self.cert_pem)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Mutual TLS: the server must present a certificate of this CA, and we present ours."""
        return grpc.ssl_channel_credentials(self.ca_pem, self.key_pem, self.cert_pem)

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        pki.write_public(directory / CA_FILE, self.ca_pem)
        pki.write_secret(directory / KEY_FILE, self.key_pem)
        pki.write_public(directory / CERT_FILE, self.cert_pem)


def load(directory: Path) -> Bundle:
    """The bundle in ``directory``; CredentialsError naming what is missing."""
    parts = []
    for name in (CA_FILE, CERT_FILE, KEY_FILE):
        try:
            parts.append((directory / name).read_bytes())
        except OSError as exc:
            raise CredentialsError(
                f"no credentials in {directory} ({name}: {exc.strerror}); ask an admin for"
                f" `mlsched admin issue-user`, or set ${CREDENTIALS_ENV}"
            ) from None
    return Bundle(*parts)


def exists(directory: Path) -> bool:
    return all((directory / n).is_file() for n in (CA_FILE, CERT_FILE, KEY_FILE))
