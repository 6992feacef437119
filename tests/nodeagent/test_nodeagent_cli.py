"""The agent command line and configuration."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nodeagent.cli import add_agent_command, config_from_args, run_from_args
from nodeagent.config import AgentConfig, ConfigError


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mlsched")
    sub = parser.add_subparsers(dest="command", required=True)
    add_agent_command(sub)
    return parser.parse_args(argv)


def test_flags_build_the_config(tmp_path: Path) -> None:
    args = parse(
        [
            "agent",
            "--controller",
            "ctl:7000",
            "--join-token",
            "tok",
            "--node-id",
            "gpu-7",
            "--state-dir",
            str(tmp_path / "s"),
            "--checkpoint-root",
            str(tmp_path / "c"),
            "--gpus",
            "2",
            "--advertise-address",
            "10.0.0.7",
            "--metrics-interval",
            "1.5",
            "--suspend-grace",
            "12",
        ]
    )
    assert args.func is run_from_args
    config = config_from_args(args)
    assert config.controller == "ctl:7000" and config.join_token == "tok"
    assert config.node_id == "gpu-7" and config.gpus == 2
    assert config.advertise_address == "10.0.0.7"
    assert (config.metrics_interval_s, config.suspend_grace_s) == (1.5, 12.0)
    paths = config.paths()
    assert paths.state_dir == tmp_path / "s" and paths.checkpoint_root == tmp_path / "c"


def test_join_token_from_file_or_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLSCHED_JOIN_TOKEN", "from-env")
    assert config_from_args(parse(["agent", "--controller", "c:1"])).join_token == "from-env"
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    args = parse(["agent", "--controller", "c:1", "--join-token-file", str(token_file)])
    assert config_from_args(args).join_token == "from-file"
    args = parse(["agent", "--controller", "c:1", "--join-token-file", str(tmp_path / "nope")])
    with pytest.raises(ConfigError, match="join token file"):
        config_from_args(args)


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("MLSCHED_CONTROLLER", raising=False)
    config = AgentConfig(controller="c:1", node_id="n1")
    assert (config.metrics_interval_s, config.suspend_grace_s, config.gpus) == (5.0, 30.0, None)
    assert config.trainer_listen == "127.0.0.1:0" and config.advertise_address == "127.0.0.1"
    paths = config.paths()
    if paths.state_dir != Path("/var/lib/mlsched/agent/n1"):  # not root
        assert paths.state_dir == tmp_path / "mlsched" / "agent" / "n1"
    assert paths.checkpoint_root == paths.state_dir / "checkpoints"
    assert run_from_args(parse(["agent"])) == 1  # no controller address


@pytest.mark.parametrize(
    "change",
    [
        {"controller": ""},
        {"node_id": "a/b"},
        {"gpus": -1},
        {"metrics_interval_s": 0},
        {"suspend_grace_s": -1},
        {"trainer_listen": "nohostport"},
    ],
)
def test_invalid_config(change: dict[str, object]) -> None:
    config = AgentConfig(controller="c:1", node_id="n1")
    for key, value in change.items():
        setattr(config, key, value)
    with pytest.raises(ConfigError):
        config.validate()


def test_load_and_overload_flags(tmp_path: Path) -> None:
    base = ["agent", "--controller", "c:1", "--join-token", "t"]
    defaults = config_from_args(parse(base))
    assert (defaults.cpu_capacity, defaults.memory_capacity, defaults.bandwidth_capacity) == (
        None,
        None,
        None,
    )
    assert defaults.load_scope == "tasks" and defaults.overload_detection
    assert (defaults.overload_threshold, defaults.migration_share) == (0.9, 0.1)
    assert (defaults.overload_samples, defaults.migration_cooldown_s) == (3, 60.0)
    assert defaults.overload_clear_threshold is None  # h_r - 0.1
    config = config_from_args(
        parse(
            [
                *base,
                "--cpu-capacity",
                "0.5",
                "--memory-capacity",
                "2e9",
                "--bandwidth-capacity",
                "1.25e8",
                "--load-scope",
                "machine",
                "--overload-threshold",
                "0.8",
                "--migration-share",
                "0.25",
                "--overload-samples",
                "5",
                "--migration-cooldown",
                "30",
                "--overload-clear-threshold",
                "0.6",
                "--no-overload-detection",
            ]
        )
    )
    assert (config.cpu_capacity, config.memory_capacity, config.bandwidth_capacity) == (
        0.5,
        2_000_000_000,
        1.25e8,
    )
    assert config.load_scope == "machine" and not config.overload_detection
    assert (config.overload_threshold, config.migration_share) == (0.8, 0.25)
    assert (config.overload_samples, config.migration_cooldown_s) == (5, 30.0)
    assert config.overload_clear_threshold == 0.6
    for flag, value in [
        ("--cpu-capacity", "0"),
        ("--overload-threshold", "1.5"),
        ("--migration-share", "0"),
        ("--overload-samples", "0"),
        ("--overload-clear-threshold", "0.95"),  # above h_r
    ]:
        with pytest.raises(ConfigError):
            config_from_args(parse([*base, flag, value]))
    with pytest.raises(SystemExit):
        parse([*base, "--memory-capacity", "1.5"])
