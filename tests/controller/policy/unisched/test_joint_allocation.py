"""UniSched's joint allocation through the real path: jobs are profiled by the policy itself
(no speed sample is injected), then relaxed allocations must be chosen where they pay (§II-B).

The cases run in the simulator with UniSched Eq. 2's default costs (T1 = 0.075, T2 = 0.12 of
T_comp) and a 300 s BE lease. A 6-GPU job of 3,000 s takes 3,000 s on one node and
3,000 * 1.6 / 1.375 = 3,491 s on two or more (Eq. 2); profiling takes one lease first.
"""

from __future__ import annotations

import random

import pytest

from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from mlsched.model import JobClass, JobState
from simulator.engine import ClusterShape
from simulator.types import TraceJob

# Four 6-GPU strict-SLO jobs on three 8-GPU nodes (§II-B): a deadline of 4,500 s holds only if
# all four start right after profiling, so one (at least) must be split across nodes.
THREE_NODES = ClusterShape(3, 8)


@pytest.fixture
def four_slo(sim) -> list[TraceJob]:
    return [sim.slo(f"s{i}", 6, 3000.0, 4500.0) for i in range(4)]


@pytest.mark.parametrize(
    ("policy", "missed"),
    [("unisched", 0.0), ("fifo", 0.0), ("edf", 0.0), ("unisched-roundup", 0.25)],
)
def test_four_6gpu_slo_jobs_on_three_nodes_through_profiling(sim, four_slo, policy, missed):
    assert sim.r_slo(policy, four_slo, THREE_NODES) == pytest.approx(missed)


def test_three_slo_jobs_and_a_best_effort_job_all_run_after_profiling(sim, four_slo):
    jobs = [*four_slo[:3], TraceJob("be", "u", 0.0, 3000.0, 6)]
    run = sim.run("unisched", jobs, THREE_NODES)
    assert run["metrics"]["r_slo"] == 0.0
    # the best-effort job runs from the end of profiling on: started at once, done in one
    # run of at most the split speed plus profiling and its suspend/resume
    be = run["records"]["be"]
    assert be.first_start_s == 0.0
    assert be.end_s < 300.0 + 3491.0 + 120.0


def _held_out_case(seed: int, slo) -> tuple[ClusterShape, list[TraceJob]]:  # type: ignore[no-untyped-def]
    """A full cluster of mixed jobs submitted at once; 70 % SLO, with deadlines that hold
    when every job starts right after profiling."""
    rng = random.Random(seed)
    nodes, per = rng.choice([(3, 8), (2, 8), (2, 4), (4, 4)])
    jobs: list[TraceJob] = []
    used = 0
    while True:
        gpus = rng.choice([1, 2, 3, 4, 6, min(8, per)])
        if used + gpus > nodes * per:
            return ClusterShape(nodes, per), jobs
        used += gpus
        duration = rng.choice([1200.0, 2400.0, 3600.0])
        name = f"j{len(jobs)}"
        if rng.random() < 0.7:
            jobs.append(slo(name, gpus, duration, duration * 1.35 + 600.0))
        else:
            jobs.append(TraceJob(name, "u", 0.0, duration, gpus))


BASELINES = ("fifo", "edf", "srtf", "tiresias", "themis", "fair", "chronus")


# Seeds 0 and 1: Chronus' round-up misses a fifth or a quarter of the reward. Seed 40 is the
# case keep_started once lost (a started best-effort job displaced a running SLO job); over
# seeds 0-99 of this generator UniSched never missed more than the best baseline.
@pytest.mark.parametrize("seed", [0, 1, 2, 18, 25, 40, 57, 63])
def test_unisched_never_misses_more_than_any_baseline_on_held_out_cases(sim, seed):
    shape, jobs = _held_out_case(seed, sim.slo)
    baselines = [sim.r_slo(policy, jobs, shape) for policy in BASELINES]
    assert sim.r_slo("unisched", jobs, shape) <= min(baselines) + 1e-9


# --- the cached solution (§III-C4) -----------------------------------------------------------


def test_the_cached_solution_keeps_each_jobs_previous_allocation(make_job, monkeypatch):
    import controller.policy.unisched.policy as module
    from controller.placement import TaskPlacement

    nodes = {"a": 8, "b": 8, "c": 8, "d": 2}
    queued = [make_job(f"s{i}", state=JobState.SUSPENDED, suspensions=1) for i in range(4)]

    def boundary(now: float) -> ClusterSnapshot:
        small = make_job(
            "small",
            JobClass.BEST_EFFORT,
            gpus=1,
            state=JobState.RUNNING,
            placement=(TaskPlacement(0, "d", (0,)),),
            lease_expires_at=now,
            running_since=0.0,
        )
        return ClusterSnapshot.of(now, nodes, active=[small], queued=queued)

    policy = UniSchedPolicy(UniSchedConfig(isolate_solver=False))
    first = policy.decide(boundary(0.0))
    assert len(first.launch) == 4  # relaxed 4+2 allocations: all four fit in 24 GPUs
    monkeypatch.setattr(module, "solve", lambda *args, **kwargs: None)  # the solver times out
    again = policy.decide(boundary(300.0))  # the same jobs are back in the queue
    assert sorted(launch.job_id for launch in again.launch) == ["s0", "s1", "s2", "s3"]
    assert all(sum(len(p.gpu_indices) for p in launch.placement) == 6 for launch in again.launch)
    assert [r.job_id for r in again.renew] == ["small"]
