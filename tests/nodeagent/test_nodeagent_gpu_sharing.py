"""GPU sharing (``--gpu-slices K``): slots, the task environment, the shared GPU's load and the
p_s rule on it (docs/overload.md, "GPU sharing"), checked by hand."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from nodeagent.cli import add_agent_arguments, config_from_args
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.gpus import GpuConfigError, NvmlGpus, SlicedGpus, VirtualGpus, physical_indices
from nodeagent.model import (
    GpuInfo,
    GpuMetrics,
    Launcher,
    LaunchRequest,
    NodeMetrics,
    RunningTask,
    TaskMetrics,
    TaskRef,
)
from nodeagent.overload import (
    Capacity,
    OverloadDetector,
    OverloadSettings,
    measure_load,
    physical_gpus,
    shared_gpus,
)
from nodeagent.taskenv import TaskContext, build_task_env

GIB = 1 << 30

# --- slots ----------------------------------------------------------------------------------


def test_slot_s_is_on_gpu_s_div_k_each_gpu_named_once() -> None:
    assert physical_indices([0, 1, 2, 3], 2) == (0, 1)
    assert physical_indices([3, 2, 5], 2) == (1, 2)  # in the order of their first slot
    assert physical_indices([4, 5], 3) == (1,)
    assert physical_indices([2, 0], 1) == (2, 0)  # K = 1: slots are GPUs


def test_sliced_virtual_gpus_offer_k_virtual_slots_per_gpu() -> None:
    gpus = SlicedGpus(VirtualGpus(2), 3)
    assert [g.index for g in gpus.infos()] == [0, 1, 2, 3, 4, 5]
    assert all(g.virtual and g.name == "virtual" for g in gpus.infos())
    assert gpus.virtual_indices() == {0, 1, 2, 3, 4, 5}
    # slot 4 is held: GPU 1 is busy, and its three slots say so
    assert [(m.index, m.utilization_percent) for m in gpus.metrics({4})] == [
        (0, 0.0),
        (1, 0.0),
        (2, 0.0),
        (3, 100.0),
        (4, 100.0),
        (5, 100.0),
    ]
    with pytest.raises(GpuConfigError):
        SlicedGpus(VirtualGpus(1), 0)


class _Nvml:
    """Two GPUs for NvmlGpus: 80 GiB each, GPU i at 40 + 10 i % and (i + 1) GiB used."""

    NVMLError = RuntimeError

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 * GIB, used=(handle + 1) * GIB)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=40 + 10 * handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=100 + handle, usedGpuMemory=GIB)]


def test_sliced_real_gpus_each_slot_reports_its_gpu() -> None:
    gpus = SlicedGpus(NvmlGpus(_Nvml(), [0, 1]), 2)
    assert gpus.infos() == [
        GpuInfo(0, "NVIDIA H100", False, 80 * GIB),
        GpuInfo(1, "NVIDIA H100", False, 80 * GIB),
        GpuInfo(2, "NVIDIA H100", False, 80 * GIB),
        GpuInfo(3, "NVIDIA H100", False, 80 * GIB),
    ]
    assert gpus.virtual_indices() == frozenset()
    assert gpus.metrics(()) == [
        GpuMetrics(0, 40.0, 1 * GIB, 80 * GIB, False),
        GpuMetrics(1, 40.0, 1 * GIB, 80 * GIB, False),
        GpuMetrics(2, 50.0, 2 * GIB, 80 * GIB, False),
        GpuMetrics(3, 50.0, 2 * GIB, 80 * GIB, False),
    ]
    assert gpus.process_memory() == {100: GIB, 101: GIB}


def test_the_flag_and_its_check() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_agent_arguments(parser)
    args = parser.parse_args(["--controller", "c:1", "--gpus", "1", "--gpu-slices", "4"])
    config = config_from_args(args)
    assert (config.gpus, config.gpu_slices) == (1, 4)
    assert AgentConfig(controller="c:1", node_id="n").gpu_slices == 1  # every GPU whole
    with pytest.raises(ConfigError, match="gpu-slices"):
        AgentConfig(controller="c:1", node_id="n", gpu_slices=0).validate()


# --- the task's environment ---------------------------------------------------------------

CONTEXT = TaskContext(
    token="t",
    agent_addr="127.0.0.1:1",
    agent_addr_file="/s/trainer-address",
    checkpoint_dir="/c/j",
    exit_file="/s/exit.json",
    virtual_gpus=False,
    cpu_count=16,
    node_gpu_slots=8,  # 4 GPUs, 2 slots each
    master_port=29500,
    gpu_slices=2,
)


def launch(*slots: int, launcher: Launcher = Launcher.AGENT) -> LaunchRequest:
    return LaunchRequest(
        TaskRef("j", 0, 1), ("train",), gpu_indices=tuple(slots), launcher=launcher
    )


def test_cuda_visible_devices_names_the_physical_gpus_once() -> None:
    env = build_task_env(launch(3), CONTEXT, {})
    assert env["CUDA_VISIBLE_DEVICES"] == "1"  # slot 3: second slot of GPU 1
    assert env["OMP_NUM_THREADS"] == "2"  # one slot's share of 16 cores over 8 slots
    assert build_task_env(launch(2, 3), CONTEXT, {})["CUDA_VISIBLE_DEVICES"] == "1"
    assert build_task_env(launch(1, 2), CONTEXT, {})["CUDA_VISIBLE_DEVICES"] == "0,1"
    whole = replace(CONTEXT, gpu_slices=1)
    assert build_task_env(launch(2, 3), whole, {})["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_a_torchrun_task_starts_one_process_per_physical_gpu() -> None:
    env = build_task_env(launch(2, 3, launcher=Launcher.TORCHRUN), CONTEXT, {})
    assert (env["CUDA_VISIBLE_DEVICES"], env["PET_NPROC_PER_NODE"]) == ("1", "1")
    assert env["OMP_NUM_THREADS"] == "4"  # two slots' share, one process
    env = build_task_env(launch(1, 2, launcher=Launcher.TORCHRUN), CONTEXT, {})
    assert (env["PET_NPROC_PER_NODE"], env["OMP_NUM_THREADS"]) == ("2", "2")


# --- the shared GPU's load ------------------------------------------------------------------


def node(*gpus: GpuMetrics) -> NodeMetrics:
    return NodeMetrics(1.0, 0.0, 0, 64 * GIB, 0.0, 0.0, gpus)


def virtual_slots(*slots: int) -> tuple[GpuMetrics, ...]:
    return tuple(GpuMetrics(s, 100.0, 0, 0, True) for s in slots)


def task(job: str, *slots: int, cores: float = 0.0) -> tuple[RunningTask, TaskMetrics]:
    ref = TaskRef(job, 0, 1)
    return RunningTask(ref, 100, slots, 0.0, True), TaskMetrics(ref, cores * 100.0, GIB)


def twins(cores_a: float, cores_b: float, slots_b: int, k: int):
    """``a`` on slot 0, ``b`` on slot ``slots_b``; one virtual GPU per ``k`` slots."""
    return measure_load(
        node(*virtual_slots(0, 1)),
        [task("a", 0, cores=cores_a), task("b", slots_b, cores=cores_b)],
        Capacity(cpu_cores=2.0, memory_bytes=16 * GIB),
        virtual_gpus={0, 1},
        priorities={TaskRef("a", 0, 1): 5.0, TaskRef("b", 0, 1): 1.0},
        gpu_slices=k,
    )


def test_a_sliced_virtual_gpu_carries_the_sum_of_its_tasks_shares() -> None:
    # 2 slots of one virtual GPU; CPU capacity 2 cores: a 1.0 core = 0.5, b 0.9 = 0.45
    load = twins(1.0, 0.9, 1, k=2)
    assert physical_gpus(load) == pytest.approx({0: 0.95})
    # on the wire, each slot the controller knows reports its GPU's utilisation
    assert load.gpu_utilization == pytest.approx({0: 0.95, 1: 0.95})
    assert load.utilization["gpu"] == pytest.approx(0.95)  # one physical GPU
    assert load.utilization["cpu"] == pytest.approx(0.95)
    a, b = load.tasks
    assert a.gpu_shares == pytest.approx({0: 0.5}) and b.gpu_shares == pytest.approx({0: 0.45})
    assert (a.demand["gpu"], b.demand["gpu"]) == pytest.approx((0.5, 0.45))
    assert (a.gpu_index, a.gpu_utilization) == (0, pytest.approx(0.95))
    assert (b.gpu_index, b.gpu_utilization) == (1, pytest.approx(0.95))
    assert shared_gpus(load) == pytest.approx({0: 0.95})


def test_whole_gpus_keep_todays_numbers() -> None:
    # the same tasks, K = 1: two virtual GPUs, one task each, none shared
    load = twins(1.0, 0.9, 1, k=1)
    assert load.gpu_utilization == pytest.approx({0: 0.5, 1: 0.45})
    assert load.utilization["gpu"] == pytest.approx(0.475)
    assert [t.demand["gpu"] for t in load.tasks] == pytest.approx([0.25, 0.225])
    assert shared_gpus(load) == {}


def test_a_sliced_real_gpu_is_split_by_the_slots_held() -> None:
    # 2 real GPUs, 2 slots each: GPU 0 at 80 % (slots 0, 1), GPU 1 at 30 % (slots 2, 3)
    gpus = tuple(GpuMetrics(s, 80.0 if s < 2 else 30.0, 0, 0, False) for s in range(4))
    load = measure_load(
        node(*gpus),
        [task("a", 0), task("b", 1, 2)],
        Capacity(cpu_cores=8.0, memory_bytes=16 * GIB),
        gpu_slices=2,
    )
    assert physical_gpus(load) == pytest.approx({0: 0.8, 1: 0.3})
    a, b = load.tasks
    assert a.gpu_shares == pytest.approx({0: 0.4})
    assert b.gpu_shares == pytest.approx({0: 0.4, 1: 0.3})  # alone on GPU 1: all of it
    assert b.demand["gpu"] == pytest.approx(0.35)  # (0.4 + 0.3) over 2 GPUs
    assert load.utilization["gpu"] == pytest.approx(0.55)
    assert (b.gpu_index, b.gpu_utilization) == (1, pytest.approx(0.8))  # its busiest slot
    assert shared_gpus(load) == pytest.approx({0: 0.8})


# --- the p_s rule on a shared GPU -----------------------------------------------------------


def detector() -> OverloadDetector:
    return OverloadDetector("node-a", OverloadSettings(samples=1))


def test_two_tasks_over_h_r_on_one_gpu_the_lower_priority_one_is_named() -> None:
    # one virtual GPU in 2 slots: a 1.2 cores of 2 (0.6), b 0.7 (0.35): GPU 0 at 0.95
    load = twins(1.2, 0.7, 1, k=2)
    det = detector()
    assert det.hot(load) == ["gpu 0.950", "cpu 0.950", "GPU 0 0.950"]
    # gpu and cpu are overloaded: the ideal virtual task is (0.6, 0.6, ...), which is a;
    # b is 0.35 away, so on distance alone a would leave. But GPU 0 is overloaded, so only the
    # lowest-priority p_s = 10 % of its tasks (at least one) is a candidate: b (priority 1 < 5).
    # Taking b's own share (0.35) off leaves GPU 0 at 0.6: one request.
    (wish,) = det.observe(load)
    assert wish.ref == TaskRef("b", 0, 1)
    assert "GPU 0 0.950 > h_r 0.90" in wish.reason
    assert "among the lowest-priority p_s 0.10 of its tasks" in wish.reason


def test_the_same_tasks_on_whole_gpus_leave_the_choice_to_the_distance() -> None:
    # K = 1: a and b on a virtual GPU each (0.6, 0.35), none shared; CPU is over h_r (0.95),
    # every task is a candidate. Ideal (gpu 0.175, cpu 0.6, ...): a is 0.125 away, b 0.25
    # (more than the 0.05 near-tie band apart): a, the closest, leaves.
    load = twins(1.2, 0.7, 1, k=1)
    assert load.gpu_utilization == pytest.approx({0: 0.6, 1: 0.35})
    det = detector()
    assert det.hot(load) == ["cpu 0.950"]
    (wish,) = det.observe(load)
    assert wish.ref.job_id == "a" and "p_s" not in wish.reason


def test_a_shared_gpu_at_or_under_h_r_is_no_overload() -> None:
    load = twins(0.9, 0.9, 1, k=2)  # 0.45 + 0.45 = 0.9: reaching h_r is not exceeding it
    assert detector().hot(load) == []
    one = measure_load(  # one task on both slots of the GPU: nobody shares it
        node(*virtual_slots(0, 1)),
        [task("a", 0, 1, cores=1.9)],
        Capacity(cpu_cores=2.0, memory_bytes=16 * GIB),
        virtual_gpus={0, 1},
        gpu_slices=2,
    )
    assert one.tasks[0].gpu_shares == pytest.approx({0: 0.95})
    assert shared_gpus(one) == {}
    assert detector().hot(one) == ["gpu 0.950", "cpu 0.950"]
