"""Chic Fig. 5: scheduling runtime of chic, chic-pair and optimus (600 s and 300 s rounds) for
30-job workloads at 1.8 jobs/h, and their ACT (Fig. 5b). Runtime is the CPU time (process
clock) spent choosing allocations: the decision phases of chic / chic-pair, the greedy rounds
of optimus; the simulated training between them is not counted.

    .venv/bin/python benchmarks/bench_chic.py [--sequences 30] [--seed 3] [--rate 1.8]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet
from simulator.chic_env import greedy, run_chic, run_optimus
from simulator.chic_workload import sequences


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", type=int, default=30)
    p.add_argument("--seed", type=int, default=3, help="test workloads (training uses 1, 2)")
    p.add_argument("--rate", type=float, default=1.8)
    args = p.parse_args()
    seqs = sequences(args.rate, args.sequences, 30, args.seed)
    clock = time.process_time
    nets = {k: ArrayNet.load(DEFAULT_MODELS[k]) for k in ("ps", "pair")}
    runs = {
        "chic": lambda s: run_chic(
            s, greedy(nets["ps"]), "ps", nets["ps"].slots, record=False, clock=clock
        ),
        "chic-pair": lambda s: run_chic(
            s, greedy(nets["pair"]), "pair", nets["pair"].slots, record=False, clock=clock
        ),
        "optimus": lambda s: run_optimus(s, 600.0, clock=clock),
        "optimus-300": lambda s: run_optimus(s, 300.0, clock=clock),
    }
    print(f"{args.sequences} sequences of 30 jobs at {args.rate}/h, seed {args.seed}")
    print(f"{'policy':>12} {'runtime ms':>11} {'schedules':>10} {'ms/schedule':>12} {'ACT s':>8}")
    runtime = {}
    for name, run in runs.items():
        episodes = [run(s) for s in seqs]
        ms = 1000.0 * float(np.mean([e.decide_s for e in episodes]))
        count = float(np.mean([e.schedules for e in episodes]))
        act = float(np.mean([e.act_s for e in episodes]))
        runtime[name] = ms
        print(f"{name:>12} {ms:11.1f} {count:10.1f} {ms / count:12.3f} {act:8.0f}")
    print(f"chic / chic-pair runtime: {runtime['chic'] / runtime['chic-pair']:.2f}x (paper: 3.00x)")


if __name__ == "__main__":
    main()
