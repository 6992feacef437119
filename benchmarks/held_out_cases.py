"""UniSched against every baseline on the held-out §II-B-like cases of the unit tests.

    python benchmarks/held_out_cases.py [--seeds 0-99] [--policy unisched,unisched:keep_started=0]

Each seed is one case of ``tests/controller/policy/unisched/test_joint_allocation.py``'s
generator (a full cluster of mixed jobs submitted at once, 70 % strict SLO, deadlines that hold
when every job starts right after profiling), run through the simulator as the tests run it.
Prints each case's R^slo per policy and, at the end, the cases where a UniSched variant missed
more reward than the best baseline (issue 9: none may). A policy may carry ``:NAME=VALUE``
fields of its ``UniSchedConfig``, as in ``benchmarks/be_variants.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINES = ("fifo", "edf", "srtf", "tiresias", "themis", "fair", "chronus")


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main() -> int:
    sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
    from be_variants import _configured

    from controller.policy import make_policy
    from simulator.engine import Simulation
    from simulator.jobmodel import TraceJobModel
    from simulator.metrics import compute_metrics
    from tests.controller.policy.unisched.conftest import SIM_CONFIG, _slo
    from tests.controller.policy.unisched.test_joint_allocation import _held_out_case

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-99", help="FIRST-LAST [%(default)s]")
    parser.add_argument("--policy", default="unisched,unisched:keep_started=0")
    args = parser.parse_args()

    def policy(spec: str):  # type: ignore[no-untyped-def]
        name, *pairs = spec.split(":")
        made = make_policy(name)
        fields = dict(pair.split("=", 1) for pair in pairs)
        return _configured(made, fields, spec) if fields else made

    variants = args.policy.split(",")
    losses: list[str] = []
    for seed in _seeds(args.seeds):
        shape, jobs = _held_out_case(seed, _slo)
        r_slo = {}
        for spec in (*BASELINES, *variants):
            result = Simulation(jobs, policy(spec), shape, TraceJobModel(seed=0), SIM_CONFIG).run()
            r_slo[spec] = compute_metrics(result)["r_slo"] or 0.0
        best = min(r_slo[b] for b in BASELINES)
        lost = [v for v in variants if r_slo[v] > best + 1e-9]
        losses += [f"seed {seed}: {v} {r_slo[v]:.3f} > {best:.3f}" for v in lost]
        cells = " ".join(f"{k}={v:.3f}" for k, v in r_slo.items())
        print(f"seed {seed} ({shape.nodes}x{shape.gpus_per_node}, {len(jobs)} jobs): {cells}")
        sys.stdout.flush()
    print(f"{len(losses)} case(s) where a variant missed more than the best baseline")
    for line in losses:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
