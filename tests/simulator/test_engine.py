"""The engine on tiny hand-written traces; every JCT below is worked out by hand."""

from __future__ import annotations

import itertools
import random

import pytest

from controller.placement import TaskPlacement, place_job, without
from controller.policy import available_policies, make_policy
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from mlsched.model import (
    Deadline,
    IterationStop,
    JobClass,
    JobState,
    MetricGoal,
    SpeedSample,
    TargetMetricStop,
)
from simulator.engine import ClusterShape, InvariantViolation, SimConfig, Simulation
from simulator.jobmodel import TraceJobModel
from simulator.metrics import busy_gpu_seconds
from simulator.types import SimResult, TraceJob


class FlatModel:
    """Speed 1 on one node, ``spread_speed`` across nodes; fixed overheads."""

    def __init__(
        self, spread_speed: float = 0.5, suspend_s: float = 0.0, resume_s: float = 0.0
    ) -> None:
        self.spread_speed = spread_speed
        self._suspend_s = suspend_s
        self._resume_s = resume_s

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        return 1.0 if nodes == 1 else self.spread_speed

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        return (1.0, 1.0) if nodes == 1 else (1.0 / self.spread_speed, 1.0)

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        return self._suspend_s

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        return self._resume_s

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        return None


CHECKED = SimConfig(lease_s=300.0, cycle_s=60.0, check_invariants=True)


ONE_NODE = ClusterShape(1, 8)


def run(jobs, policy="fifo", shape=ONE_NODE, model=None, config=CHECKED):
    sim = Simulation(jobs, make_policy(policy), shape, model or FlatModel(), config)
    return {r.job.id: r for r in sim.run().records}


def test_fifo_runs_jobs_in_submission_order_without_preemption():
    jobs = [
        TraceJob("a", "u", 0, 600, 8),
        TraceJob("b", "u", 10, 300, 8),
        TraceJob("c", "u", 20, 100, 4),
    ]
    r = run(jobs)
    # a 0-600; b waits for a (600-900); c waits behind b (strict FIFO) and runs 900-1000.
    assert [(r[j].first_start_s, r[j].end_s) for j in "abc"] == [(0, 600), (600, 900), (900, 1000)]
    assert [r[j].jct_s for j in "abc"] == [600, 890, 980]
    assert all(x.suspensions == 0 for x in r.values())


def test_fifo_lease_suspends_at_the_lease_boundary_and_conserves_progress():
    jobs = [TraceJob("a", "u", 0, 600, 8), TraceJob("b", "u", 10, 300, 8)]
    r = run(jobs, "fifo-lease", model=FlatModel(suspend_s=4, resume_s=20))
    # a runs 0-300 (300 s of work done), yields at the boundary; its GPUs are free at 304;
    # the release triggers a cycle one cycle gap after the boundary cycle: 360. b runs
    # 360-660; at 600 b's lease expires but a (queued since 304) waits: b is suspended?
    # No: b's lease was granted at 360 and expires at 660 = its end. a resumes at 660 with a
    # 20 s restore and its remaining 300 s: 660 + 20 + 300 = 980.
    assert (r["a"].first_start_s, r["a"].end_s, r["a"].suspensions) == (0, 980, 1)
    assert (r["b"].first_start_s, r["b"].end_s, r["b"].suspensions) == (360, 660, 0)


def test_spanning_placement_runs_at_the_models_spread_speed():
    # Two 8-GPU nodes each keep 2 GPUs free: a 4-GPU job must span both, at half speed.
    jobs = [
        TraceJob("x", "u", 0, 1000, 6),
        TraceJob("y", "u", 0, 1000, 6),
        TraceJob("w", "u", 1, 200, 4),
    ]
    r = run(jobs, shape=ClusterShape(2, 8))
    # w arrives at 1; the triggered cycle is one cycle gap (60 s) after the one at 0.
    assert (r["w"].first_start_s, r["w"].end_s, r["w"].nodes_used) == (60, 460, 2)


