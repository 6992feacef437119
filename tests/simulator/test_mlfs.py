"""The simulator's MLFS support: server load and overload slowdown, migrations, early stops,
losses, cross-server traffic, the MLFS metrics and workload. Every number is worked out by hand
in the comments."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    Launch,
    Migrate,
    Renew,
    Stop,
    Suspend,
)
from controller.policy.retreat import NO_HOST, keep_off
from mlsched.model import Deadline, MlfsSpec, StopOption
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics, mlfs_metrics
from simulator.types import JobRecord, ResourceDemand, SimResult, TraceJob
from simulator.workload import (
    BANDWIDTH_RANGE,
    COMM_MB_RANGE,
    CPU_RANGE,
    GPU_UTIL_RANGE,
    MEMORY_RANGE,
    assign_mlfs_features,
    partition_graph,
)

CHECKED = SimConfig(lease_s=300.0, cycle_s=60.0, check_invariants=True)
TWO_NODES = ClusterShape(2, 8)


class LinearModel:
    """Speed 1 on one node, 0.5 across nodes; suspend 4 s, resume 20 s; accuracy
    ``0.5 + 0.4 * f`` after a fraction ``f`` of the work."""

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        return 1.0 if nodes == 1 else 0.5

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        return 1.0, 1.0

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        return 4.0

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        return 20.0

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        return 0.5 + 0.4 * min(1.0, max(0.0, fraction))


def demand(cpu: float = 0.05, gpu: float = 0.5, ring_mb: float = 0.0, pipe: float = 0.0):  # type: ignore[no-untyped-def]
    return ResourceDemand(gpu, cpu, 0.05, 0.05, ring_mb, pipe)


def job(job_id: str, gpus: int, duration: float, submit: float = 0.0, **kw: object) -> TraceJob:
    fields: dict = dict(iterations=int(duration), mlfs=MlfsSpec())
    fields.update(kw)
    return TraceJob(job_id, "u", submit, duration, gpus, **fields)


class Recorder:
    """Wraps a policy and keeps every snapshot it is given."""

    def __init__(self, policy) -> None:  # type: ignore[no-untyped-def]
        self.policy = policy
        self.name = getattr(policy, "name", "recorder")
        self.snapshots: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.snapshots.append(snapshot)
        return self.policy.decide(snapshot)


class Scripted:
    """Launches each job on its plan and renews every expired lease; at the first cycle at or
    after ``at`` gives ``order`` (a Migrate or a Stop) once."""

    name = "scripted"

    def __init__(self, plans, at: float, order: Migrate | Stop | None) -> None:  # type: ignore[no-untyped-def]
        self.plans, self.at, self.order = plans, at, order

    def decide(self, s: ClusterSnapshot) -> Decision:
        launch = tuple(Launch(j.id, self.plans[j.id], 300.0) for j in s.queued)
        renew = tuple(Renew(j.id, 300.0) for j in s.expired())
        order, migrate, stop = self.order, (), ()
        if s.now >= self.at and order is not None:
            self.order = None
            migrate = (order,) if isinstance(order, Migrate) else ()
            stop = (order,) if isinstance(order, Stop) else ()
        return Decision(launch=launch, renew=renew, migrate=migrate, stop=stop)


def on(node: str, *gpus: int, rank: int = 0) -> tuple[TaskPlacement, ...]:
    return tuple(TaskPlacement(rank + i, node, (g,)) for i, g in enumerate(gpus))


def run(jobs, policy, shape=TWO_NODES, model=None):  # type: ignore[no-untyped-def]
    sim = Simulation(jobs, policy, shape, model or LinearModel(), CHECKED)
    result = sim.run()
    return result, {r.job.id: r for r in result.records}


# --- load, utilisation, slowdown -----------------------------------------------------------------


def test_an_overloaded_node_slows_its_jobs_by_the_excess() -> None:
    # a (600 s) and b (1200 s), 4 GPUs each at CPU 0.15 per task: the node's CPU load is
    # 8 * 0.15 = 1.2, so both run at 1 / 1.2. a ends at 600 * 1.2 = 720; b has then done 600
    # and runs its last 600 alone at full speed: 1320.
    jobs = [
        job("a", 4, 600, demand=demand(cpu=0.15)),
        job("b", 4, 1200, demand=demand(cpu=0.15)),
    ]
    recorder = Recorder(make_policy("fifo"))
    _, r = run(jobs, recorder, ClusterShape(1, 8))
    assert (r["a"].end_s, r["b"].end_s) == (pytest.approx(720), pytest.approx(1320))
    at_300 = next(s for s in recorder.snapshots if s.now == 300)
    [n0] = at_300.nodes
    # measured shares are capped at the capacity; GPUs run at the jobs' 0.5
    assert n0.utilization == pytest.approx(
        {"gpu": 0.5, "cpu": 1.0, "memory": 0.4, "bandwidth": 0.4}
    )
    assert n0.gpu_utilization == {g: 0.5 for g in range(8)}
    a = next(v for v in at_300.active if v.id == "a")
    assert a.resource_usage == pytest.approx(
        {"gpu": 0.25, "cpu": 0.6, "memory": 0.2, "bandwidth": 0.2}
    )
    assert a.estimated_remaining_s == pytest.approx((600 - 300 / 1.2) * 1.2)  # 420 s


def test_jobs_without_demands_leave_nodes_unmeasured() -> None:
    recorder = Recorder(make_policy("fifo"))
    _, r = run([job("a", 4, 600)], recorder, ClusterShape(1, 8))
    assert r["a"].end_s == 600
    assert all(not n.utilization for s in recorder.snapshots for n in s.nodes)


# --- migrations, stops ----------------------------------------------------------------------------


def test_a_migration_moves_the_job_and_pauses_it_for_suspend_and_resume() -> None:
    # Launched on n000 at 0; moved to n001 at the 300 s boundary with 700 s of work left,
    # paused 4 + 20 s: ends at 324 + 700 = 1024. GPUs held: 2 x 300 + 2 x 724.
    plans = {"j": on("n000", 0, 1)}
    order = Migrate("j", on("n001", 3, 4), 300.0, "test")
    recorder = Recorder(Scripted(plans, 300, order))
    result, r = run([job("j", 2, 1000, demand=demand())], recorder)
    assert r["j"].end_s == pytest.approx(1024)
    assert (r["j"].migrations, r["j"].suspensions) == (1, 0)
    assert r["j"].gpu_s == pytest.approx(2 * 300 + 2 * 724)
    after = next(s for s in recorder.snapshots if s.now > 300)
    [view] = after.active
    assert view.placement == on("n001", 3, 4)
    assert view.sr_overhead_s == 24 and view.attempt == 2
    free = {n.id: n.free_gpu_indices for n in after.nodes}
    assert free == {"n000": tuple(range(8)), "n001": (0, 1, 2, 5, 6, 7)}
    assert result.refused_migrations == 0


def test_a_migration_onto_busy_gpus_is_refused() -> None:
    plans = {"j": on("n000", 0, 1), "x": on("n001", 3)}
    order = Migrate("j", on("n001", 3, 4), 300.0, "test")
    result, r = run([job("j", 2, 1000), job("x", 1, 2000)], Scripted(plans, 300, order))
    assert result.refused_migrations == 1
    assert r["j"].migrations == 0 and r["j"].end_s == 1000


def test_a_migration_may_keep_some_of_the_jobs_own_gpus() -> None:
    plans = {"j": on("n000", 0, 1)}
    order = Migrate("j", (TaskPlacement(0, "n000", (0,)), TaskPlacement(1, "n001", (0,))), 300, "")
    result, r = run([job("j", 2, 1000)], Scripted(plans, 300, order))
    # 700 s left at 300, across two nodes at speed 0.5 after a 24 s pause: 324 + 1400
    assert r["j"].end_s == pytest.approx(1724) and r["j"].nodes_used == 2
    assert result.refused_migrations == 0


def test_a_stop_ends_the_job_completed_at_the_accuracy_reached() -> None:
    # Stopped at 300 of 1000 s: accuracy 0.5 + 0.4 * 0.3 = 0.62; its deadline (500) had not
    # passed, so that is also its accuracy by the deadline.
    deadline = (Deadline(500.0, 100.0),)
    plans = {"j": on("n000", 0)}
    result, r = run(
        [job("j", 1, 1000, deadlines=deadline)], Scripted(plans, 300, Stop("j", "enough"))
    )
    assert r["j"].end_s == 300 and r["j"].stopped
    assert r["j"].final_metric == pytest.approx(0.62)
    assert r["j"].accuracy_by_deadline == pytest.approx(0.62)
    assert compute_metrics(result)["jobs_stopped"] == 1


class StopsThenFills:
    """Stops ``victim`` at the first cycle at or after ``at`` and launches nothing in that
    cycle (as MLF-C decides a stop: planned as if the job still held its GPUs); every other
    cycle launches each queued job on ``plans`` and renews expired leases."""

    name = "stops-then-fills"

    def __init__(self, plans, at: float, victim: str) -> None:  # type: ignore[no-untyped-def]
        self.plans, self.at, self.victim = plans, at, victim

    def decide(self, s: ClusterSnapshot) -> Decision:
        renew = tuple(Renew(j.id, 300.0) for j in s.expired())
        if self.victim and s.now >= self.at:
            stop, self.victim = (Stop(self.victim, "enough"),), ""
            return Decision(renew=renew, stop=stop)
        launch = tuple(Launch(j.id, self.plans[j.id], 300.0) for j in s.queued)
        return Decision(launch=launch, renew=renew)


def test_gpus_freed_by_a_stop_get_a_cycle_as_an_end_does() -> None:
    # One GPU: a runs from 0; b (100 s) arrives at 10 with no GPU free (no cycle). The lease
    # boundary at 300 stops a. Its GPU is free at once, so, as after a completion, a cycle
    # follows one cycle gap later (360), not at the next boundary (600): b ends at 460.
    plans = {"a": on("n000", 0), "b": on("n000", 0)}
    jobs = [job("a", 1, 1000), job("b", 1, 100, submit=10.0)]
    _, r = run(jobs, StopsThenFills(plans, 300, "a"), ClusterShape(1, 1))
    assert r["a"].end_s == 300 and r["a"].stopped
    assert r["b"].end_s == pytest.approx(460)


# --- accuracy by the deadline, losses, traffic ------------------------------------------------


def test_accuracy_is_taken_at_the_deadline_when_the_job_runs_past_it() -> None:
    # One 8-GPU node: a runs 0-1000 (no deadline: its final 0.9); b waits until 1000 and has
    # done 500 of 1000 s at its deadline 1500: 0.5 + 0.4 * 0.5 = 0.7; c never starts before
    # its deadline at 800: 0.5.
    jobs = [
        job("a", 8, 1000),
        job("b", 8, 1000, deadlines=(Deadline(1500.0, 1.0),)),
        job("c", 8, 100, submit=1, deadlines=(Deadline(799.0, 1.0),)),
    ]
    _, r = run(jobs, make_policy("fifo"), ClusterShape(1, 8))
    assert r["a"].accuracy_by_deadline == pytest.approx(0.9)
    assert (r["b"].end_s, r["b"].accuracy_by_deadline) == (2000, pytest.approx(0.7))
    assert r["c"].accuracy_by_deadline == pytest.approx(0.5)


def test_views_report_first_previous_and_latest_loss() -> None:
    # 100 iterations in 100 s: at 50 s, 50 done; loss = 1 - (0.5 + 0.4 * i / 100):
    # i = 1: 0.496, i = 49: 0.304, i = 50: 0.3. Accuracy is reported as a metric too.
    recorder = Recorder(make_policy("fifo"))
    config = SimConfig(lease_s=50.0, cycle_s=60.0, check_invariants=True)
    sim = Simulation([job("j", 1, 100)], recorder, ClusterShape(1, 8), LinearModel(), config)
    sim.run()
    at_50 = next(s for s in recorder.snapshots if s.now == 50)
    [view] = at_50.active
    assert view.iteration == 50
    assert view.losses == pytest.approx((0.496, 0.304, 0.3))
    assert view.metrics["accuracy"] == pytest.approx(0.7)  # the history point at iteration 50


def test_traffic_between_servers_is_counted_per_iteration() -> None:
    # 2 tasks on two nodes: both ring edges (0 -> 1, 1 -> 0) cross: 2 * 50 MB, plus the
    # partition edge 0 -> 1: 30 MB; 1000 iterations: 130 GB. On one node: nothing.
    mlfs = MlfsSpec(partitions=(0.5, 0.5), dependencies=((0, 1),))
    spread = job("j", 2, 1000, mlfs=mlfs, demand=demand(ring_mb=50.0, pipe=30.0))
    plans = {"j": (TaskPlacement(0, "n000", (0,)), TaskPlacement(1, "n001", (0,)))}
    result, r = run([spread], Scripted(plans, 1e9, None))
    assert r["j"].bandwidth_gb == pytest.approx(130.0)
    assert compute_metrics(result)["bandwidth_cost_gb"] == pytest.approx(130.0)
    _, r = run([spread], Scripted({"j": on("n000", 0, 1)}, 1e9, None))
    assert r["j"].bandwidth_gb == 0.0


# --- MLF-H end to end ---------------------------------------------------------------------------


def test_mlf_h_moves_tasks_off_a_server_its_unknown_job_overloaded() -> None:
    # a: 8 GPUs at CPU 0.14 per task, unknown to MLF-H until it runs: all on n000 (CPU 1.12).
    # MLF-H then moves tasks to n001 until n000 is within h_r; the job completes.
    jobs = [job("a", 8, 3000, demand=demand(cpu=0.14)), job("b", 2, 600, submit=10)]
    result, r = run(jobs, make_policy("mlf-h"))
    assert r["a"].end_s is not None and r["b"].end_s is not None
    assert r["a"].migrations >= 1 and r["a"].nodes_used == 2
    assert result.refused_migrations == 0 and result.refused_launches == 0


# --- metrics -------------------------------------------------------------------------------------


def test_mlfs_metrics_by_hand() -> None:
    def rec(job_id, end, by_deadline, final, required, deadline=None, gb=0.0):  # type: ignore[no-untyped-def]
        deadlines = () if deadline is None else (Deadline(deadline, 1.0), Deadline(900.0, 0.5))
        trace = TraceJob(
            job_id,
            "u",
            0.0,
            100.0,
            1,
            deadlines=deadlines,
            mlfs=MlfsSpec(required_accuracy=required),
            demand=demand(),
        )
        return JobRecord(
            trace, 0.0, end, accuracy_by_deadline=by_deadline, final_metric=final, bandwidth_gb=gb
        )

    records = [
        rec("a", 100.0, 0.7, 0.8, 0.75, deadline=150.0, gb=1.5),  # met deadline, accuracy ok
        rec("b", 400.0, 0.6, 0.9, 0.95, deadline=300.0),  # missed the deadline and the target
        rec("c", None, 0.5, None, 0.4, gb=2.0),  # never finished: target not reached
        rec("d", 50.0, 0.8, 0.8, None, deadline=50.0),  # no requirement; deadline met exactly
    ]
    records[3].migrations = 2
    records[0].resumed_elsewhere = 3
    records[1].stopped = True
    records[1].overload_retreats = 2
    result = SimResult("p", 8, records, refused_migrations=1)
    assert mlfs_metrics(result) == pytest.approx(
        {
            "accuracy_by_deadline": (0.7 + 0.6 + 0.5 + 0.8) / 4,
            "accuracy_guarantee_ratio": 1 / 3,  # a of a, b, c
            "deadline_guarantee_ratio": 2 / 3,  # a, d of a, b, d (earliest deadlines)
            "bandwidth_cost_gb": 3.5,
            "migrations_per_job": 0.5,
            "resumed_elsewhere_per_job": 0.75,  # 3 over 4 jobs
            "jobs_stopped": 1,
            "overload_retreats": 2,
            "refused_migrations": 1,
        }
    )
    plain = SimResult("p", 8, [JobRecord(TraceJob("x", "u", 0.0, 1.0, 1), 0.0, 1.0)])
    metrics = mlfs_metrics(plain)
    assert metrics["accuracy_guarantee_ratio"] is None
    assert metrics["deadline_guarantee_ratio"] is None
    assert metrics["bandwidth_cost_gb"] is None and metrics["accuracy_by_deadline"] is None


# --- workload ------------------------------------------------------------------------------------


def test_partition_graph_shapes() -> None:
    sizes, chain = partition_graph(4, "chain", random.Random(1))
    assert chain == ((0, 1), (1, 2), (2, 3)) and sum(sizes) == pytest.approx(1.0)
    _, layered = partition_graph(5, "layered", random.Random(1))
    # layers (0 1) (2 3) (4): every partition feeds every one of the next layer
    assert layered == ((0, 2), (0, 3), (1, 2), (1, 3), (2, 4), (3, 4))
    with pytest.raises(ValueError):
        partition_graph(3, "ring", random.Random(1))


def test_mlfs_features_are_drawn_deterministically_within_their_ranges() -> None:
    jobs = [TraceJob(f"j{i}", "u", float(i), 100.0, (1, 2, 4, 8)[i % 4]) for i in range(400)]
    first = assign_mlfs_features(jobs, random.Random(5), accuracy_at=lambda j, f: f)
    assert first == assign_mlfs_features(jobs, random.Random(5), accuracy_at=lambda j, f: f)
    assert jobs[0].mlfs is None  # the input is not changed
    shapes = Counter()
    for j in first:
        assert j.mlfs is not None and j.demand is not None
        assert j.mlfs.urgency in range(1, 11)
        assert j.mlfs.stop_option is StopOption.OPT_STOP and j.mlfs.system_may_switch
        assert 0.7 <= j.mlfs.required_accuracy <= 1.0
        for value, (lo, hi) in (
            (j.demand.gpu, GPU_UTIL_RANGE),
            (j.demand.cpu, CPU_RANGE),
            (j.demand.memory, MEMORY_RANGE),
            (j.demand.bandwidth, BANDWIDTH_RANGE),
            (j.demand.ring_mb, COMM_MB_RANGE),
            (j.demand.pipeline_mb, COMM_MB_RANGE),
        ):
            assert lo <= value <= hi
        if j.gpus == 1:
            assert j.mlfs.partitions == ()
        elif j.mlfs.partitions:
            assert len(j.mlfs.partitions) == j.gpus
            shapes["chain" if len(j.mlfs.dependencies) == j.gpus - 1 else "layered"] += 1
        else:
            shapes["data"] += 1
    # 300 multi-GPU jobs: about 80 % model parallel, half of them chains (2-GPU graphs are both)
    assert 0.7 < (shapes["chain"] + shapes["layered"]) / 300 < 0.9
    assert shapes["layered"] > 50
    none = assign_mlfs_features(jobs[:3], random.Random(5))
    assert all(j.mlfs is not None and j.mlfs.required_accuracy is None for j in none)
    assert [j.id for j in none] == ["j0", "j1", "j2"]
    assert replace(none[0], mlfs=None, demand=None) == jobs[0]


# --- overload retreats (docs/overload.md, *No ping-pong*) ----------------------------------------


class SendsBack:
    """Wants every queued job on n000 (``a`` on GPU 0, ``b`` on GPU 1) and, once ``b`` runs at
    300 s or later, sends it back to the queue with the no-host answer; its cycle goes through
    :func:`keep_off` as every policy's does. Keeps the retreats it sees on queued jobs."""

    name = "sends-back"

    def __init__(self) -> None:
        self.sent = False
        self.retreats: list[tuple[float, object]] = []

    def decide(self, s: ClusterSnapshot) -> Decision:
        return keep_off(self._decide, s, 0.9)

    def _decide(self, s: ClusterSnapshot) -> Decision:
        self.retreats += [(s.now, v.overload_retreat) for v in s.queued if v.overload_retreat]
        launch = tuple(Launch(v.id, on("n000", 0 if v.id == "a" else 1), 300.0) for v in s.queued)
        renew = tuple(Renew(v.id, 300.0) for v in s.expired())
        suspend = ()
        if not self.sent and s.now >= 300 and any(v.id == "b" for v in s.active):
            self.sent, suspend = True, (Suspend("b", NO_HOST),)
        return Decision(launch=launch, renew=renew, suspend=suspend)


