"""The node's load and the overload detector (MLFS §3.3.2-3.3.3), with injected samples."""

from __future__ import annotations

import os
import subprocess
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
    bad_settings = (
        {"h_r": 0.0},
        {"p_s": 1.5},
        {"samples": 0},
        {"cooldown_s": -1.0},
        {"clear_below": 0.95},
    )
    for bad in bad_settings:
        with pytest.raises(ValueError):
            detector(**bad)


def test_after_a_request_no_new_choice_until_what_was_hot_falls_to_the_clear_mark() -> None:
    # h_r 0.9, clear mark 0.8 (h_r - 0.1), 2 samples in a row
    clock = FakeClock()
    det = detector(clock, samples=2, cooldown_s=600.0)
    b = share("b", gpu=0.3, cpu=0.3, gpu_index=1)
    hot = report(share("a", gpu=0.3, cpu=0.7), b)  # cpu 1.0
    assert det.observe(hot) == []
    (wish,) = det.observe(hot)
    assert wish.ref.job_id == "a"
    det.requested(wish.ref)
    assert not det.armed
    # "a" leaves and "c" arrives in the same interval: the cpu reads 0.3 + 0.65 = 0.95, never
    # at or below the mark, so nothing new is chosen however long it stays over h_r
    c = share("c", gpu=0.3, cpu=0.65)
    over_again = report(c, b)
    between = report(share("c", gpu=0.3, cpu=0.55), b)  # 0.85: under h_r, over the mark
    for sample in (over_again, over_again, between, over_again, over_again, over_again):
        clock.advance(5.0)
        assert det.observe(sample) == []
    assert not det.armed
    calm = report(share("c", gpu=0.3, cpu=0.45), b)  # 0.75 <= 0.8: armed again
    assert det.observe(calm) == [] and det.armed
    assert det.observe(over_again) == []  # the count starts again from 0
    assert [w.ref.job_id for w in det.observe(over_again)] == ["c"]


def test_a_task_asked_for_is_asked_again_after_its_cool_down_while_disarmed_never_another() -> None:
    clock = FakeClock()
    det = detector(clock, samples=1, cooldown_s=30.0)
    load = report(share("a", gpu=0.3, cpu=0.7), share("b", gpu=0.3, cpu=0.3, gpu_index=1))
    (wish,) = det.observe(load)
    det.requested(wish.ref)
    clock.advance(31.0)
    (again,) = det.observe(load)  # the request may have been lost: a retry
    assert again.ref == wish.ref and "asked again" in again.reason
    det.requested(again.ref)
    # "a" is gone, and "b" alone is still over h_r: not asked for, the server is disarmed
    hot_b = report(share("b", gpu=0.3, cpu=0.95, gpu_index=1))
    clock.advance(31.0)
    assert det.observe(hot_b) == [] and det.observe(hot_b) == []


# Load that is not mlsched's: a CPU hog and a large foreign resident set beside one idle task.
# Capacity 2 cores and 8 GiB; the machine reads 100% CPU (2 cores) and 7.5 GiB used. The task
# uses 0.02 cores and 100 MiB on virtual slot 0.
HOG_NODE = node_metrics(cpu_percent=100.0, memory_used=7 * GIB + GIB // 2, gpus=virtual(0, 1))
IDLE_TASK = (running("idle", 0), usage("idle", 0.02, 100 << 20))
CAPACITY = Capacity(cpu_cores=2.0, memory_bytes=8 * GIB)


def false_alarms(scope: str | None, samples: int = 20) -> list[str]:
    """Requests made over ``samples`` samples (each one sent), default settings otherwise."""
    clock = FakeClock()
    det = OverloadDetector("node-a", OverloadSettings(), clock)
    scope_kw = {} if scope is None else {"scope": scope}
    asked = []
    for _ in range(samples):
        load = measure_load(
            HOG_NODE, [IDLE_TASK], CAPACITY, virtual_gpus=(0, 1), machine_cpus=2, **scope_kw
        )
        for wish in det.observe(load):
            det.requested(wish.ref)
            asked.append(f"{wish.ref.job_id} cpu {wish.demand['cpu']:.2f}")
        clock.advance(5.0)
    return asked


def test_default_scope_a_cpu_hog_beside_an_idle_task_raises_no_request() -> None:
    load = measure_load(HOG_NODE, [IDLE_TASK], CAPACITY, virtual_gpus=(0, 1), machine_cpus=2)
    # only the task counts: cpu 0.02 / 2 = 0.01, memory 100 MiB / 8 GiB = 0.0122, the slot
    # it holds 0.01 (its cpu share), the server's gpu the mean over 2 slots = 0.005
    assert load.utilization["cpu"] == pytest.approx(0.01)
    assert load.utilization["memory"] == pytest.approx(100 / 8192)
    assert load.utilization["gpu"] == pytest.approx(0.005)
    assert false_alarms(None) == []
    # the machine scope, asked for explicitly, counts the hog (cpu 1.0, memory 0.9375): over
    # the 100 s of samples it asks to move the idle task, whose own demand is 0.01 (the alarm
    # issue 10 reported), at the 3rd sample (10 s) and again after the 60 s cool-down (70 s)
    assert false_alarms("machine") == ["idle cpu 0.01"] * 2


def test_default_scope_counts_a_real_gpu_only_when_a_task_holds_it() -> None:
    gpus = tuple(GpuMetrics(i, 100.0 if i == 1 else 40.0, 0, 0, False) for i in (0, 1))
    node = node_metrics(gpus=gpus)  # GPU 1 busy with a process that is not mlsched's
    load = measure_load(node, [IDLE_TASK], CAPACITY, machine_cpus=2)
    assert load.utilization["gpu"] == pytest.approx(0.4 / 2)
    machine = measure_load(node, [IDLE_TASK], CAPACITY, scope="machine", machine_cpus=2)
    assert machine.utilization["gpu"] == pytest.approx(1.4 / 2)


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


HOG = "while True:\n    pass\n"
QUIET_REPORTS = 20  # metrics reports with the task running: 4 s at 0.2 s, > 3 x --overload-samples


def test_agent_with_defaults_beside_cpu_hogs_raises_no_request(
    tmp_path: Path, controller, make_agent, task_script: Path
) -> None:
    """One busy-loop process per CPU beside an agent that runs one idle task, with the default
    load settings (only the interval is the test kit's): not one request."""
    make_agent()
    peer = controller.servicer
    peer.wait_for("register")
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 1)]
    try:
        peer.send(launch=launch_message(tmp_path, task_script, "idle", "wait"))
        wait_until(lambda: (workdir_of(tmp_path, "idle") / "ready").exists())
        first = peer.wait_for("metrics", lambda m: len(m.load.tasks) == 1)
        last = peer.wait_for(
            "metrics",
            lambda m: (
                len(m.load.tasks) == 1 and m.node.time >= first.node.time + QUIET_REPORTS * 0.2
            ),
            timeout=60.0,
        )
        reports = [
            m for m in peer.messages("metrics") if first.node.time <= m.node.time <= last.node.time
        ]
        assert len(reports) >= QUIET_REPORTS / 2
        assert peer.messages("migration_request") == []
        assert all(m.load.utilization["cpu"] < 0.5 for m in reports)  # the idle task's share
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        (workdir_of(tmp_path, "idle") / "release").touch()