def test_release_triggers_a_cycle_one_gap_after_the_previous_one():
    jobs = [
        TraceJob("x", "u", 0, 1000, 4),
        TraceJob("y", "u", 0, 1000, 4),
        TraceJob("z", "u", 0, 100, 4),
        TraceJob("w", "u", 1, 200, 8),
    ]
    r = run(jobs, shape=ClusterShape(2, 8))
    # x, y pack n000 (best fit), z takes n001; w (8) waits for z's end at 100. The cycle
    # that end triggers comes 60 s after the previous cycle (at 60, for w's arrival): 120.
    assert (r["w"].first_start_s, r["w"].end_s, r["w"].nodes_used) == (120, 320, 1)


def test_job_larger_than_the_cluster_never_runs_and_the_rest_finish():
    jobs = [TraceJob("huge", "u", 0, 10, 16), TraceJob("ok", "u", 5, 10, 8)]
    r = run(jobs)
    assert r["huge"].end_s is None and r["huge"].first_start_s is None
    assert r["ok"].end_s == 70  # arrives at 5, triggered cycle at 60, runs 10 s


def test_gpu_seconds_and_utilization_are_accounted():
    jobs = [TraceJob("a", "u", 0, 300, 2), TraceJob("b", "u", 0, 600, 4)]
    sim = Simulation(jobs, make_policy("fifo"), ClusterShape(1, 8), FlatModel(), CHECKED)
    result = sim.run()
    records = {r.job.id: r for r in result.records}
    assert records["a"].gpu_s == 600 and records["b"].gpu_s == 2400
    assert result.utilization == [(0.0, 6), (300.0, 4), (600.0, 0)]
    assert result.makespan_s == 600
    assert result.decision_times_s


@pytest.mark.parametrize("policy", sorted(available_policies()))
def test_invariants_hold_on_a_random_trace_for_every_policy(policy):
    rng = random.Random(7)
    jobs = []
    for i in range(120):
        cls = rng.choice(list(JobClass))
        duration = rng.choice([60, 300, 900, 3600])
        deadlines = (
            ()
            if cls is JobClass.BEST_EFFORT
            else (Deadline(duration * rng.uniform(1.1, 2.0), 100.0),)
        )
        jobs.append(
            TraceJob(
                f"j{i}",
                f"u{i % 5}",
                rng.uniform(0, 20000),
                duration,
                rng.choice([1, 2, 4, 8, 16]),
                job_class=cls,
                deadlines=deadlines,
            )
        )
    model = FlatModel(spread_speed=0.7, suspend_s=4, resume_s=15)
    chosen = make_policy(policy)
    if policy == "pollux":
        # Its genetic search (48 allocations x 24 generations a round) took over a minute
        # here and never touches the rules checked; a shorter search decides the same kinds
        # of launches, resizes and suspensions.
        chosen.generations = 3
    sim = Simulation(jobs, chosen, ClusterShape(4, 8), model, CHECKED)
    result = sim.run()  # check_invariants: raises InvariantViolation on any broken rule
    for record in result.records:
        assert record.end_s is not None, f"{policy}: {record.job.id} never ended"
        assert record.first_start_s >= record.job.submit_s
        # progress conserved: held time covers the work at the slowest speed plus overheads
        assert record.end_s - record.first_start_s >= record.job.duration_s - 1e-6
    times = [t for t, _ in result.utilization]
    assert times == sorted(times)


def test_time_never_goes_backwards_is_enforced():
    sim = Simulation([], make_policy("fifo"), ClusterShape(1, 8), FlatModel(), CHECKED)
    sim._advance(10.0)
    with pytest.raises(InvariantViolation):
        sim._advance(5.0)


