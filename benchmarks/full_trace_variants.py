"""UniSched variants beside other policies on one trace, built as ``mlsched simulate`` builds it.

    python benchmarks/full_trace_variants.py TRACE unisched,unisched:keep_started=0,chronus,fifo
        [--cluster C120] [--limit N]

A policy may carry ``:NAME=VALUE`` fields of its ``UniSchedConfig`` (as in
``benchmarks/be_variants.py``). Prints each policy's wall time and CPU seconds (this process and
its children: UniSched's MILP worker), then ``mlsched simulate``'s table
(docs/unisched.md, *Started jobs resume first*).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
    from be_variants import _configured

    from controller.policy import make_policy
    from simulator import cli as simcli
    from simulator.engine import Simulation
    from simulator.metrics import compute_metrics
    from simulator.report import format_table

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("policies")
    parser.add_argument("--cluster", default="C120")
    parser.add_argument("--limit")
    args = parser.parse_args()
    simulate = argparse.ArgumentParser()
    simcli.add_simulate_command(simulate.add_subparsers())
    argv = ["simulate", "--trace", args.trace, "--cluster", args.cluster, "--quiet"]
    run = simcli.prepare_run(
        simulate.parse_args(argv + (["--limit", args.limit] if args.limit else []))
    )
    metrics = {}
    for spec in args.policies.split(","):
        name, *pairs = spec.split(":")
        policy = make_policy(name)
        fields = dict(pair.split("=", 1) for pair in pairs)
        if fields:
            policy = _configured(policy, fields, spec)
        start, own, children = (
            time.time(),
            _cpu(resource.RUSAGE_SELF),
            _cpu(resource.RUSAGE_CHILDREN),
        )
        result = Simulation(run.jobs, policy, run.shape, run.model, run.config).run()
        own = _cpu(resource.RUSAGE_SELF) - own
        close = getattr(policy, "close", None)
        if close is not None:
            close()  # the MILP worker ends here, so its CPU is counted below
        children = _cpu(resource.RUSAGE_CHILDREN) - children
        metrics[spec] = compute_metrics(result)
        print(
            f"{spec}: wall {time.time() - start:.1f} s, process CPU {own:.1f} s,"
            f" children CPU {children:.1f} s",
            flush=True,
        )
    print(format_table(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
