"""GPU discovery and sampling: real GPUs through NVML, virtual slots where there are none."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import replace
from types import ModuleType
from typing import Any, Protocol

from nodeagent.model import GpuInfo, GpuMetrics

log = logging.getLogger(__name__)

VIRTUAL_GPU_NAME = "virtual"


class GpuConfigError(RuntimeError):
    """The requested GPU setup does not match the machine."""


class GpuBackend(Protocol):
    """The GPU slots an agent offers."""

    def virtual_indices(self) -> frozenset[int]:
        """Indices of the slots that are virtual (no real GPU behind them)."""
        ...

    def infos(self) -> list[GpuInfo]:
        """Static description of every slot."""
        ...

    def metrics(self, busy: Collection[int]) -> list[GpuMetrics]:
        """Sample every slot; ``busy`` are the indices currently held by tasks."""
        ...

    def process_memory(self) -> dict[int, int]:
        """GPU memory used per process id (empty when unknown)."""
        ...

    def close(self) -> None:
        """Release the backend."""
        ...


class VirtualGpus:
    """``count`` virtual GPU slots (indices from ``first_index``); tasks on them train on CPU.

    Nothing is measured. Every sample is marked ``virtual``; memory is 0 and the utilisation of a
    slot is its occupancy: 100 while a task holds it, else 0.
    """

    def __init__(self, count: int, first_index: int = 0) -> None:
        self._indices = range(first_index, first_index + count)

    def virtual_indices(self) -> frozenset[int]:
        """Every slot."""
        return frozenset(self._indices)

    def infos(self) -> list[GpuInfo]:
        """One virtual slot per index."""
        return [GpuInfo(i, VIRTUAL_GPU_NAME, True, 0) for i in self._indices]

    def metrics(self, busy: Collection[int]) -> list[GpuMetrics]:
        """Occupancy of every slot (100 when held by a task), marked virtual."""
        return [GpuMetrics(i, 100.0 if i in busy else 0.0, 0, 0, True) for i in self._indices]

    def process_memory(self) -> dict[int, int]:
        """Virtual slots have no memory."""
        return {}

    def close(self) -> None:
        """Nothing to release."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpus:
    """Real GPUs sampled through NVML (``pynvml`` from nvidia-ml-py)."""

    def __init__(self, nvml: Any, indices: list[int]) -> None:
        """``nvml`` is the initialised pynvml module; ``indices`` are the GPUs to offer."""
        self._nvml = nvml
        self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        self._infos = []
        for index, handle in self._handles:
            name = _text(nvml.nvmlDeviceGetName(handle))
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            self._infos.append(GpuInfo(index, name, False, total))

    def virtual_indices(self) -> frozenset[int]:
        """None: every slot is a real GPU."""
        return frozenset()

    def infos(self) -> list[GpuInfo]:
        """Name and memory of every GPU."""
        return list(self._infos)

    def metrics(self, busy: Collection[int]) -> list[GpuMetrics]:
        """Utilisation and memory from NVML; a GPU that cannot be read reports zeros."""
        out = []
        for (index, handle), info in zip(self._handles, self._infos, strict=True):
            try:
                util = float(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                used = int(self._nvml.nvmlDeviceGetMemoryInfo(handle).used)
            except self._nvml.NVMLError as exc:
                log.debug("NVML cannot sample GPU %d: %s", index, exc)
                util, used = 0.0, 0
            out.append(GpuMetrics(index, util, used, info.memory_total_bytes, False))
        return out

    def process_memory(self) -> dict[int, int]:
        """GPU memory per pid, summed over the offered GPUs."""
        usage: dict[int, int] = {}
        for index, handle in self._handles:
            try:
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except self._nvml.NVMLError as exc:
                log.debug("NVML cannot list processes of GPU %d: %s", index, exc)
                continue
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None) or 0
                usage[int(proc.pid)] = usage.get(int(proc.pid), 0) + int(used)
        return usage

    def close(self) -> None:
        """Shut NVML down."""
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)