def test_fast_job_views_equal_regular_ones():
    from simulator import engine

    jobs = [TraceJob("a", "u", 0, 600, 8, model="m")]
    sim = Simulation(jobs, make_policy("fifo"), ONE_NODE, FlatModel(), CHECKED)
    job = sim._jobs[0]
    view = sim._view(job)
    assert set(view.__dict__) == engine._VIEW_FIELDS
    assert view == engine.JobView(**view.__dict__)
    with pytest.raises(AttributeError):
        view.id = "b"  # still frozen


# --- Resized launches and observations ---------------------------------------------------------


class LinearModel:
    """Speed proportional to the GPUs held (half across nodes), Eq. 2-like iteration times,
    suspend 4 s, resume ``100 + gpus`` s. A performance-based job stops at 80 % of its duration;
    its accuracy after a fraction ``f`` of the full duration is ``f / 2``."""

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s * (0.8 if job.performance_based else 1.0)

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        return gpus / job.gpus * (1.0 if nodes == 1 else 0.5)

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        return 0.5 + 0.1 * (gpus - 1) * (1 if nodes == 1 else 3), 0.5

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        return 4.0

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        return 100.0 + gpus

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        return 0.4 * fraction if job.performance_based else None


Plan = tuple[tuple[str, tuple[int, ...]], ...]  # (node, GPU indices) per node


class ScriptedPolicy:
    """A test policy that reads only its snapshot. Launch ``i`` of a job (``i`` = its attempts
    so far) uses ``plans[job][i]`` (the last plan for later ones) when those GPUs are free; the
    job's attempt ``k`` is suspended at the first cycle at or after ``suspend[job][k - 1]``;
    every other expired lease is renewed. Keeps every snapshot it is given."""

    name = "scripted"

    def __init__(
        self, plans: dict[str, list[Plan]], suspend: dict[str, tuple[float, ...]] | None = None
    ) -> None:
        self.plans = plans
        self.suspend = suspend or {}
        self.snapshots: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.snapshots.append(snapshot)
        lease = snapshot.default_lease_s
        free = snapshot.free_gpus()
        launches = []
        for job in snapshot.queued:
            plans = self.plans[job.id]
            plan = plans[min(job.attempt, len(plans) - 1)]
            if all(set(gpus) <= set(free[node]) for node, gpus in plan):
                placement = tuple(
                    TaskPlacement(rank, node, (gpu,))
                    for rank, (node, gpu) in enumerate((n, g) for n, gs in plan for g in gs)
                )
                launches.append(Launch(job.id, placement, lease))
                free = without(free, placement)
        suspends = tuple(
            Suspend(job.id, "scripted")
            for job in snapshot.active
            if job.attempt <= len(self.suspend.get(job.id, ()))
            and snapshot.now >= self.suspend[job.id][job.attempt - 1]
        )
        gone = {s.job_id for s in suspends}
        renewals = tuple(Renew(j.id, lease) for j in snapshot.expired() if j.id not in gone)
        return Decision(launch=tuple(launches), renew=renewals, suspend=suspends)

    def view(self, now: float, job_id: str) -> JobView:
        """The job as the snapshot of the cycle at ``now`` showed it."""
        for snapshot in self.snapshots:
            if snapshot.now == pytest.approx(now):
                for view in (*snapshot.queued, *snapshot.active, *snapshot.busy):
                    if view.id == job_id:
                        return view
        raise KeyError((now, job_id))


def simulate(jobs, policy, model, shape=ONE_NODE) -> tuple[SimResult, dict]:
    result = Simulation(jobs, policy, shape, model, CHECKED).run()
    return result, {r.job.id: r for r in result.records}


