"""The long randomised fault-injection run (issue 11): seeded faults against a live local
cluster while jobs train, then the invariants of tests/faults/injector.py.

    .venv/bin/python scripts/fault_soak.py --seed 1 --faults 20

Prints each fault as it is injected, then how many faults, how many jobs ran and how they
ended, and anything lost or duplicated (exit status 1 then).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "faults"))

from faultkit import make_cluster
from injector import Injector, run_faults

from mlsched.model import JobState


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=2, help="one-GPU agents")
    parser.add_argument(
        "--kinds", default=",".join(Injector.KINDS), help="comma-separated fault kinds"
    )
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(Injector.KINDS)
    if unknown:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(Injector.KINDS)}")
    root = Path(tempfile.mkdtemp(prefix="mlsched-soak-"))
    nodes = {f"node-{i}": 1 for i in range(args.nodes)}
    cluster = make_cluster(root / "cluster", nodes)
    try:
        report = run_faults(
            cluster,
            args.seed,
            args.faults,
            kinds=kinds,
            on_fault=lambda n, kind: print(f"fault {n + 1}/{args.faults}: {kind}", flush=True),
        )
        with cluster.client("alice") as client:
            ends = {j.id: j.state for j, _ in client.list()}
    finally:
        cluster.stop()
    counts = {s.value: sum(1 for v in ends.values() if v is s) for s in JobState if s.terminal}
    by_kind = {k: report.faults.count(k) for k in kinds}
    print(f"seed {args.seed}: {len(report.faults)} faults injected {by_kind}")
    print(f"jobs run: {len(report.jobs)}; ended: {counts}")
    for line in report.skipped:
        print(f"skipped: {line}")
    print(f"lost or duplicated: {len(report.problems)}")
    for problem in report.problems:
        print(f"  {problem}")
    print(f"cluster directory: {root}" + ("" if args.keep else " (remove it when done)"))
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
