"""The node's load and the overload detector (MLFS §3.3.2-3.3.3), with injected samples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from nodeagent_testkit import FakeClock, launch_message, wait_until, workdir_of

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import Server, TaskLoad, choose_migrations
from nodeagent.model import GpuMetrics, NodeMetrics, RunningTask, TaskMetrics, TaskRef
from nodeagent.overload import (
    RESOURCES,
    Capacity,
    NodeLoadReport,
    OverloadDetector,
    OverloadSettings,
    TaskShare,
    measure_load,
)

GIB = 1 << 30


def node_metrics(
    cpu_percent: float = 0.0,
    memory_used: int = 0,
    rx: float = 0.0,
    tx: float = 0.0,
    gpus: tuple[GpuMetrics, ...] = (),
) -> NodeMetrics:
    return NodeMetrics(1.0, cpu_percent, memory_used, 64 * GIB, rx, tx, gpus)


def virtual(*indices: int) -> tuple[GpuMetrics, ...]:
    return tuple(GpuMetrics(i, 100.0, 0, 0, True) for i in indices)


def running(job: str, *gpus: int, launched_at: float = 0.0, movable: bool = True):
    return RunningTask(TaskRef(job, 0, 1), 100, tuple(gpus), launched_at, movable)


def usage(job: str, cores: float, rss: int = 0) -> TaskMetrics:
    return TaskMetrics(TaskRef(job, 0, 1), cores * 100.0, rss)


# --- measuring -------------------------------------------------------------------------------


def test_task_scope_on_virtual_gpus_uses_the_cpu_share() -> None:
    capacity = Capacity(cpu_cores=2.0, memory_bytes=8 * GIB, bandwidth_bytes_per_s=1000.0)
    load = measure_load(
        node_metrics(
            cpu_percent=90.0, memory_used=40 * GIB, rx=300.0, tx=100.0, gpus=virtual(0, 1)
        ),
        [
            (running("a", 0), usage("a", 1.5, 2 * GIB)),
            (running("b", 1), usage("b", 0.5, 1 * GIB)),
        ],
        capacity,
        scope="tasks",
        virtual_gpus={0, 1},
        machine_cpus=16,
    )
    # the server is the sum of this agent's tasks, not the machine
    assert load.utilization == pytest.approx(
        {"gpu": 0.5, "cpu": 1.0, "memory": 3 / 8, "bandwidth": 0.4}
    )
    # a virtual slot is as busy as the CPU share of the task holding it
    assert load.gpu_utilization == pytest.approx({0: 0.75, 1: 0.25})
    a, b = load.tasks
    assert a.demand == pytest.approx({"gpu": 0.375, "cpu": 0.75, "memory": 0.25, "bandwidth": 0.2})
    assert (a.gpu_index, a.gpu_utilization) == (0, pytest.approx(0.75))
    # the node's traffic is split equally among its tasks
    assert b.demand["bandwidth"] == pytest.approx(0.2)


def test_machine_scope_with_real_gpus_uses_the_whole_machine_and_nvml() -> None:
    gpus = (GpuMetrics(0, 95.0, 0, 0, False), GpuMetrics(1, 20.0, 0, 0, False))
    load = measure_load(
        node_metrics(cpu_percent=50.0, memory_used=16 * GIB, gpus=gpus),
        [(running("a", 0, 1), usage("a", 1.0, 1 * GIB))],
        Capacity(cpu_cores=4.0, memory_bytes=32 * GIB),
        scope="machine",
        machine_cpus=4,
    )
    assert load.utilization == pytest.approx(
        {"gpu": 0.575, "cpu": 0.5, "memory": 0.5, "bandwidth": 0.0}
    )
    assert load.gpu_utilization == pytest.approx({0: 0.95, 1: 0.2})
    (a,) = load.tasks
    # its share of the server's GPUs; its busiest GPU for the per-GPU rule
    assert a.demand["gpu"] == pytest.approx(0.575)
    assert (a.gpu_index, a.gpu_utilization) == (0, pytest.approx(0.95))
    assert a.demand["bandwidth"] == 0.0  # no link speed known: no bandwidth share


def test_shares_are_capped_and_an_unknown_scope_is_refused() -> None:
    load = measure_load(
        node_metrics(gpus=virtual(0)),
        [(running("a", 0), usage("a", 3.0))],
        Capacity(cpu_cores=1.0, memory_bytes=GIB),
        scope="tasks",
        virtual_gpus={0},
    )
    assert load.utilization["cpu"] == 1.0 and load.gpu_utilization[0] == 1.0
    with pytest.raises(ValueError, match="scope"):
        measure_load(node_metrics(), [], Capacity(1.0, GIB), scope="rack")


# --- detecting ---------------------------------------------------------------------------------


def share(
    job: str,
    gpu: float,
    cpu: float,
    memory: float = 0.1,
    *,
    gpu_index: int = 0,
    priority: float = 0.0,
    movable: bool = True,
) -> TaskShare:
    demand = {"gpu": gpu / 2, "cpu": cpu, "memory": memory, "bandwidth": 0.0}
    return TaskShare(TaskRef(job, 0, 1), demand, gpu_index, gpu, priority, movable, (gpu_index,))


def report(*tasks: TaskShare, gpus: dict[int, float] | None = None) -> NodeLoadReport:
    """A server whose load is the sum of ``tasks`` (2 GPUs)."""
    gpus = gpus if gpus is not None else {0: 0.0, 1: 0.0}
    for t in tasks:
        gpus[t.gpu_index] = min(1.0, gpus[t.gpu_index] + t.gpu_utilization)
    utilization = {r: min(1.0, sum(t.demand[r] for t in tasks)) for r in RESOURCES}
    return NodeLoadReport(utilization, gpus, Capacity(1.0, GIB), tuple(tasks))


def detector(clock: FakeClock | None = None, **settings) -> OverloadDetector:
    return OverloadDetector("node-a", OverloadSettings(**settings), clock or FakeClock())


def euclid_choice(load: NodeLoadReport) -> list[str]:
    """What the pure rule picks on the same numbers."""
    server = Server("node-a", tuple(load.utilization[r] for r in RESOURCES), load.gpu_utilization)
    tasks = [
        TaskLoad(t.ref.job_id, 0, tuple(t.demand[r] for r in RESOURCES), t.gpu_utilization, 0)
        for t in load.tasks
    ]
    return [t.job_id for t in choose_migrations(server, tasks, MlfsConfig())]


def test_a_sustained_cpu_overload_requests_the_euclidean_choice() -> None:
    # cpu 0.95 > h_r: U_o = (gpu min, cpu max, memory min, bandwidth 0). "heavy" is closest.
    load = report(
        share("heavy", gpu=0.3, cpu=0.6, memory=0.1),
        share("light", gpu=0.3, cpu=0.2, memory=0.1, gpu_index=1),
        share("fat", gpu=0.1, cpu=0.15, memory=0.6, gpu_index=1),
    )
    det = detector(samples=3)
    assert det.observe(load) == [] and det.observe(load) == []  # not sustained yet
    (wish,) = det.observe(load)
    assert [wish.ref.job_id] == euclid_choice(load) == ["heavy"]
    assert wish.server_utilization == load.utilization
    assert wish.demand == load.tasks[0].demand
    assert "cpu 0.950 > h_r 0.90" in wish.reason and "3 samples" in wish.reason


def test_hysteresis_one_calm_sample_restarts_the_count() -> None:
    hot = report(share("a", gpu=0.3, cpu=0.7), share("b", gpu=0.3, cpu=0.3, gpu_index=1))
    calm = report(share("a", gpu=0.3, cpu=0.5), share("b", gpu=0.3, cpu=0.3, gpu_index=1))
    det = detector(samples=3)
    for sample in (hot, hot, calm, hot, hot):
        assert det.observe(sample) == []
    assert det.streak == 2
    assert [w.ref.job_id for w in det.observe(hot)] == ["a"]


def test_cool_down_no_second_request_while_pending_and_the_task_counts_as_gone() -> None:
    clock = FakeClock()
    load = report(share("a", gpu=0.3, cpu=0.7), share("b", gpu=0.3, cpu=0.3, gpu_index=1))
    det = detector(clock, samples=1, cooldown_s=30.0)
    (wish,) = det.observe(load)
    det.requested(wish.ref)
    # still overloaded (the controller has not moved it yet): "a" is not asked for again, and
    # without "a" the server is relieved, so "b" is not asked for either
    for _ in range(5):
        clock.advance(5.0)
        assert det.observe(load) == []
    assert det.pending() == {wish.ref}
    clock.advance(6.0)  # 31 s after the request: the cool-down is over
    assert [w.ref for w in det.observe(load)] == [wish.ref]


def test_a_request_not_sent_is_made_again_and_a_departed_task_is_forgotten() -> None:
    load = report(share("a", gpu=0.3, cpu=0.7), share("b", gpu=0.3, cpu=0.3, gpu_index=1))
    det = detector(samples=1)
    assert [w.ref.job_id for w in det.observe(load)] == ["a"]
    assert [w.ref.job_id for w in det.observe(load)] == ["a"]  # requested() never called
    det.requested(TaskRef("a", 0, 1))
    assert det.observe(report(share("b", gpu=0.3, cpu=0.3, gpu_index=1))) == []
    assert det.pending() == frozenset()


def test_hot_gpu_picks_among_the_lowest_priority_share_oldest_attempt_first() -> None:
    # ten tasks on GPU 0 (over h_r); p_s = 0.1 leaves one candidate: the oldest attempt
    tasks = [share(f"t{i}", 0.095, 0.05, 0.01, gpu_index=0, priority=1000.0 + i) for i in range(10)]
    tasks[7] = share("t7", 0.095, 0.05, 0.01, gpu_index=0, priority=10.0)  # launched first
    load = report(*tasks)
    assert load.gpu_utilization[0] > 0.9 and max(load.utilization.values()) <= 0.9
    (wish,) = detector(samples=1).observe(load)
    assert wish.ref.job_id == "t7"
    assert "GPU 0 0.950" in wish.reason


def test_a_gpu_busy_with_its_only_task_is_not_an_overload() -> None:
    # mlsched gives GPUs whole: moving the task would move the load along
    load = report(share("a", gpu=0.97, cpu=0.3), share("b", gpu=0.2, cpu=0.2, gpu_index=1))
    assert load.gpu_utilization[0] > 0.9
    det = detector(samples=1)
    assert det.hot(load) == [] and det.observe(load) == []


def test_tasks_being_suspended_are_not_candidates() -> None:
    load = report(
        share("a", gpu=0.3, cpu=0.7, movable=False), share("b", gpu=0.3, cpu=0.3, gpu_index=1)
    )
    assert [w.ref.job_id for w in detector(samples=1).observe(load)] == ["b"]


def test_disabled_detector_and_parameter_checks() -> None:
    load = report(share("a", gpu=0.3, cpu=0.95))
    assert detector(samples=1, enabled=False).observe(load) == []
    for bad in ({"h_r": 0.0}, {"p_s": 1.5}, {"samples": 0}, {"cooldown_s": -1.0}):
        with pytest.raises(ValueError):
            detector(**bad)


# --- the agent, end to end against a controller peer ------------------------------------------

BURN = r"""
import os, time
open("ready", "w").close()
while not os.path.exists("release"):
    for _ in range(20000):
        pass