def test_a_job_on_two_of_its_six_gpus_runs_at_the_models_speed_and_holds_two():
    model = TraceJobModel(None)  # T1 = 0.075, T2 = 0.12
    policy = ScriptedPolicy({"a": [(("n000", (0, 1)),)], "b": [(("n000", (2,)), ("n001", (0,)))]})
    jobs = [TraceJob("a", "u", 0, 1000, 6), TraceJob("b", "u", 0, 1000, 6)]
    result, r = simulate(jobs, policy, model, ClusterShape(2, 8))
    # Eq. 2, fixed global batch: speed(g, n) = (1 + 5 T1) / (6 / g + (g - 1) T(n))
    one_node = 1.375 / (3 + 0.075)
    two_nodes = 1.375 / (3 + 0.12)
    assert model.speed(jobs[0], 2, 1) == pytest.approx(one_node)
    end_a, end_b = 1000 / one_node, 1000 / two_nodes
    assert (r["a"].end_s, r["b"].end_s) == (pytest.approx(end_a), pytest.approx(end_b))
    assert (r["a"].nodes_used, r["b"].nodes_used) == (1, 2)
    assert r["a"].gpu_s == pytest.approx(2 * end_a)
    assert r["b"].gpu_s == pytest.approx(2 * end_b)
    assert [busy for _, busy in result.utilization] == [4, 2, 0]
    view = policy.view(300, "a")
    assert len(view.placement) == 2 and view.gpus == 6  # the request is unchanged
    assert view.attained_gpu_s == pytest.approx(600)
    assert view.estimated_remaining_s == pytest.approx((1000 - 300 * one_node) / one_node)
    free = {n.id: n.free_gpu_indices for n in policy.snapshots[1].nodes}
    assert free == {"n000": (3, 4, 5, 6, 7), "n001": (1, 2, 3, 4, 5, 6, 7)}
    assert result.refused_launches == 0


def test_launches_beyond_the_request_or_malformed_are_refused_and_counted():
    class Wrong:
        name = "wrong"

        def decide(self, snapshot: ClusterSnapshot) -> Decision:
            if not snapshot.queued:
                return Decision()
            job = snapshot.queued[0]
            bad = (
                (TaskPlacement(0, "n000", (0, 1, 2)),),  # 3 GPUs for a 2-GPU job
                (TaskPlacement(0, "n000", (0,)), TaskPlacement(1, "n000", (0,))),  # twice
                (TaskPlacement(0, "n009", (0,)),),  # no such node
                (TaskPlacement(0, "n000", ()),),  # an empty task
                (),  # no GPU at all
            )
            good = (TaskPlacement(0, "n000", (5,)),)  # 1 GPU of 2: allowed
            launches = [Launch(job.id, p, 300.0) for p in (*bad, good, good)]  # twice
            return Decision(launch=(*launches, Launch("nobody", good, 300.0)))

    result, r = simulate([TraceJob("a", "u", 0, 100, 2)], Wrong(), LinearModel())
    assert result.refused_launches == 7  # five bad ones, the repeat, the unknown job
    assert (r["a"].first_start_s, r["a"].end_s, r["a"].gpu_s) == (0, 200, 200)  # half speed


