"""Policies by name, for the CLI and the controller configuration."""

from __future__ import annotations

from collections.abc import Callable

from controller.policy.base import Policy
from controller.policy.chronus import ChronusPolicy
from controller.policy.edf import EdfPolicy
from controller.policy.fifo import FifoPolicy
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.srtf import SrtfPolicy
from controller.policy.themis import ThemisPolicy
from controller.policy.tiresias import TiresiasPolicy
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy

DEFAULT_POLICY = "unisched"

_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: FifoPolicy(time_slicing=False, name="fifo"),
    "fifo-lease": lambda: FifoPolicy(time_slicing=True, name="fifo-lease"),
    "srtf": SrtfPolicy,
    "tiresias": TiresiasPolicy,
    "edf": EdfPolicy,
    "chronus": ChronusPolicy,  # Gao et al., SoCC 2021 (docs/chronus.md)
    "themis": ThemisPolicy,
    "unisched": UniSchedPolicy,
    "mlf-h": MlfhPolicy,  # MLFS §3.3, without MLF-C
    # MLF-RL (MLFS §3.4) with the shipped model; MLFS = MLF-RL with MLF-C (§3.5)
    "mlf-rl": lambda: _mlf_rl(load_control=False, name="mlf-rl"),
    "mlfs": lambda: _mlf_rl(load_control=True, name="mlfs"),
    # UniSched with the HiGHS backend, and its ablations (UniSched §VI-C): no SR-aware
    # estimator, no training-iteration estimator (maximum iterations), Chronus' round-up.
    "unisched-highs": lambda: UniSchedPolicy(UniSchedConfig(solver="highs"), "unisched-highs"),
    "unisched-no-sr": lambda: UniSchedPolicy(UniSchedConfig(sr_aware=False), "unisched-no-sr"),
    "unisched-no-iter": lambda: UniSchedPolicy(
        UniSchedConfig(iteration_estimator=False), "unisched-no-iter"
    ),
    "unisched-roundup": lambda: UniSchedPolicy(
        UniSchedConfig(placement="roundup"), "unisched-roundup"
    ),
    # Fig. 9(a): two nodes only profile, outside the MILP; Fig. 10(b): the solver's first
    # feasible solution instead of the reward-maximising one.
    "unisched-static-profiler": lambda: UniSchedPolicy(
        UniSchedConfig(static_profile_nodes=2), "unisched-static-profiler"
    ),
    "unisched-feasible": lambda: UniSchedPolicy(
        UniSchedConfig(objective="feasible"), "unisched-feasible"
    ),
    # The limit: true durations and speeds known at submission (simulator only, issue 9)
    "oracle": lambda: UniSchedPolicy(UniSchedConfig(oracle=True, profiling=False), "oracle"),
}


def _mlf_rl(load_control: bool, name: str) -> Policy:
    from controller.policy.mlfs.rl.policy import MlfRlPolicy  # imports torch: on first use

    return MlfRlPolicy(load_control=load_control, name=name)


def available_policies() -> list[str]:
    return sorted(_FACTORIES)


def make_policy(name: str) -> Policy:
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; valid: {', '.join(available_policies())}"
        ) from None
