"""The pieces of the controller's door, alone: names, join tokens, rate and stream limits, the
CA's files."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from controller.admin_cli import issue_user
from controller.auth.jointokens import JoinRefused, JoinTokens
from controller.auth.limits import RateLimiter, StreamSlots
from mlsched.security import bundle, pki
from mlsched.security.authority import Authority
from mlsched.security.names import (
    ADMIN,
    NODE,
    USER,
    Identity,
    NameError_,
    check_name,
    parse_common_name,
)


@pytest.mark.parametrize("name", ["alice", "a", "node-7.rack_2", "x" * 64])
def test_names_that_may_be_certified(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "x" * 65, "x" * 8000, "a:b", "-a", ".a", "a b", "é"])
def test_names_that_may_not(name: str) -> None:
    with pytest.raises(NameError_):
        check_name(name)


def test_common_names_state_kind_and_name() -> None:
    assert parse_common_name("user:alice") == Identity(USER, "alice")
    assert parse_common_name("admin:root") == Identity(ADMIN, "root")
    assert parse_common_name("node:node-a") == Identity(NODE, "node-a")
    for bad in ("alice", "wizard:alice", "user:", "user:a:b", "mlsched cluster CA"):
        assert parse_common_name(bad) is None


def test_a_join_token_is_bound_to_its_node_and_works_once(tmp_path: Path) -> None:
    tokens = JoinTokens(tmp_path)
    token = tokens.issue("node-a", now=1000.0, ttl_s=60.0)
    with pytest.raises(JoinRefused, match="issued for node 'node-a', not 'node-b'"):
        tokens.redeem(token, "node-b", now=1001.0)
    # A refused attempt spent the token too: a thief who guessed the node cannot retry.
    with pytest.raises(JoinRefused, match="unknown or already used"):
        tokens.redeem(token, "node-a", now=1002.0)
    second = tokens.issue("node-a", now=1000.0, ttl_s=60.0)
    tokens.redeem(second, "node-a", now=1059.0)
    with pytest.raises(JoinRefused, match="unknown or already used"):
        tokens.redeem(second, "node-a", now=1059.5)


def test_an_expired_join_token_is_refused(tmp_path: Path) -> None:
    tokens = JoinTokens(tmp_path)
    token = tokens.issue("node-a", now=1000.0, ttl_s=60.0)
    with pytest.raises(JoinRefused, match="expired"):
        tokens.redeem(token, "node-a", now=1060.0)


def test_the_state_dir_holds_only_hashes_of_tokens_readable_by_the_owner(tmp_path: Path) -> None:
    tokens = JoinTokens(tmp_path)
    token = tokens.issue("node-a", now=0.0)
    [stored] = list(tokens.dir.iterdir())
    assert token not in stored.name and token not in stored.read_text()
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    with pytest.raises(JoinRefused, match="malformed"):
        tokens.redeem("not-hex", "node-a", now=0.0)


def test_rate_limiter_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2.0, monotonic=lambda: now[0])
    assert [limiter.allow("u") for _ in range(3)] == [True, True, False]
    assert limiter.allow("v")  # each user has their own bucket
    now[0] = 1.0  # one token back
    assert [limiter.allow("u") for _ in range(2)] == [True, False]
    now[0] = 100.0  # refills to the burst, not beyond
    assert [limiter.allow("u") for _ in range(3)] == [True, True, False]


def test_stream_slots_per_user_and_in_all() -> None:
    slots = StreamSlots(per_user=2, total=3)
    assert [slots.take("u"), slots.take("u")] == ["", ""]
    assert "already has 2 open streams" in slots.take("u")
    assert slots.take("v") == ""
    assert "serves 3 streams" in slots.take("w")
    slots.give_back("u")
    assert slots.take("w") == ""


def test_ca_and_bundles_keep_keys_private(tmp_path: Path) -> None:
    authority = Authority(tmp_path / "state")
    assert authority.ensure() is True
    assert authority.ensure() is False  # made once, then kept
    assert stat.S_IMODE((authority.dir / "ca.key").stat().st_mode) == 0o600
    issue_user(tmp_path / "state", "alice", False, tmp_path / "alice")
    creds = bundle.load(tmp_path / "alice")
    assert creds.common_name() == "user:alice"
    assert creds.ca_pem == authority.ca_pem()
    assert stat.S_IMODE((tmp_path / "alice" / "key.pem").stat().st_mode) == 0o600
    assert pki.fingerprint(creds.ca_pem).startswith("sha256:")
    with pytest.raises(NameError_):
        issue_user(tmp_path / "state", "x" * 8000, False, tmp_path / "long")
    assert not (tmp_path / "long").exists()


def test_missing_credentials_say_where_they_were_looked_for(tmp_path: Path) -> None:
    with pytest.raises(bundle.CredentialsError, match=str(tmp_path)):
        bundle.load(tmp_path)


def test_the_server_certificate_names_what_clients_dial() -> None:
    import socket

    import psutil

    from controller.auth.tls_setup import server_names

    names = server_names("0.0.0.0:50051", ("ctl.example",))
    assert {"localhost", "127.0.0.1", "::1", socket.gethostname(), "ctl.example"} <= set(names)
    assert "0.0.0.0" not in names  # a wildcard is no name
    ipv4 = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("169.254.")
    ]
    assert set(ipv4) <= set(names)  # every interface's address but link-local ones
    assert "10.1.2.3" in server_names("10.1.2.3:50051", ())
