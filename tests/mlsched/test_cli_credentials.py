"""Where the CLI finds who its user is: a credential bundle, never a bare name."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsched.cli import main
from mlsched.security import bundle


def test_without_credentials_the_cli_says_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bundle.CREDENTIALS_ENV, str(tmp_path / "none"))
    assert main(["jobs", "--controller", "127.0.0.1:1"]) == 5  # UNAUTHENTICATED (docs/cli.md)
    err = capsys.readouterr().err
    assert f"no credentials in {tmp_path / 'none'}" in err
    assert "mlsched admin issue-user" in err
    assert "Traceback" not in err


def test_the_credentials_directory_is_looked_up_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(bundle.CREDENTIALS_ENV, str(tmp_path / "explicit"))
    assert bundle.default_dir() == tmp_path / "explicit"
    monkeypatch.delenv(bundle.CREDENTIALS_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert bundle.default_dir() == tmp_path / "xdg" / "mlsched"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert bundle.default_dir() == tmp_path / "home" / ".config" / "mlsched"