def test_a_job_sent_back_by_an_overload_is_kept_off_the_node_it_left() -> None:
    # a holds memory 0.5 of n000, b 0.6: together 1.1 > h_r 0.9. b is sent back at 300 s and
    # released 4 s later; the simulator records its retreat as the controller does: n000, its
    # per-task load there (memory 0.6) and the time. Asked onto n000 again, where a's 0.5 +
    # b's 0.6 = 1.1 > 0.9, keep_off places it on n001 instead, and the launch clears the mark.
    def loaded(memory: float) -> ResourceDemand:
        return ResourceDemand(0.5, 0.05, memory, 0.05)

    policy = SendsBack()
    jobs = [job("a", 1, 5000, demand=loaded(0.5)), job("b", 1, 1000, demand=loaded(0.6))]
    result, r = run(jobs, policy, ClusterShape(2, 2))
    (at, retreat), *_ = policy.retreats
    assert retreat.nodes == ("n000",) and retreat.at == 300
    assert retreat.demand["n000"]["memory"] == pytest.approx(0.6)
    assert r["b"].overload_retreats == 1 and r["b"].suspensions == 1
    assert r["b"].resumed_elsewhere == 1  # on n001, not back on n000
    assert mlfs_metrics(result)["overload_retreats"] == 1
    assert all(when == at for when, _ in policy.retreats)  # cleared by the launch
