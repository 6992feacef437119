"""``mlsched chic-simulate``: Chic's evaluation (§6.2.1, Fig. 4) on generated or saved Chic
workloads: average completion time of ``chic``, ``chic-pair``, ``optimus`` (600 s rounds) and
``optimus-300`` per arrival rate (docs/chic.md gives the command per figure).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet
from mlsched.jsonflag import add_json_options
from simulator.chic_env import Episode, greedy, run_chic, run_optimus
from simulator.chic_workload import ChicJob, read_csv, sequences, write_csv

POLICIES = ("chic", "chic-pair", "optimus", "optimus-300")
KIND = {"chic": "ps", "chic-pair": "pair"}


def run_policy(
    name: str, jobs: tuple[ChicJob, ...], models: dict[str, ArrayNet], slots: int = 3
) -> Episode:
    if name in KIND:
        net = models[KIND[name]]
        return run_chic(jobs, greedy(net), KIND[name], net.slots, record=False)
    if name in ("optimus", "optimus-300"):
        return run_optimus(jobs, 300.0 if name == "optimus-300" else 600.0)
    raise ValueError(f"unknown Chic policy {name!r}; valid: {', '.join(POLICIES)}")


def add_chic_simulate_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "chic-simulate",
        help="Chic's PS-job simulation: ACT of chic, chic-pair and optimus (Chic §6.2.1)",
        description="Average completion time over Chic workload sequences (generated: "
        "--arrival-rate, --sequences, --seed; or --trace CSV files).",
    )
    p.add_argument("--arrival-rate", default="1.8", help="jobs per hour, comma-separated [1.8]")
    p.add_argument("--sequences", type=int, default=30, help="per rate [%(default)s]")
    p.add_argument("--jobs", type=int, default=30, help="jobs per sequence [%(default)s]")
    p.add_argument(
        "--seed",
        type=int,
        default=3,
        help="workload seed (training uses 1, validation 2) [%(default)s]",
    )
    p.add_argument("--trace", type=Path, nargs="*", help="sequences written by --write-trace")
    p.add_argument(
        "--policy",
        default="chic,chic-pair,optimus",
        help="comma-separated: " + ", ".join(POLICIES) + " [%(default)s]",
    )
    p.add_argument("--chic-model", type=Path, default=DEFAULT_MODELS["ps"])
    p.add_argument("--pair-model", type=Path, default=DEFAULT_MODELS["pair"])
    p.add_argument("--write-trace", type=Path, help="write the generated sequences to this folder")
    add_json_options(p, "the ACT per workload and policy")
    p.set_defaults(func=run_chic_simulate)


def run_chic_simulate(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.policy.split(",") if n.strip()]
    bad = [n for n in names if n not in POLICIES]
    if bad:
        raise SystemExit(f"unknown policy {bad[0]!r}; valid: {', '.join(POLICIES)}")
    models = {}
    if "chic" in names:
        models["ps"] = ArrayNet.load(args.chic_model)
    if "chic-pair" in names:
        models["pair"] = ArrayNet.load(args.pair_model)
    if args.trace:
        sets = {"trace": tuple(read_csv(t) for t in args.trace)}
    else:
        rates = [float(r) for r in args.arrival_rate.split(",")]
        sets = {f"{r}/h": sequences(r, args.sequences, args.jobs, args.seed) for r in rates}
    results: dict[str, dict[str, float]] = {}
    report = sys.stderr if args.json else sys.stdout  # with --json the rows show progress
    print(f"{'workload':>10} " + " ".join(f"{n:>12}" for n in names) + "   (ACT, s)", file=report)
    for label, seqs in sets.items():
        if args.write_trace:
            args.write_trace.mkdir(parents=True, exist_ok=True)
            for i, jobs in enumerate(seqs):
                write_csv(args.write_trace / f"chic_{label.replace('/', '')}_{i}.csv", jobs)
        row = {n: float(np.mean([run_policy(n, s, models).act_s for s in seqs])) for n in names}
        results[label] = row
        print(f"{label:>10} " + " ".join(f"{row[n]:12.0f}" for n in names), file=report, flush=True)
    text = json.dumps(results, indent=1) + "\n"
    if args.json:
        sys.stdout.write(text)
    if args.json_out:
        args.json_out.write_text(text)
    return 0
