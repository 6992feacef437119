"""One-time, expiring join tokens, each bound to one node id.

A token is 32 random bytes (hex); only its SHA-256 is stored, as
``<state-dir>/tls/join-tokens/<sha256>.json`` (0600), so the state directory does not hold
usable tokens. Redeeming removes the file first: of two redeemers of one token, one wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path

from mlsched.security import pki
from mlsched.security.names import check_name

TOKENS_DIR = "join-tokens"
DEFAULT_TTL_S = 3600.0


class JoinRefused(Exception):
    """The token is unknown, used, expired or names another node."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class JoinTokens:
    def __init__(self, tls_dir: Path) -> None:
        self.dir = tls_dir / TOKENS_DIR

    def issue(self, node_id: str, now: float, ttl_s: float = DEFAULT_TTL_S) -> str:
        """A new token for ``node_id``, valid ``ttl_s`` seconds from ``now`` (epoch seconds)."""
        check_name(node_id, "node id")
        if not ttl_s > 0:
            raise ValueError("a join token's lifetime must be positive")
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_hex(32)
        record = {"node_id": node_id, "expires_at": now + ttl_s}
        pki.write_secret(self.dir / f"{_digest(token)}.json", json.dumps(record).encode())
        return token

    def redeem(self, token: str, node_id: str, now: float) -> None:
        """Use up ``token`` for ``node_id``; JoinRefused when it may not be used."""
        if len(token) != 64 or not all(c in "0123456789abcdef" for c in token):
            raise JoinRefused("malformed join token")
        path = self.dir / f"{_digest(token)}.json"
        try:
            record = json.loads(path.read_text())
            os.unlink(path)
        except (FileNotFoundError, json.JSONDecodeError):
            raise JoinRefused("unknown or already used join token") from None
        if record.get("expires_at", 0.0) <= now:
            raise JoinRefused("the join token has expired; issue a new one")
        if record.get("node_id") != node_id:
            raise JoinRefused(
                f"the join token was issued for node {record.get('node_id')!r}, not {node_id!r}"
            )