def test_observations_speed_samples_and_suspend_resume_overhead():
    plans = {
        "a": [(("n000", (0, 1)),), (("n000", (0, 1, 2, 3)),), (("n000", (4, 5)),)],
        "z": [(("n000", (7,)),)],
    }
    policy = ScriptedPolicy(plans, suspend={"a": (300, 900)})
    jobs = [TraceJob("a", "u", 0, 1000, 4, iterations=100), TraceJob("z", "u", 361, 10, 1)]
    result, r = simulate(jobs, policy, LinearModel())
    assert result.refused_launches == 0
    # a: 0-300 on 2 GPUs at speed 0.5 (150 work s), suspended (4 s), released at 304; the
    # release cycle at 360 resumes it on 4 GPUs (speed 1) after a 104 s restore: progress from
    # 464. z arrives at 361 and runs at the cycle at 420 (one gap after 360). At 900 a has
    # 150 + 436 = 586 work s and is suspended again; released at 904, resumed at 960 on 2 GPUs
    # (restore 102 s, progress from 1062, speed 0.5): 414 work s left end it at 1890.
    assert (r["a"].end_s, r["a"].suspensions) == (pytest.approx(1890), 2)
    assert r["a"].gpu_s == pytest.approx(2 * 304 + 4 * (904 - 360) + 2 * (1890 - 960))
    two = SpeedSample(2, 1, 0.6, 0.5, 1)
    four = SpeedSample(4, 1, 0.8, 0.5, 1)
    expected = {
        # time: (state, speed samples, SR overhead, iteration)
        0: (JobState.PENDING, (), None, 0),
        300: (JobState.RUNNING, (two,), None, 15),  # before the suspension
        360: (JobState.SUSPENDED, (two,), None, 15),
        420: (JobState.RUNNING, (two,), 4 + 104, 15),  # restoring: no progress on 4 GPUs yet
        600: (JobState.RUNNING, (two, four), 108, 28),  # 150 + 136 work s
        900: (JobState.RUNNING, (two, four), 108, 58),
        960: (JobState.SUSPENDED, (two, four), 108, 58),
        1200: (JobState.RUNNING, (SpeedSample(2, 1, 0.6, 0.5, 2), four), (108 + 106) / 2, 65),
    }
    for t, (state, samples, overhead, iteration) in expected.items():
        view = policy.view(t, "a")
        assert (view.state, view.speed_samples, view.iteration) == (state, samples, iteration), t
        assert view.sr_overhead_s == (None if overhead is None else pytest.approx(overhead)), t
        assert view.metric_history == () and dict(view.metrics) == {}
        assert view == JobView(**view.__dict__)
    assert isinstance(policy.view(0, "a").spec.stopping, IterationStop)
    assert policy.view(600, "a").attained_gpu_s == pytest.approx(2 * 304 + 4 * 240)


def test_sr_overhead_is_suspend_plus_resume_at_the_resumed_gpu_count():
    model = TraceJobModel(None)
    policy = ScriptedPolicy({"a": [(("n000", (0, 1, 2, 3)),)]}, suspend={"a": (300,)})
    _, r = simulate([TraceJob("a", "u", 0, 1000, 4)], policy, model)
    expected = model.suspend_s(r["a"].job, 4) + model.resume_s(r["a"].job, 4)  # 4 + 21.43
    assert policy.view(600, "a").sr_overhead_s == pytest.approx(expected)
    assert policy.view(360, "a").sr_overhead_s is None  # suspended, not yet resumed
    assert r["a"].end_s == pytest.approx(360 + model.resume_s(r["a"].job, 4) + 700)


def test_a_performance_based_job_shows_its_target_and_accuracy_history():
    policy = ScriptedPolicy({"p": [(("n000", (0, 1)),)]}, suspend={"p": (300,)})
    job = TraceJob("p", "u", 0, 1000, 2, iterations=200, performance_based=True)
    _, r = simulate([job], policy, LinearModel())
    # Works 800 s (stops at 80 %): 0-300, suspended, resumed at 360 with a 102 s restore,
    # progress from 462, 500 s left: ends at 962. History points every 10 iterations (5 % of
    # 200) at 5 work s per iteration, accuracy = iteration / 200 / 2.
    assert r["p"].end_s == pytest.approx(962)
    spec = policy.view(0, "p").spec
    assert spec.stopping == TargetMetricStop("accuracy", 0.4, MetricGoal.MAXIMIZE, 200)
    passed = {0: 0, 300: 6, 360: 6, 600: 8, 900: 14}  # 438 and 738 work s at 600 and 900
    iterations = {0: 0, 300: 60, 360: 60, 600: 87, 900: 147}
    for t, n in passed.items():
        view = policy.view(t, "p")
        assert [i for i, _ in view.metric_history] == [10 * k for k in range(1, n + 1)], t
        assert [v for _, v in view.metric_history] == pytest.approx(
            [k / 40 for k in range(1, n + 1)]
        )
        assert view.iteration == iterations[t]
        assert dict(view.metrics) == ({"accuracy": pytest.approx(n / 40)} if n else {})
    histories = [policy.view(t, "p").metric_history for t in passed]
    for shorter, longer in itertools.pairwise(histories):
        assert longer[: len(shorter)] == shorter  # only grows
    for history in histories:
        steps = [i for i, _ in history]
        assert steps == sorted(set(steps))


