"""MLF-RL models against MLF-H on one prepared run, side by side (docs/mlfs.md, *A model per
setting*).

    python benchmarks/mlfrl_vs_mlfh.py [--model LABEL=PATH ...] [--skip-shipped] \
        [--candidates default,all,N ...] [--json] -- SIMULATE-ARGS

SIMULATE-ARGS are ``mlsched simulate``'s (``--trace``, ``--limit``, ``--cluster``,
``--mlfs-features``, ``--mlfs-param`` ...). The trace is loaded once; MLF-H and ``mlf-rl``
with each model (``shipped``: the packaged model ``mlsched simulate`` runs in this setting,
unless ``--skip-shipped``) go over the same jobs, each with every ``--candidates`` setting: the
most candidates a step offers the network (``MlfRlPolicy.max_candidates``): ``default`` (the
model's training queue), ``all`` (no window) or a number.
Per policy it prints the average JCT, R^slo, the Eq. 7 total with its objectives g1..g5
(``simulator.rltrain``: what training maximises) and the wall time, and each model's JCT
and Eq. 7 against MLF-H's (``--json``: the same figures as one JSON object).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.rl.policy import MlfRlPolicy
from mlsched.gctune import tune_for_cycles
from simulator.cli import (
    PreparedRun,
    add_simulate_command,
    prepare_run,
    run_policy,
    with_setting_model,
)
from simulator.engine import Simulation
from simulator.metrics import compute_metrics
from simulator.rltrain import episode_objectives, episode_reward


def parse(
    argv: list[str],
) -> tuple[dict[str, Path | None], list[str], bool, argparse.Namespace]:
    """The models by label (``shipped`` first), the ``--candidates`` settings, ``--json`` and
    ``mlsched simulate``'s arguments."""
    cut = argv.index("--") if "--" in argv else len(argv)
    ours, rest = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--skip-shipped", action="store_true", help="only the --model files")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument(
        "--candidates", default="default", help="default, all or N, comma-separated [default]"
    )
    options = parser.parse_args(ours)
    models: dict[str, Path | None] = {} if options.skip_shipped else {"shipped": None}
    for pair in options.model:
        label, sep, path = pair.partition("=")
        if not sep or not label or label in models:
            parser.error(f"--model {pair!r}: expected a new LABEL=PATH")
        models[label] = Path(path)
    simulate = argparse.ArgumentParser(prog="SIMULATE-ARGS")
    add_simulate_command(simulate.add_subparsers())
    windows = options.candidates.split(",")
    for window in windows:
        if window not in ("default", "all") and not (window.isdigit() and int(window) >= 1):
            parser.error(f"--candidates {window!r}: expected default, all or a number >= 1")
    return models, windows, options.json, simulate.parse_args(["simulate", *rest])


def measure(
    run: PreparedRun, name: str, model: Path | None, window: str = "default"
) -> dict[str, float]:
    """One policy over the prepared run (as ``mlsched simulate`` runs it; ``mlf-rl`` with
    ``window`` candidates a step): its figures."""
    if window == "default":
        result = run_policy(replace(run, mlfs_model=model), name)
    else:
        most = len(run.jobs) if window == "all" else int(window)
        policy = MlfRlPolicy(model_path=model, config=run.mlfs or MlfsConfig(), max_candidates=most)
        result = Simulation(run.jobs, policy, run.shape, run.model, run.config).run()
    metrics = compute_metrics(result)
    g = episode_objectives(result)
    return {
        "jct_min": metrics["jct_s"]["all"]["avg"] / 60.0,
        "r_slo": metrics["r_slo"] or 0.0,
        "eq7": episode_reward(result),
        **{f"g{i + 1}": value for i, value in enumerate(g)},
        "wall_s": result.wall_s,
    }


def main(argv: list[str]) -> int:
    models, windows, as_json, args = parse(argv)
    run = prepare_run(args)
    tune_for_cycles()
    rows = {"mlf-h": measure(run, "mlf-h", None)}
    shipped = with_setting_model(run, ["mlf-rl"], args.mlfs_features).mlfs_model
    for label, path in models.items():
        path = shipped if label == "shipped" else path
        for window in windows:
            tag = label if window == "default" else f"{label}, {window} a step"
            rows[f"mlf-rl ({tag})"] = measure(run, "mlf-rl", path, window)
    if as_json:
        print(json.dumps({"jobs": len(run.jobs), "rows": rows}, indent=2))
        return 0
    params = " ".join(args.mlfs_param) or "the paper's defaults"
    print(
        f"{len(run.jobs)} jobs on {run.shape.nodes}x{run.shape.gpus_per_node} GPUs, "
        f"MLFS features {'on' if args.mlfs_features else 'off'}, "
        f"parameters: {params}"
    )
    head = rows["mlf-h"]
    print(
        f"{'policy':<32} {'JCT avg (min)':>13} {'vs MLF-H':>8} {'R^slo':>6} {'Eq. 7':>8} "
        f"{'vs MLF-H':>8} {'g1':>7} {'g2':>6} {'g3':>7} {'g4':>5} {'g5':>6} {'wall (s)':>8}"
    )
    for name, r in rows.items():
        jct = 100.0 * (r["jct_min"] / head["jct_min"] - 1.0)
        eq7 = r["eq7"] - head["eq7"]
        print(
            f"{name:<32} {r['jct_min']:>13.1f} {jct:>+7.1f}% {100 * r['r_slo']:>5.2f}% "
            f"{r['eq7']:>8.4f} {eq7:>+8.4f} {r['g1']:>7.3f} {r['g2']:>6.3f} {r['g3']:>7.3f} "
            f"{r['g4']:>5.2f} {r['g5']:>6.3f} {r['wall_s']:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
