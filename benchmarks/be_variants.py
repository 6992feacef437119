"""Best-effort JCT and suspensions by reason, for policy variants on one slice of a trace.

    python benchmarks/be_variants.py [--trace PATH] [--cluster C120] [--start 12000]
        [--end 20000] [--policy chronus,unisched,oracle,unisched:EARLY_SLO_WEIGHT=0]

The jobs ``start..end`` of the trace (submit times shifted to begin at 0). A policy is a
registry name, optionally followed by ``:NAME=VALUE`` pairs. An upper-case NAME sets a module
constant of ``controller.policy.unisched.policy`` for that run (e.g. ``EARLY_SLO_WEIGHT``,
``URGENT_SLACK``); a lower-case one a field of the UniSched policy's ``UniSchedConfig`` (e.g.
``unisched:keep_reward=0:profile_in_place=off:be_relaxed=1``, the code before 2026-11-25).

Prints, per policy: R^slo, best-effort JCT (all, <= 2 GPUs, > 2 GPUs: its first wait, GPU
time held per GPU, suspensions and moves per job) in minutes; how long queued
best-effort jobs past profiling waited with too few free GPUs, with enough but not as the cells
of their consolidated allocation, or with those cells free; and the ten most frequent
suspension reasons by job class and size, with the free GPUs left after each such decision
(docs/unisched.md, *Best-effort JCT: what was tried next*).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MLSCHED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = DATA / "chronus_philly" / "trace_job_Philly_MIX1.csv"


class CountingSuspensions:
    """A policy that counts its inner policy's suspensions by (class, size, reason)."""

    def __init__(self, inner, constants: dict[str, float]) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.name = inner.name
        self.constants = constants
        self.needs_job_truth = getattr(inner, "needs_job_truth", False)
        self.counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
        # queued best-effort job-seconds by (size, why it waits): see _account
        self.waited_s: collections.Counter[tuple[str, str]] = collections.Counter()
        self._last: tuple[float, list[tuple[str, str]]] | None = None
        self.idle_at: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def decide(self, snapshot):  # type: ignore[no-untyped-def]
        from controller.policy.unisched import policy as unisched_policy

        for name, value in self.constants.items():
            setattr(unisched_policy, name, type(getattr(unisched_policy, name))(value))
        decision = self.inner.decide(snapshot)
        views = {v.id: v for v in snapshot.active}
        self._account(snapshot, decision)
        idle = sum(len(n.free_gpu_indices) for n in snapshot.nodes) - sum(
            sum(len(p.gpu_indices) for p in o.placement) for o in decision.launch
        )
        for order in decision.suspend:
            view = views.get(order.job_id)
            if view is not None:
                size = "> 2 GPUs" if view.gpus > 2 else "<= 2 GPUs"
                reason = order.reason.split(";")[0]
                self.counts[(view.job_class.value, size, reason)] += 1
                self.idle_at[(view.job_class.value, size, reason)] += idle
        return decision

    def _account(self, snapshot, decision) -> None:  # type: ignore[no-untyped-def]
        """Time queued best-effort jobs (past profiling) spend, per size, with too few free
        GPUs, with enough but not as the cells of their consolidated allocation (Eq. 14), or
        with those cells free; each cycle's state after its decision, held to the next cycle."""
        from controller.policy.unisched.cells import (
            allocations,
            consolidation_feasible,
            free_cells,
            top_level,
        )
        from mlsched.model import JobClass

        if self._last is not None:
            then, waiting = self._last
            for key in waiting:
                self.waited_s[key] += snapshot.now - then
        levels = top_level(max(len(n.gpu_indices) for n in snapshot.nodes)) + 1
        free = {n.id: set(n.free_gpu_indices) for n in snapshot.nodes}
        for order in decision.launch:
            for p in order.placement:
                free[p.node_id].difference_update(p.gpu_indices)
        cells = free_cells({n: sorted(ids) for n, ids in free.items()}, levels)
        room = sum(len(ids) for ids in free.values())
        launched = {o.job_id for o in decision.launch}
        waiting = []
        for view in snapshot.queued:
            if view.job_class is not JobClass.BEST_EFFORT or view.id in launched:
                continue
            if not view.speed_samples and view.estimated_remaining_s is None:
                continue  # not profiled yet
            size = "> 2 GPUs" if view.gpus > 2 else "<= 2 GPUs"
            if room < view.gpus:
                state = "too few free GPUs"
            elif consolidation_feasible(allocations(view.gpus, levels)[0], cells):
                state = "its consolidated cells free"
            else:
                state = "enough free GPUs, not its consolidated cells"
            waiting.append((size, state))
        self._last = (snapshot.now, waiting)


