"""The limit and the ablations added for issue 9: ``oracle`` (true durations and speeds known at
submission), ``unisched-static-profiler`` (Fig. 9a) and ``unisched-feasible`` (Fig. 10b).

Simulated cases use UniSched Eq. 2's default costs and a 300 s BE lease: a 4-GPU job of
3,000 s profiles on 2 GPUs for one lease, is suspended and resumes on 4, and ends at 3,204 s.
"""

from __future__ import annotations

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobTruth
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from controller.policy.unisched.milp import MilpJob, MilpProblem, Option, solve
from controller.server import Controller, ControllerConfig
from mlsched.model import JobClass, JobState
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.jobmodel import TraceJobModel
from simulator.types import TraceJob

# --- oracle ----------------------------------------------------------------------------------


def test_the_oracle_meets_deadlines_that_profiling_costs_unisched(sim):
    two_tight = [sim.slo("a", 4, 3000.0, 3100.0), sim.slo("b", 4, 3000.0, 3100.0)]
    oracle = sim.run("oracle", two_tight, ClusterShape(1, 8))
    assert oracle["metrics"]["r_slo"] == 0.0
    # started at once on 4 GPUs each, no profiling, no suspension: exactly their duration
    assert {k: (r.first_start_s, r.end_s) for k, r in oracle["records"].items()} == {
        "a": (0.0, pytest.approx(3000.0)),
        "b": (0.0, pytest.approx(3000.0)),
    }
    unisched = sim.run("unisched", two_tight, ClusterShape(1, 8))
    assert unisched["metrics"]["r_slo"] == 1.0
    assert all(r.end_s > 3100.0 for r in unisched["records"].values())


def test_the_simulator_tells_the_truth_only_to_a_policy_that_needs_it():
    seen: dict[str, object] = {}

    class Spy:
        name = "spy"

        def __init__(self, needs: bool) -> None:
            self.needs_job_truth = needs

        def decide(self, snapshot):
            from controller.policy.base import Decision

            for view in snapshot.queued:
                seen[view.id] = view.truth
            return Decision()

    job = TraceJob("j", "u", 0.0, 1000.0, 6, iterations=500)
    model = TraceJobModel(seed=0)
    for needs in (False, True):
        seen.clear()
        config = SimConfig(lease_s=300.0, cycle_s=60.0, max_time_s=1.0)
        Simulation([job], Spy(needs), ClusterShape(2, 4), model, config).run()
        if not needs:
            assert seen["j"] is None
            continue
        truth = seen["j"]
        assert isinstance(truth, JobTruth)
        assert truth.iterations == 500
        # 6 GPUs on 4-GPU nodes: two nodes at least, and one more for a relaxed spread
        assert set(truth.iteration_time_s) == {(6, 2), (6, 3)}
        assert truth.iteration_time_s[(6, 2)] == model.iteration_time(job, 6, 2)[0]
        assert truth.sr_overhead_s == model.suspend_s(job, 6) + model.resume_s(job, 6)


def test_job_truth_lookup_falls_back_to_the_widest_known_spread():
    truth = JobTruth(10, {(6, 1): 1.0, (6, 2): 1.5}, 20.0)
    assert truth.iteration_time(6, 1) == 1.0
    assert truth.iteration_time(6, 3) == 1.5
    assert truth.iteration_time(4, 1) is None


def test_the_oracle_without_truth_is_a_clear_error(make_job):
    policy = UniSchedPolicy(UniSchedConfig(oracle=True, profiling=False, isolate_solver=False))
    snapshot = ClusterSnapshot.of(0.0, {"a": 8}, queued=[make_job("s")])
    with pytest.raises(ValueError, match="only the simulator fills"):
        policy.decide(snapshot)


def test_the_oracle_cannot_schedule_a_live_cluster(tmp_path):
    config = ControllerConfig("127.0.0.1:0", tmp_path, "t", policy="oracle")
    with pytest.raises(ValueError, match="cannot schedule a live cluster"):
        Controller(config)
    assert not (tmp_path / "controller.db").exists()


def test_an_oracle_that_profiles_is_refused():
    with pytest.raises(ValueError, match="profiles nothing"):
        UniSchedConfig(oracle=True)


# --- static profiler (Fig. 9a) ---------------------------------------------------------------

NODES = {f"n{i}": 8 for i in range(6)}  # n4 and n5 profile


