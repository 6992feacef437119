"""Policies by name, for the CLI and the controller configuration.

Every policy answers node agents' migration requests: MLF-H, MLF-RL and MLFS in their own
cycle; the others through :class:`~controller.policy.overload.AnswersOverloadRequests`, which
adds MLFS' moves (:func:`~controller.policy.overload.answer_requests`) to their decisions. The
classes below are the policies' own with that mixin: same parameters, same ``isinstance``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from controller.policy.base import Policy
from controller.policy.chronus import ChronusPolicy
from controller.policy.edf import EdfPolicy
from controller.policy.fair import FairPolicy
from controller.policy.fifo import FifoPolicy
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.names import DEFAULT_POLICY, RL_POLICIES, available_policies
from controller.policy.ones import OnesPolicy
from controller.policy.optimus import OptimusPolicy
from controller.policy.overload import AnswersOverloadRequests
from controller.policy.pollux import PolluxPolicy
from controller.policy.slaq import SlaqPolicy
from controller.policy.srtf import SrtfPolicy
from controller.policy.themis import ThemisPolicy
from controller.policy.tiresias import TiresiasPolicy
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy

__all__ = ["DEFAULT_POLICY", "available_policies", "make_policy"]


class _Fifo(AnswersOverloadRequests, FifoPolicy):
    pass


class _Srtf(AnswersOverloadRequests, SrtfPolicy):
    pass


class _Tiresias(AnswersOverloadRequests, TiresiasPolicy):
    pass


class _Edf(AnswersOverloadRequests, EdfPolicy):
    pass


class _Chronus(AnswersOverloadRequests, ChronusPolicy):
    pass


class _Themis(AnswersOverloadRequests, ThemisPolicy):
    pass


class _Slaq(AnswersOverloadRequests, SlaqPolicy):
    pass


class _Fair(AnswersOverloadRequests, FairPolicy):
    pass


class _Ones(AnswersOverloadRequests, OnesPolicy):
    pass


class _Optimus(AnswersOverloadRequests, OptimusPolicy):
    pass


class _Pollux(AnswersOverloadRequests, PolluxPolicy):
    pass


class _UniSched(AnswersOverloadRequests, UniSchedPolicy):
    """Until UniSched plans requests itself (``docs/policies.md``, *Overload requests*)."""


_FACTORIES: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: _Fifo(time_slicing=False, name="fifo"),
    "fifo-lease": lambda: _Fifo(time_slicing=True, name="fifo-lease"),
    "srtf": _Srtf,
    "tiresias": _Tiresias,
    "edf": _Edf,
    "chronus": _Chronus,  # Gao et al., SoCC 2021 (docs/chronus.md)
    "themis": _Themis,
    "unisched": _UniSched,
    # SLAQ (Zhang et al., SoCC 2017; docs/slaq.md) on elastic jobs, and its comparator
    "slaq": lambda: _Slaq(maxmin=False),
    "slaq-maxmin": lambda: _Slaq(maxmin=True),
    "fair": _Fair,
    "ones": _Ones,  # ONES (Bian et al.; docs/ones.md): evolutionary batch-size search
    "optimus": _Optimus,  # Optimus as ONES used it: greedy marginal gain every 10 minutes
    "pollux": _Pollux,  # Pollux (Qiao et al., OSDI 2021; docs/pollux.md): goodput GA
    "chic-ar": lambda: _chic_ar(),  # Chic (docs/chic.md) on all-reduce jobs, as ONES adapted it
    "chic": lambda: _chic(),  # Chic's PS counts live, all-reduce jobs as chic-ar (docs/chic.md)
    "mlf-h": MlfhPolicy,  # MLFS §3.3, without MLF-C
    # MLF-RL (MLFS §3.4) with the shipped model; MLFS = MLF-RL with MLF-C (§3.5)
    "mlf-rl": lambda: _mlf_rl(load_control=False, name="mlf-rl"),
    "mlfs": lambda: _mlf_rl(load_control=True, name="mlfs"),
    # UniSched with python-mip's HiGHS or CBC backend, and its ablations (UniSched §VI-C): no
    # SR-aware estimator, no training-iteration estimator (maximum iterations), Chronus'
    # round-up.
    "unisched-highs": lambda: _UniSched(UniSchedConfig(solver="highs"), "unisched-highs"),
    "unisched-cbc": lambda: _UniSched(UniSchedConfig(solver="cbc"), "unisched-cbc"),
    "unisched-no-sr": lambda: _UniSched(UniSchedConfig(sr_aware=False), "unisched-no-sr"),
    "unisched-no-iter": lambda: _UniSched(
        UniSchedConfig(iteration_estimator=False), "unisched-no-iter"
    ),
    "unisched-roundup": lambda: _UniSched(UniSchedConfig(placement="roundup"), "unisched-roundup"),
    # Fig. 9(a): two nodes only profile, outside the MILP; Fig. 10(b): the solver's first
    # feasible solution instead of the reward-maximising one.
    "unisched-static-profiler": lambda: _UniSched(
        UniSchedConfig(static_profile_nodes=2), "unisched-static-profiler"
    ),
    "unisched-feasible": lambda: _UniSched(
        UniSchedConfig(objective="feasible"), "unisched-feasible"
    ),
    # The limit: true durations and speeds known at submission (simulator only, issue 9)
    "oracle": lambda: _UniSched(UniSchedConfig(oracle=True, profiling=False), "oracle"),
}


def _chic_ar() -> Policy:
    from controller.policy.chic.ar import ChicArPolicy

    class _ChicAr(AnswersOverloadRequests, ChicArPolicy):
        pass

    return _ChicAr()


def _chic() -> Policy:
    from controller.policy.chic.live import ChicLivePolicy

    class _Chic(AnswersOverloadRequests, ChicLivePolicy):
        pass

    return _Chic()


def _mlf_rl(
    load_control: bool,
    name: str,
    config: MlfsConfig | None = None,
    model_path: Path | None = None,
) -> Policy:
    from controller.policy.mlfs.rl.policy import MlfRlPolicy  # imports torch: on first use

    return MlfRlPolicy(
        model_path=model_path, config=config or MlfsConfig(), load_control=load_control, name=name
    )


# The MLFS family, which take an MlfsConfig (the paper's tunable parameters, §4.1)
_MLFS_FACTORIES: dict[str, Callable[[MlfsConfig], Policy]] = {
    "mlf-h": lambda config: MlfhPolicy(config=config),
    "mlf-rl": lambda config: _mlf_rl(load_control=False, name="mlf-rl", config=config),
    "mlfs": lambda config: _mlf_rl(load_control=True, name="mlfs", config=config),
}


def make_policy(
    name: str,
    mlfs: MlfsConfig | None = None,
    mlfs_model: Path | None = None,
    slaq_pause_s: float | None = None,
) -> Policy:
    """A new policy object of that name; ValueError naming the valid ones. ``mlfs``: the
    parameters of MLF-H, MLF-RL and MLFS (others ignore it); None: the paper's defaults.
    ``mlfs_model``: the network MLF-RL and MLFS load (``mlsched mlfs-train``; others ignore
    it); None: the shipped one. ``slaq_pause_s``: the restart pause SLAQ assumes for a job
    until its own is measured (others ignore it); None: ``slaq.RESIZE_PAUSE_S``."""
    if slaq_pause_s is not None and name in ("slaq", "slaq-maxmin"):
        if not slaq_pause_s >= 0:
            raise ValueError(f"slaq_pause_s must not be negative, got {slaq_pause_s}")
        return _Slaq(maxmin=name == "slaq-maxmin", pause_s=slaq_pause_s)
    if mlfs_model is not None and name in RL_POLICIES:
        return _mlf_rl(RL_POLICIES[name], name, mlfs, mlfs_model)
    if mlfs is not None and name in _MLFS_FACTORIES:
        return _MLFS_FACTORIES[name](mlfs)
    try:
        return _FACTORIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown policy {name!r}; valid: {', '.join(available_policies())}"
        ) from None