class CombinedGpus:
    """Real GPUs followed by virtual slots (``--gpus N`` above the real count: testing only)."""

    def __init__(self, real: GpuBackend, extra: GpuBackend) -> None:
        self._parts = (real, extra)

    def virtual_indices(self) -> frozenset[int]:
        """The virtual slots of both parts."""
        return frozenset().union(*(part.virtual_indices() for part in self._parts))

    def infos(self) -> list[GpuInfo]:
        """Real slots, then virtual ones."""
        return [info for part in self._parts for info in part.infos()]

    def metrics(self, busy: Collection[int]) -> list[GpuMetrics]:
        """Samples of both parts."""
        return [m for part in self._parts for m in part.metrics(busy)]

    def process_memory(self) -> dict[int, int]:
        """Per-process memory of the real GPUs."""
        usage: dict[int, int] = {}
        for part in self._parts:
            usage.update(part.process_memory())
        return usage

    def close(self) -> None:
        """Close both parts."""
        for part in self._parts:
            part.close()


def physical_indices(slots: Iterable[int], slices: int = 1) -> tuple[int, ...]:
    """The physical GPUs behind ``slots`` (slot ``s`` is on GPU ``s // slices``), each once, in
    the order of their first slot."""
    per = max(1, slices)
    return tuple(dict.fromkeys(s // per for s in slots))


class SlicedGpus:
    """Every GPU of ``inner`` offered as ``slices`` time-sliced slots (``--gpu-slices``).

    Slot ``s`` is on GPU ``s // slices`` of ``inner``, so ``inner``'s indices must start at 0
    (as :func:`detect_gpus` gives them). Each slot reports its GPU's name, virtual flag and whole
    memory, and samples as its GPU: every slot of a GPU carries that GPU's utilisation and
    memory. A virtual GPU's slots are virtual.
    """

    def __init__(self, inner: GpuBackend, slices: int) -> None:
        if slices < 1:
            raise GpuConfigError("--gpu-slices must be >= 1")
        self._inner = inner
        self.slices = slices

    def _slots(self, index: int) -> range:
        return range(index * self.slices, (index + 1) * self.slices)

    def virtual_indices(self) -> frozenset[int]:
        """The slots of the virtual GPUs."""
        return frozenset(s for i in self._inner.virtual_indices() for s in self._slots(i))

    def infos(self) -> list[GpuInfo]:
        """``slices`` slots per GPU, each described as its GPU."""
        return [
            replace(info, index=s) for info in self._inner.infos() for s in self._slots(info.index)
        ]

    def metrics(self, busy: Collection[int]) -> list[GpuMetrics]:
        """Every GPU's sample (busy when a task holds one of its slots), once per slot."""
        samples = self._inner.metrics(set(physical_indices(busy, self.slices)))
        return [replace(m, index=s) for m in samples for s in self._slots(m.index)]

    def process_memory(self) -> dict[int, int]:
        """Per-process memory of the GPUs."""
        return self._inner.process_memory()

    def close(self) -> None:
        """Close the GPUs."""
        self._inner.close()


def _load_nvml() -> ModuleType:
    import pynvml

    return pynvml


def detect_gpus(requested: int | None, nvml: Any = None) -> GpuBackend:
    """Choose the GPU slots to offer.

    ``requested`` ``None`` uses every GPU NVML finds and fails when there is none. ``N`` uses the
    first N NVML GPUs; slots beyond the real GPUs are virtual (all N when NVML finds no GPU; any
    NVML failure counts as none). ``nvml`` replaces the pynvml module (tests).
    """
    found = 0
    problem = "no GPU found"
    module: Any = None
    try:
        module = nvml if nvml is not None else _load_nvml()
        module.nvmlInit()
        try:
            found = int(module.nvmlDeviceGetCount())
        except Exception:
            module.nvmlShutdown()
            raise
    except Exception as exc:  # NVML missing or broken: degrade to "no GPUs"
        problem = f"NVML unavailable: {exc}"
        module, found = None, 0
    if found == 0:
        if module is not None:
            module.nvmlShutdown()
        if requested is None:
            raise GpuConfigError(
                f"no NVIDIA GPU found ({problem}); pass --gpus N to offer N virtual GPU slots"
            )
        log.info("%s: offering %d virtual GPU slot(s)", problem, requested)
        return VirtualGpus(requested)
    count = found if requested is None else requested
    try:
        real = NvmlGpus(module, list(range(min(count, found))))
    except Exception as exc:
        module.nvmlShutdown()
        raise GpuConfigError(f"cannot read the GPUs through NVML: {exc}") from exc
    if count <= found:
        log.info("offering %d of %d NVIDIA GPU(s)", count, found)
        return real
    log.warning(
        "--gpus %d: offering the %d NVIDIA GPU(s) and %d virtual slot(s); tasks on virtual "
        "slots train on CPU (for testing only)",
        count,
        found,
        count - found,
    )
    return CombinedGpus(real, VirtualGpus(count - found, first_index=found))
