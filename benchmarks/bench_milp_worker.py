"""What solving UniSched's MILP in a worker process costs: one simulation with the MILP in
process, the same with the worker (``UniSchedConfig.isolate_solver``), wall time of each.

    python benchmarks/bench_milp_worker.py --trace PATH/trace_job_Philly_MIX2.csv
"""

from __future__ import annotations

import argparse
import time

from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from simulator import cli
from simulator.engine import SimConfig, Simulation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--limit", type=int, default=700, help="first N jobs")
    parser.add_argument("--cluster", default="12x8")
    args = parser.parse_args()
    commands = argparse.ArgumentParser().add_subparsers()
    cli.add_simulate_command(commands)
    sim_args = commands.choices["simulate"].parse_args(
        ["--trace", args.trace, "--limit", str(args.limit), "--cluster", args.cluster]
    )
    model = cli.job_model(sim_args)
    jobs = cli.load_workload(sim_args, model)
    shape = cli.parse_cluster(args.cluster)
    for isolated in (False, True):
        policy = UniSchedPolicy(UniSchedConfig(isolate_solver=isolated))
        started = time.perf_counter()
        Simulation(jobs, policy, shape, model, SimConfig(lease_s=300.0, cycle_s=60.0)).run()
        where = "worker process" if isolated else "in process"
        print(
            f"MILP {where:>14}: wall {time.perf_counter() - started:7.1f} s, "
            f"{len(policy.solve_times_s)} MILP cycles with an answer"
        )


if __name__ == "__main__":
    main()