def test_history_follows_the_trace_models_learning_curve_over_the_full_duration():
    model = TraceJobModel(None)
    job = TraceJob("p", "u", 0, 3600, 8, iterations=1000, performance_based=True)
    recorder = ScriptedPolicy({"p": [(("n000", tuple(range(8))),)]})
    _, r = simulate([job], recorder, model)
    stop = model.stop_fraction(job)
    assert r["p"].end_s == pytest.approx(3600 * stop)
    last = recorder.snapshots[-2] if len(recorder.snapshots) > 1 else recorder.snapshots[-1]
    view = next(v for v in last.active if v.id == "p")
    assert view.spec.stopping.target == pytest.approx(model.target_metric(job))
    assert view.spec.stopping.max_iterations == 1000
    curve = model.curve(job)
    assert view.metric_history, "some points passed"
    for iteration, accuracy in view.metric_history:
        assert iteration % 50 == 0 and iteration <= stop * 1000
        assert accuracy == pytest.approx(curve(iteration / 1000))
    assert view.iteration == int(last.now / 3600 * 1000)


def test_invariants_hold_with_random_resized_launches():
    class Resizer:
        """Launches queued jobs on a random 1..requested GPUs, suspends random active jobs;
        random from the snapshot's time only."""

        name = "resizer"

        def __init__(self) -> None:
            self.views: list[JobView] = []

        def decide(self, snapshot: ClusterSnapshot) -> Decision:
            self.views.extend((*snapshot.queued, *snapshot.active, *snapshot.busy))
            rng = random.Random(round(snapshot.now * 1000))
            free = snapshot.free_gpus()
            launches = []
            for job in snapshot.queued:
                placement = place_job(free, rng.randint(1, job.gpus), 1)
                if placement is not None:
                    launches.append(Launch(job.id, placement, rng.choice([100.0, 300.0])))
                    free = without(free, placement)
            suspends = tuple(Suspend(j.id, "r") for j in snapshot.active if rng.random() < 0.2)
            gone = {s.job_id for s in suspends}
            renew = tuple(Renew(j.id, 300.0) for j in snapshot.expired() if j.id not in gone)
            return Decision(launch=tuple(launches), renew=renew, suspend=suspends)

    rng = random.Random(11)
    jobs = [
        TraceJob(
            f"j{i}",
            "u",
            rng.uniform(0, 5000),
            rng.choice([60, 600, 1800]),
            rng.choice([1, 2, 4, 8, 12]),
            iterations=rng.choice([100, 1000]),
            performance_based=rng.random() < 0.3,
        )
        for i in range(60)
    ]
    policy = Resizer()
    result, r = simulate(jobs, policy, TraceJobModel(None), ClusterShape(3, 8))
    assert len(r) == 60 and all(rec.end_s is not None for rec in r.values())
    held = sum(rec.gpu_s for rec in r.values())
    assert held == pytest.approx(busy_gpu_seconds(result.utilization, 0, result.makespan_s))
    assert max(busy for _, busy in result.utilization) <= 24

    assert sum(rec.suspensions for rec in r.values()) > 20
    resized = 0
    for view in policy.views:
        shapes = [(x.gpus, x.nodes) for x in view.speed_samples]
        assert len(shapes) == len(set(shapes)) and all(g <= view.gpus for g, _ in shapes)
        assert sum(x.count for x in view.speed_samples) <= view.attempt
        resized += any(g < view.gpus for g, _ in shapes)
        stopping = view.spec.stopping
        budget = getattr(stopping, "max_iterations", getattr(stopping, "iterations", 0))
        assert 0 <= view.iteration <= budget
        steps = [i for i, _ in view.metric_history]
        assert steps == sorted(set(steps)) and all(i <= view.iteration for i in steps)
        assert (view.sr_overhead_s is None) == (view.attempt < 2)
    assert resized > 0
