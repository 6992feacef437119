"""The agent's credentials before it dials: what it needs to join, and a certificate that names
another node is refused here, before the controller would."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsched.security.authority import Authority
from mlsched.security.names import NODE, Identity
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.credentials import SecurityArgs, channel_credentials, default_join_address

SECURE = SecurityArgs(insecure=False, ca_file=None, join_address="")


def config(tmp_path: Path, token: str = "") -> AgentConfig:
    return AgentConfig(
        controller="127.0.0.1:1", join_token=token, node_id="node-a", state_dir=tmp_path / "a"
    )


def test_joining_needs_the_ca_file_and_a_token(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="joining needs --ca-file"):
        channel_credentials(config(tmp_path, "t"), SECURE)
    ca = SecurityArgs(insecure=False, ca_file=tmp_path / "ca.pem", join_address="")
    with pytest.raises(ConfigError, match="a join token is required to join"):
        channel_credentials(config(tmp_path), ca)


def test_insecure_needs_the_shared_token_and_uses_no_credentials(tmp_path: Path) -> None:
    insecure = SecurityArgs(insecure=True, ca_file=None, join_address="")
    with pytest.raises(ConfigError, match="--insecure needs the shared join token"):
        channel_credentials(config(tmp_path), insecure)
    assert channel_credentials(config(tmp_path, "shared"), insecure) is None


def test_a_certificate_of_another_node_is_refused(tmp_path: Path) -> None:
    authority = Authority(tmp_path / "controller")
    authority.ensure()
    authority.issue_bundle(Identity(NODE, "node-b")).write(tmp_path / "a" / "tls")
    with pytest.raises(ConfigError, match="names 'node:node-b', not node 'node-a'"):
        channel_credentials(config(tmp_path), SECURE)
    authority.issue_bundle(Identity(NODE, "node-a")).write(tmp_path / "a" / "tls")
    assert channel_credentials(config(tmp_path), SECURE) is not None


def test_the_join_endpoint_defaults_to_the_next_port() -> None:
    assert default_join_address("ctl:50051") == "ctl:50052"
    with pytest.raises(ConfigError):
        default_join_address("ctl")