def _avg_min(values: list[float]) -> float:
    return sum(values) / len(values) / 60 if values else 0.0


def describe(records: list) -> str:  # type: ignore[type-arg]
    jct = _avg_min([r.end_s - r.job.submit_s for r in records])
    wait = _avg_min([r.first_start_s - r.job.submit_s for r in records])
    held = _avg_min([r.gpu_s / max(1, r.job.gpus) for r in records])
    suspensions = sum(r.suspensions for r in records) / max(1, len(records))
    moves = sum(r.migrations for r in records) / max(1, len(records))
    return (
        f"{jct:.1f} (n={len(records)} wait {wait:.1f} held {held:.1f} susp {suspensions:.2f}"
        f" moves {moves:.2f})"
    )


def _configured(policy, fields: dict[str, str], name: str):  # type: ignore[no-untyped-def]
    """The same policy class with some fields of its ``config`` changed (a UniSched policy)."""
    config = policy.config
    changed = {}
    for key, text in fields.items():
        current = getattr(config, key)
        if isinstance(current, bool):
            changed[key] = text.lower() in ("1", "true", "yes", "on")
        elif isinstance(current, (int, float)):
            changed[key] = type(current)(float(text))
        else:
            changed[key] = text
    policy.close()
    return type(policy)(dataclasses.replace(config, **changed), name)


def main() -> int:
    from controller.policy import make_policy
    from controller.policy.unisched import policy as unisched_policy
    from mlsched.model import JobClass
    from simulator.cli import parse_cluster, philly_job_model
    from simulator.engine import SimConfig, Simulation
    from simulator.metrics import slo_metrics
    from simulator.trace import load_philly

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--cluster", default="C120")
    parser.add_argument("--start", type=int, default=12_000)
    parser.add_argument("--end", type=int, default=20_000)
    parser.add_argument("--policy", default="chronus,unisched")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (set MLSCHED_DATA or pass --trace)", file=sys.stderr)
        return 2
    jobs = load_philly(args.trace, zero_gpu="one")[args.start : args.end]
    origin = jobs[0].submit_s
    jobs = [dataclasses.replace(j, submit_s=j.submit_s - origin) for j in jobs]
    model = philly_job_model(args.trace, "be_variants")
    for spec in args.policy.split(","):
        name, *pairs = spec.split(":")
        settings = dict(pair.split("=", 1) for pair in pairs)
        constants = {k: float(v) for k, v in settings.items() if k.isupper()}
        inner = make_policy(name)
        fields = {k: v for k, v in settings.items() if not k.isupper()}
        if fields:
            inner = _configured(inner, fields, spec)
        policy = CountingSuspensions(inner, constants)
        defaults = {k: getattr(unisched_policy, k) for k in constants}
        try:
            result = Simulation(jobs, policy, parse_cluster(args.cluster), model, SimConfig()).run()
        finally:  # the next policy of the list runs with the code's own constants
            for k, v in defaults.items():
                setattr(unisched_policy, k, v)
        done = [
            r
            for r in result.records
            if r.job.job_class is JobClass.BEST_EFFORT and r.end_s is not None
        ]
        r_slo = slo_metrics(result)["r_slo"] or 0.0
        print(
            f"{spec}: R^slo {100 * r_slo:.2f} %; BE JCT {describe(done)}; "
            f"<= 2 GPUs {describe([r for r in done if r.job.gpus <= 2])}; "
            f"> 2 GPUs {describe([r for r in done if r.job.gpus > 2])}"
            f"; refused moves {result.refused_migrations}"
        )
        for size in ("<= 2 GPUs", "> 2 GPUs"):
            finished = max(1, sum(1 for r in done if (r.job.gpus > 2) == (size == "> 2 GPUs")))
            print(
                f"    queued after profiling, best-effort {size}, min per finished job: "
                + ", ".join(
                    f"{why} {seconds / 60 / finished:.1f}"
                    for (s, why), seconds in sorted(policy.waited_s.items())
                    if s == size
                )
            )
        for (job_class, size, reason), count in policy.counts.most_common(10):
            idle = policy.idle_at[(job_class, size, reason)] / count
            print(
                f"    {count:6d} suspensions of {job_class} jobs {size}: {reason}"
                f" (idle GPUs after the decision: {idle:.1f} on average)"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
