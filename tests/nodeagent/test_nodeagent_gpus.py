"""GPU slots: virtual ones, and detection through a fake NVML."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nodeagent.gpus import GpuConfigError, NvmlGpus, VirtualGpus, detect_gpus
from nodeagent.model import GpuInfo, GpuMetrics


def test_virtual_gpus_are_marked_virtual_everywhere() -> None:
    gpus = VirtualGpus(2)
    assert gpus.virtual_indices() == {0, 1}
    assert gpus.infos() == [GpuInfo(0, "virtual", True, 0), GpuInfo(1, "virtual", True, 0)]
    assert gpus.metrics({1}) == [
        GpuMetrics(0, 0.0, 0, 0, True),
        GpuMetrics(1, 100.0, 0, 0, True),  # occupancy, not a measurement
    ]
    assert gpus.process_memory() == {}


class FakeNvmlError(Exception):
    pass


class FakeNvml:
    """Just enough of pynvml."""

    NVMLError = FakeNvmlError

    def __init__(self, count: int, fail_init: bool = False) -> None:
        self.count = count
        self.fail_init = fail_init
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise FakeNvmlError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA H100"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(total=80 << 30, used=(handle + 1) << 30)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        if handle == 1:
            raise FakeNvmlError("GPU is lost")
        return SimpleNamespace(gpu=42)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [
            SimpleNamespace(pid=100, usedGpuMemory=1000),
            SimpleNamespace(pid=7, usedGpuMemory=None),
        ]


def test_no_nvml_and_no_count_is_an_error_asking_for_gpus() -> None:
    with pytest.raises(GpuConfigError, match="--gpus N"):
        detect_gpus(None, FakeNvml(0, fail_init=True))


def test_no_nvml_with_count_gives_virtual_slots() -> None:
    gpus = detect_gpus(2, FakeNvml(0, fail_init=True))
    assert gpus.virtual_indices() == {0, 1} and len(gpus.infos()) == 2


def test_nvml_without_gpus_with_count_gives_virtual_slots() -> None:
    nvml = FakeNvml(0)
    gpus = detect_gpus(3, nvml)
    assert gpus.virtual_indices() == {0, 1, 2} and len(gpus.infos()) == 3
    assert nvml.shutdowns == 1


def test_real_gpus_all_or_the_first_n() -> None:
    gpus = detect_gpus(None, FakeNvml(4))
    assert gpus.virtual_indices() == set()
    assert [g.index for g in gpus.infos()] == [0, 1, 2, 3]
    gpus = detect_gpus(2, FakeNvml(4))
    assert gpus.infos() == [
        GpuInfo(0, "NVIDIA H100", False, 80 << 30),
        GpuInfo(1, "NVIDIA H100", False, 80 << 30),
    ]


def test_slots_beyond_the_real_gpus_are_virtual() -> None:
    nvml = FakeNvml(2)
    gpus = detect_gpus(4, nvml)
    assert [(g.index, g.virtual) for g in gpus.infos()] == [
        (0, False),
        (1, False),
        (2, True),
        (3, True),
    ]
    assert gpus.virtual_indices() == {2, 3}
    assert [(m.index, m.virtual, m.utilization_percent) for m in gpus.metrics({3})] == [
        (0, False, 42.0),
        (1, False, 0.0),
        (2, True, 0.0),
        (3, True, 100.0),
    ]
    assert gpus.process_memory() == {100: 2000, 7: 0}
    gpus.close()
    assert nvml.shutdowns == 1


def test_nvml_sampling_degrades_per_gpu() -> None:
    nvml = FakeNvml(2)
    gpus = NvmlGpus(nvml, [0, 1])
    assert gpus.metrics(()) == [
        GpuMetrics(0, 42.0, 1 << 30, 80 << 30, False),
        GpuMetrics(1, 0.0, 0, 80 << 30, False),  # NVML error on this GPU: zeros
    ]
    assert gpus.process_memory() == {100: 2000, 7: 0}
    gpus.close()
    assert nvml.shutdowns == 1


def test_real_detection_never_crashes() -> None:
    # Whatever this machine has: either real GPUs or a clean error/virtual fallback.
    gpus = detect_gpus(1)
    assert len(gpus.infos()) == 1
    gpus.close()