def test_static_profiler_profiles_only_on_the_last_two_nodes(make_job):
    # nothing on n1..n3 is held: the profiled job could run on any execution node
    policy = UniSchedPolicy(UniSchedConfig(static_profile_nodes=2, isolate_solver=False))
    new = [make_job(f"p{i}", JobClass.BEST_EFFORT, gpus=8, samples=()) for i in range(5)]
    profiled = make_job("done", JobClass.BEST_EFFORT, gpus=8, queued_since=-1.0)
    decision = policy.decide(ClusterSnapshot.of(0.0, NODES, queued=[profiled, *new]))
    where = {launch.job_id: {p.node_id for p in launch.placement} for launch in decision.launch}
    # the profiled job runs on an execution node; the five 2-GPU profilers fit on n4 and n5
    # (four to a node)
    assert len(where.pop("done") & {"n0", "n1", "n2", "n3"}) == 1
    assert sorted(where) == ["p0", "p1", "p2", "p3", "p4"]
    assert set().union(*where.values()) <= {"n4", "n5"}


def test_static_profiler_suspends_a_profiled_job_and_plans_it_off_the_profiling_nodes(
    make_job,
):
    policy = UniSchedPolicy(UniSchedConfig(static_profile_nodes=2, isolate_solver=False))
    running = make_job(
        "p",
        JobClass.BEST_EFFORT,
        gpus=8,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "n5", (0, 1)),),
        lease_expires_at=300.0,
        running_since=0.0,
    )
    decision = policy.decide(ClusterSnapshot.of(300.0, NODES, active=[running]))
    assert [(s.job_id, s.reason) for s in decision.suspend] == [("p", "profiling done")]
    queued = make_job("p", JobClass.BEST_EFFORT, gpus=8, state=JobState.SUSPENDED)
    again = policy.decide(ClusterSnapshot.of(600.0, NODES, queued=[queued]))
    [launch] = again.launch
    assert {q.node_id for q in launch.placement} <= {"n0", "n1", "n2", "n3"}


def test_static_profiler_in_the_simulator_runs_jobs_on_two_nodes_of_three(sim):
    # a third of three nodes profiles: n002; the three 8-GPU jobs then share n000 and n001
    jobs = [TraceJob(f"b{i}", "u", 0.0, 1000.0, 8) for i in range(3)]
    unified = sim.run("unisched", jobs, ClusterShape(3, 8))["records"]
    static = sim.run("unisched-static-profiler", jobs, ClusterShape(3, 8))["records"]
    assert max(r.end_s for r in unified.values()) < 1500.0  # all three side by side
    assert max(r.end_s for r in static.values()) > 2000.0  # the third after the first two


def test_static_profiler_sets_nothing_aside_on_two_nodes(make_job):
    policy = UniSchedPolicy(UniSchedConfig(static_profile_nodes=2, isolate_solver=False))
    new = make_job("p", JobClass.BEST_EFFORT, gpus=16, samples=())
    decision = policy.decide(ClusterSnapshot.of(0.0, {"a": 8, "b": 8}, queued=[new]))
    [launch] = decision.launch  # profiled across both nodes, as unified profiling does
    assert {p.node_id for p in launch.placement} == {"a", "b"}


# --- feasibility-only objective (Fig. 10b) ---------------------------------------------------


def _contended() -> MilpProblem:
    # two best-effort jobs compete for one 8-GPU cell: the optimum takes the better one
    jobs = tuple(
        MilpJob(f"j{i}", 8, (Option((0, 0, 0, 1), (), reward),))
        for i, reward in enumerate((0.1, 0.5))
    )
    return MilpProblem(jobs=jobs, free_cells=(0, 0, 0, 1), total_gpus=8, horizon=2)


def test_feasibility_only_accepts_a_solution_no_better_than_the_optimum():
    from dataclasses import replace

    best = solve(_contended())
    first = solve(replace(_contended(), first_feasible=True))
    assert best is not None and first is not None
    assert best.run_now == {"j1": 0} and best.objective == pytest.approx(0.5)
    assert len(first.run_now) <= 1 and first.objective <= best.objective + 1e-9


def test_the_feasible_ablation_asks_the_solver_for_its_first_solution(make_job, monkeypatch):
    import controller.policy.unisched.policy as module

    asked: list[bool] = []

    def spy(problem, *args):
        asked.append(problem.first_feasible)
        return solve(problem, *args)

    monkeypatch.setattr(module, "solve", spy)
    policy = UniSchedPolicy(UniSchedConfig(objective="feasible", isolate_solver=False))
    queued = [make_job(f"s{i}", gpus=8) for i in range(3)]
    policy.decide(ClusterSnapshot.of(0.0, {"a": 8, "b": 8}, queued=queued))
    assert asked == [True]
