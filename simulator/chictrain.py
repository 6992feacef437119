"""Training Chic in the simulator (§4.3, Algorithm 1; issue 16): the modified cross-entropy
method. Each iteration runs N trajectories with the current policy and one with actions uniform
on A, each on a training sequence drawn at random; ξ_k is the ⌊(1 - rho) N⌋-th smallest return
(1-based, Algorithm 1 line 9); the trajectories at or above it are the elite; θ̂_k maximises
their actions' log-likelihood (Eq. 9 as a cross-entropy, Eq. 2; a few Adam steps from θ̃_{k-1});
θ̃_k = alpha θ̂_k + (1 - alpha) θ̃_{k-1} (line 11). Every ``validate_every`` iterations the policy's
greedy ACT on the validation sequences is measured and the best policy kept.

``mlsched chic-train`` writes the best policy as an ``.npz`` (controller.policy.chic.network).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet, build_torch
from controller.policy.chic.phase import KINDS, n_actions, state_size
from simulator.chic_env import Episode, greedy, marginal_gain, run_chic, sampler, uniform
from simulator.chic_workload import ChicJob, sequences


@dataclass(frozen=True)
class CemConfig:
    kind: str = "ps"
    slots: int = 3  # I (§6.1)
    iterations: int = 40  # K
    trajectories: int = 35  # N (§5)
    rho: float = 0.3  # elite fraction: ξ_k = R_(⌊(1 - rho) N⌋)
    lr: float = 0.01  # Adam (§5)
    smoothing: float = 0.7  # alpha of line 11 (ours; the paper gives none apart from Adam's)
    fit_steps: int = 150  # Adam steps per θ̂_k (ours)
    validate_every: int = 2  # §5
    rate: float = 1.8  # arrivals per hour (§6.2.1)
    jobs: int = 30  # W (§6.1)
    train_sequences: int = 100  # ours
    validation_sequences: int = 30  # §5
    train_seed: int = 1
    validation_seed: int = 2
    seed: int = 0
    imitate: int = 0  # ours: warm-start episodes of the marginal-gain teacher (0: paper's init)
    imitate_steps: int = 300
    imitate_lr: float = 0.01


def elite_threshold(returns: Sequence[float], rho: float, n: int) -> float:
    """ξ_k (Algorithm 1, lines 8-9): the ⌊(1 - rho) n⌋-th smallest of the returns (1-based),
    the smallest when that index is 0."""
    ordered = sorted(returns)
    k = math.floor((1.0 - rho) * n + 1e-9)
    return ordered[max(k, 1) - 1]


def smooth(new: Sequence[np.ndarray], old: Sequence[np.ndarray], alpha: float) -> list:
    """θ̃_k = alpha θ̂_k + (1 - alpha) θ̃_{k-1}, array by array (line 11)."""
    return [alpha * a + (1.0 - alpha) * b for a, b in zip(new, old, strict=True)]


def fit_elite(module, elite: Sequence[Episode], cfg: CemConfig, torch_rng) -> float:
    """θ̂_k: Adam steps on the elite's mean negative log-likelihood (dropout on); the last
    loss."""
    import torch

    states = np.concatenate([np.stack(e.states) for e in elite if e.states])
    actions = np.concatenate([np.asarray(e.actions) for e in elite if e.actions])
    x, y = torch.from_numpy(states).float(), torch.from_numpy(actions).long()
    opt = torch.optim.Adam(module.parameters(), lr=cfg.lr)
    module.train()
    loss = torch.tensor(0.0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch_rng.integers(2**31)))
        for _ in range(cfg.fit_steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(module(x), y)
            loss.backward()
            opt.step()
    module.eval()
    return float(loss.detach())


def evaluate(net: ArrayNet, seqs: Sequence[Sequence[ChicJob]], kind: str, slots: int) -> float:
    """Mean ACT (s) of the greedy policy over sequences."""
    return float(np.mean([run_chic(s, greedy(net), kind, slots, record=False).act_s for s in seqs]))


def train(
    cfg: CemConfig, progress: bool = False, on_row: Callable[[dict], None] | None = None
) -> tuple[ArrayNet, list[dict]]:
    """Algorithm 1; returns the best validated policy and one log row per iteration."""
    import torch

    torch.set_num_threads(1)  # small batches: threads only contend
    rng = np.random.default_rng(cfg.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        module = build_torch(state_size(cfg.kind, cfg.slots), n_actions(cfg.kind, cfg.slots))
    module.eval()
    train_set = sequences(cfg.rate, cfg.train_sequences, cfg.jobs, cfg.train_seed)
    valid_set = sequences(cfg.rate, cfg.validation_sequences, cfg.jobs, cfg.validation_seed)
    if cfg.imitate:
        teacher = [
            run_chic(train_set[rng.integers(len(train_set))], marginal_gain, cfg.kind, cfg.slots)
            for _ in range(cfg.imitate)
        ]
        fit_elite(
            module, teacher, replace(cfg, fit_steps=cfg.imitate_steps, lr=cfg.imitate_lr), rng
        )
    best: tuple[float, ArrayNet] | None = None
    log: list[dict] = []
    steps = range(1, cfg.iterations + 1)
    if progress:
        from tqdm import tqdm

        steps = tqdm(steps, desc=f"chic-train {cfg.kind}", file=sys.stderr)
    if cfg.imitate:
        net = ArrayNet.from_torch(module, cfg.kind, cfg.slots)
        best = (evaluate(net, valid_set, cfg.kind, cfg.slots), net)
        log.append({"iteration": 0, "validation_act_s": best[0]})
        if on_row:
            on_row(log[-1])
    for k in steps:
        net = ArrayNet.from_torch(module, cfg.kind, cfg.slots)
        episodes = [
            run_chic(
                train_set[rng.integers(len(train_set))], sampler(net, rng), cfg.kind, cfg.slots
            )
            for _ in range(cfg.trajectories)
        ]
        seq = train_set[rng.integers(len(train_set))]
        episodes.append(run_chic(seq, uniform(rng), cfg.kind, cfg.slots))
        returns = [e.reward for e in episodes]
        xi = elite_threshold(returns, cfg.rho, cfg.trajectories)
        elite = [e for e in episodes if e.reward >= xi]
        old = [p.detach().clone() for p in module.parameters()]
        loss = fit_elite(module, elite, cfg, rng)
        with torch.no_grad():
            for p, q in zip(module.parameters(), old, strict=True):
                p.copy_(cfg.smoothing * p + (1.0 - cfg.smoothing) * q)
        row = {
            "iteration": k,
            "xi": xi,
            "mean_return": float(np.mean(returns)),
            "elite": len(elite),
            "loss": loss,
            "uniform_in_elite": episodes[-1].reward >= xi,
        }
        if k % cfg.validate_every == 0 or k == cfg.iterations:
            net = ArrayNet.from_torch(module, cfg.kind, cfg.slots)
            row["validation_act_s"] = evaluate(net, valid_set, cfg.kind, cfg.slots)
            if best is None or row["validation_act_s"] < best[0]:
                best = (row["validation_act_s"], net)
        log.append(row)
        if on_row:
            on_row(row)
    assert best is not None
    return best[1], log


def add_chic_train_command(subparsers: argparse._SubParsersAction) -> None:
    d = CemConfig()
    p = subparsers.add_parser(
        "chic-train",
        help="train a Chic policy in the simulator (Chic §4.3, Algorithm 1)",
        description="The modified cross-entropy method on generated Chic workloads; writes "
        "the best validated policy (.npz).",
    )
    p.add_argument(
        "--kind",
        choices=KINDS,
        default=d.kind,
        help="ps: chic, pair: chic-pair, ar: chic-ar [%(default)s]",
    )
    p.add_argument("--out", type=Path, help="model file [the shipped one of --kind]")
    for name in (
        "imitate",
        "imitate_steps",
        "slots",
        "iterations",
        "trajectories",
        "fit_steps",
        "validate_every",
        "jobs",
        "train_sequences",
        "validation_sequences",
        "train_seed",
        "validation_seed",
        "seed",
    ):
        p.add_argument(
            "--" + name.replace("_", "-"), type=int, default=getattr(d, name), help="[%(default)s]"
        )
    for name in ("rho", "lr", "smoothing", "rate", "imitate_lr"):
        p.add_argument(
            "--" + name.replace("_", "-"),
            type=float,
            default=getattr(d, name),
            help="[%(default)s]",
        )
    p.add_argument("--history", type=Path, help="also write the per-iteration log (JSON)")
    p.add_argument("--plot", type=Path, help="learning-curve PNG (needs matplotlib)")
    p.set_defaults(func=run_chic_train)


def run_chic_train(args: argparse.Namespace) -> int:
    import json

    fields = {k: getattr(args, k) for k in asdict(CemConfig())}
    cfg = CemConfig(**fields)
    net, log = train(cfg, progress=sys.stderr.isatty(), on_row=_print_row)
    out = args.out or DEFAULT_MODELS[cfg.kind]
    net.save(out, config=json.dumps(asdict(cfg)))
    print(f"wrote {out}")
    if args.history:
        args.history.write_text(json.dumps(log, indent=1))
    if args.plot:
        _plot(log, args.plot)
    return 0


def _print_row(row: dict) -> None:
    text = f"iteration {row['iteration']}:"
    if "xi" in row:
        text += f" xi {row['xi']:.1f} mean return {row['mean_return']:.1f} elite {row['elite']}"
    if "validation_act_s" in row:
        text += f" validation ACT {row['validation_act_s']:.0f} s"
    print(text, flush=True)


def _plot(log: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    rows = [r for r in log if "xi" in r]
    it = [r["iteration"] for r in rows]
    a.plot(it, [r["xi"] for r in rows], label="xi_k")
    a.plot(it, [r["mean_return"] for r in rows], label="mean R")
    a.set_xlabel("iteration")
    a.legend()
    val = [(r["iteration"], r["validation_act_s"]) for r in log if "validation_act_s" in r]
    b.plot([v[0] for v in val], [v[1] for v in val], marker="o")
    b.set_xlabel("iteration")
    b.set_ylabel("validation ACT (s)")
    fig.tight_layout()
    fig.savefig(path)
