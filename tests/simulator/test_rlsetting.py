"""A model per setting (docs/mlfs.md, *A model per setting*): ``mlsched mlfs-train
--mlfs-param`` records the parameters it trained under, ``mlsched simulate --mlfs-model`` runs
that file, and the simulator warns when a model meets a setting it was not trained for."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from controller.policy import make_policy
from controller.policy.mlfs.config import MlfsConfig, changed_params
from controller.policy.mlfs.rl.network import DEFAULT_MODEL_PATH, SETTING_MODEL_PATHS, load_model
from mlsched.cli import main
from simulator.cli import add_simulate_command, prepare_run, with_setting_model
from simulator.engine import ClusterShape
from simulator.rlsetting import setting_differences
from tests.simulator.test_rltrain import TINY
from tests.simulator.test_rltrain import trace as trace  # the fixture


def test_changed_params_names_only_what_differs() -> None:
    assert changed_params(MlfsConfig()) == {}
    assert changed_params(MlfsConfig(gamma_w=0.0, h_r=0.8)) == {"gamma_w": 0.0, "h_r": 0.8}


TEN_BY_EIGHT = ClusterShape(10, 8)


def test_the_same_setting_has_no_differences() -> None:
    meta = {"cluster": "10x8", "mlfs_features": True, "mlfs_params": {"gamma_w": 0.0}}
    assert setting_differences(meta, TEN_BY_EIGHT, TEN_BY_EIGHT, True, MlfsConfig(gamma_w=0)) == []


def test_each_difference_is_named() -> None:
    meta = {"cluster": "10x8", "mlfs_features": True}  # the shipped model's (no mlfs_params)
    assert setting_differences(meta, ClusterShape(120, 8), TEN_BY_EIGHT, False, None) == [
        "trained on 10x8 GPUs, this run has 120x8",
        "trained with MLFS job features, this run has none",
    ]
    assert setting_differences(meta, TEN_BY_EIGHT, TEN_BY_EIGHT, True, MlfsConfig(gamma_w=0)) == [
        "trained with MLFS parameters the paper's defaults, this run has gamma_w=0"
    ]
    trained = {"mlfs_features": False, "mlfs_params": {"gamma_w": 0.0, "alpha": 0.5}}
    assert setting_differences(trained, TEN_BY_EIGHT, None, True, None) == [
        "trained without MLFS job features, this run has them",
        "trained with MLFS parameters alpha=0.5, gamma_w=0, this run has the paper's defaults",
    ]


def test_a_model_trained_for_parameters_runs_where_asked_and_warns_elsewhere(
    trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "gamma_w0.pt"
    train = ["mlfs-train", "--trace", str(trace), "--out", str(out), *TINY]
    assert main([*train, "--mlfs-param", "gamma_w=0"]) == 0
    policy = make_policy("mlfs", MlfsConfig(gamma_w=0.0), out)
    assert policy.meta["mlfs_params"] == {"gamma_w": 0.0}  # type: ignore[attr-defined]
    assert policy.config == MlfsConfig(gamma_w=0.0)  # type: ignore[attr-defined]
    capsys.readouterr()

    simulate = ["simulate", "--trace", str(trace), "--cluster", "2x4", "--quiet"]
    same = [*simulate, "--policy", "mlf-rl", "--mlfs-features", "--mlfs-param", "gamma_w=0"]
    assert main([*same, "--mlfs-model", str(out)]) == 0
    captured = capsys.readouterr()
    assert "12 jobs on 2x4 GPUs" in captured.out
    assert captured.err == ""  # trained for this setting: nothing to say

    assert main([*simulate, "--policy", "fifo,mlf-rl", "--mlfs-model", str(out)]) == 0
    assert capsys.readouterr().err == (
        f"mlsched simulate: mlf-rl runs model {out}, trained with MLFS job features, this run "
        "has none; trained with MLFS parameters gamma_w=0, this run has the paper's defaults: "
        "it may order jobs worse than MLF-H here; `mlsched mlfs-train` makes one for this "
        "setting and --mlfs-model runs it (docs/mlfs.md, *A model per setting*)\n"
    )


def test_the_shipped_model_is_named_when_it_meets_another_setting(
    trace: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "--trace", str(trace), "--cluster", "2x4", "--quiet", "--policy", "mlfs"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.startswith(
        "mlsched simulate: mlfs runs the shipped model, trained on 10x8 GPUs, this run has 2x4; "
        "trained with MLFS job features, this run has none: "
    ), err
    assert main(["simulate", "--trace", str(trace), "--quiet", "--policy", "fifo"]) == 0
    assert capsys.readouterr().err == ""  # no MLF-RL network runs: nothing to say


def test_the_simulator_runs_the_shipped_model_trained_for_its_setting(
    trace: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # C120 without MLFS features under the paper's parameters: the full traces' setting, for
    # which a model trained on long queues is shipped beside the default one
    # (one without MLFS features, one with, and one without features for gamma_w = 0)
    c120, c120_features, c120_gw0 = SETTING_MODEL_PATHS
    metas = [load_model(p)[1] for p in SETTING_MODEL_PATHS]
    assert [m["cluster"] for m in metas] == ["C120", "C120", "C120"]
    assert [m["mlfs_features"] for m in metas] == [False, True, False]
    assert [m["mlfs_params"] for m in metas] == [{}, {}, {"gamma_w": 0.0}]
    args = ["simulate", "--trace", str(trace), "--cluster", "C120", "--quiet"]
    run = prepare_run(simulate_args([*args, "--policy", "mlf-rl"]))
    assert with_setting_model(run, ["fifo", "mlfs"], False).mlfs_model == c120
    assert with_setting_model(run, ["fifo"], False).mlfs_model is None  # no network runs
    assert with_setting_model(run, ["mlf-rl"], True).mlfs_model == c120_features
    other = replace(run, mlfs=MlfsConfig(gamma_w=0.0))
    assert with_setting_model(other, ["mlf-rl"], False).mlfs_model == c120_gw0
    assert with_setting_model(other, ["mlf-rl"], True).mlfs_model is None  # none trained for it
    another = replace(run, mlfs=MlfsConfig(gamma_w=0.1))
    assert with_setting_model(another, ["mlf-rl"], False).mlfs_model is None
    asked = replace(run, mlfs_model=DEFAULT_MODEL_PATH)
    assert with_setting_model(asked, ["mlf-rl"], False).mlfs_model == DEFAULT_MODEL_PATH
    assert with_setting_model(asked, ["mlf-rl"], True).mlfs_model == DEFAULT_MODEL_PATH
    for features in ([], ["--mlfs-features"]):
        assert main([*args, "--policy", "mlf-rl", *features]) == 0
        assert capsys.readouterr().err == ""  # trained for this setting: nothing to warn about
    assert main([*args, "--policy", "mlf-rl", "--mlfs-param", "gamma_w=0"]) == 0
    assert capsys.readouterr().err == ""  # the gamma_w = 0 model is shipped for this one
    assert main([*args, "--policy", "mlf-rl", "--mlfs-features", "--mlfs-param", "gamma_w=0"]) == 0
    assert "runs the shipped model, trained on 10x8 GPUs, this run has 120x8" in (
        capsys.readouterr().err
    )


def simulate_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_simulate_command(parser.add_subparsers())
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "--mlfs-model: no such file"), (b"not a model", "cannot read MLF-RL model")],
)
def test_a_bad_model_file_is_refused_before_anything_runs(
    trace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: bytes | None,
    message: str,
) -> None:
    path = tmp_path / "model.pt"
    if content is not None:
        path.write_bytes(content)
    args = ["simulate", "--trace", str(trace), "--policy", "mlf-rl", "--mlfs-model", str(path)]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("mlsched simulate: ") and message in captured.err
