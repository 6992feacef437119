"""MLFS parameters given by an administrator (``--mlfs-param``, MLFS §4.1)."""

from __future__ import annotations

import pytest

from controller.policy import make_policy
from controller.policy.mlfs.config import MlfsConfig, parse_mlfs_params
from controller.policy.mlfs.policy import MlfhPolicy


def test_pairs_override_the_papers_defaults() -> None:
    config = parse_mlfs_params(["gamma_w=0", "h-r=0.8", "alpha= 0.5"])
    assert config == MlfsConfig(gamma_w=0.0, h_r=0.8, alpha=0.5)
    assert parse_mlfs_params([]) == MlfsConfig()  # §4.1: alpha 0.3, gamma_w 0.35, h_r 0.9


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("gamma_x=1", "NAME one of alpha, gamma"),
        ("gamma_w", "expected NAME=VALUE"),
        ("gamma_w=lots", "'lots' is not a number"),
        ("alpha=2", "alpha must be in [0, 1]"),
        ("h_r=nan", "h_r must be finite"),
    ],
)
def test_bad_pairs_are_named(pair: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_mlfs_params([pair])


def test_make_policy_hands_the_parameters_to_the_mlfs_family_only() -> None:
    config = MlfsConfig(gamma_w=0.0)
    mlfh = make_policy("mlf-h", config)
    assert isinstance(mlfh, MlfhPolicy) and mlfh.config == config and mlfh.name == "mlf-h"
    assert make_policy("mlf-h").config == MlfsConfig()
    for name in ("mlf-rl", "mlfs"):
        policy = make_policy(name, config)
        assert policy.config == config and policy.name == name
    assert (
        make_policy("mlfs", config).load_control and not make_policy("mlf-rl", config).load_control
    )
    assert make_policy("fifo", config).name == "fifo"  # the others ignore it
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("lottery", config)