"""


def test_agent_reports_its_load_and_asks_to_move_a_cpu_bound_task(
    tmp_path: Path, controller, make_agent
) -> None:
    script = tmp_path / "burn.py"
    script.write_text(BURN)
    make_agent(
        cpu_capacity=0.25,  # one busy process is far above 90% of a quarter core
        load_scope="tasks",
        overload_samples=2,
        migration_cooldown_s=600.0,
    )
    peer = controller.servicer
    peer.wait_for("register")
    launch = launch_message(tmp_path, script, "burner")
    launch.spec.command[:] = [sys.executable, str(script)]
    peer.send(launch=launch)
    try:
        wait_until(lambda: (workdir_of(tmp_path, "burner") / "ready").exists())
        request = peer.wait_for("migration_request", timeout=20.0)
        assert (request.task.job_id, request.task.rank, request.task.attempt) == ("burner", 0, 1)
        assert request.server_utilization["cpu"] > 0.9
        assert request.demand["cpu"] > 0.9
        assert "node-a overloaded" in request.reason
        metrics = peer.wait_for("metrics", lambda m: len(m.load.tasks) == 1)
        assert metrics.load.capacity.cpu_cores == 0.25
        assert set(metrics.load.utilization) == set(RESOURCES)
        assert metrics.load.tasks[0].task.job_id == "burner"
        # one request per task while it is pending
        count = len(peer.messages("migration_request"))
        peer.wait_for("metrics", lambda m: m.node.time > metrics.node.time + 0.5)
        assert len(peer.messages("migration_request")) == count == 1
    finally:
        (workdir_of(tmp_path, "burner") / "release").touch()
