"""HiveD-style buddy cells (UniSched §III-C3) and their placement on concrete GPUs.

A level-``l`` cell is ``2**l`` GPUs of one node at aligned indices (``[a, a + 2**l)`` with
``a % 2**l == 0``); on 8-GPU nodes the levels are 0..3 (1, 2, 4, 8 GPUs). An *allocation* of a
job is a tuple ``c`` with ``c[l]`` cells of level ``l`` (the paper's quadruple).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from controller.placement import TaskPlacement

Allocation = tuple[int, ...]  # cells per level, level 0 first

MAX_ENUMERATED_GPUS = 16  # §III-C3: all quadruples only for jobs of at most 16 GPUs


def top_level(gpus_per_node: int) -> int:
    """The highest cell level a node of ``gpus_per_node`` GPUs holds (8 -> 3)."""
    if gpus_per_node < 1:
        raise ValueError(f"a node needs at least one GPU, got {gpus_per_node}")
    return gpus_per_node.bit_length() - 1


def cell_gpus(allocation: Allocation) -> int:
    return sum(count << level for level, count in enumerate(allocation))


@lru_cache(maxsize=4096)  # pure, asked for the same few sizes every cycle
def allocations(gpus: int, levels: int, roundup: bool = False) -> tuple[Allocation, ...]:
    """The allocation choices of a ``gpus``-GPU job on nodes with cell levels ``0..levels-1``.

    Jobs of at most 16 GPUs: every tuple of cells with exactly ``gpus`` GPUs, plus the Chronus
    round-up (the smallest single cell holding the job, or whole top-level cells), consolidated
    first (§III-C3: e.g. (0,0,0,1), (0,1,1,0), ..., (6,0,0,0) for 6 GPUs). Larger jobs: whole
    top-level cells (nodes) only. ``roundup``: only the round-up (Chronus' strict
    consolidation, an ablation).
    """
    if gpus < 1 or levels < 1:
        raise ValueError(f"need gpus >= 1 and levels >= 1, got {gpus}, {levels}")
    top = levels - 1
    node = 1 << top
    if gpus <= node:
        level = (gpus - 1).bit_length()
        rounded = tuple(1 if lv == level else 0 for lv in range(levels))
    else:
        rounded = (*tuple(0 for _ in range(top)), -(-gpus // node))
    if roundup or gpus > MAX_ENUMERATED_GPUS:
        return (rounded,)
    exact = sorted(set(_exact(gpus, top)), key=lambda a: (sum(a), tuple(reversed(a))))
    exact.sort(key=sum)  # fewest cells (most consolidated) first
    return tuple(dict.fromkeys([rounded, *exact]))


def _exact(gpus: int, level: int) -> Iterator[Allocation]:
    """Tuples with ``sum(c[l] * 2**l) == gpus`` over levels ``0..level``."""
    if level == 0:
        yield (gpus,)
        return
    for count in range(gpus >> level, -1, -1):
        for rest in _exact(gpus - (count << level), level - 1):
            yield (*rest, count)


def free_cells(free: Mapping[str, Sequence[int]], levels: int) -> list[int]:
    """N^cell: maximal aligned free cells per level over all nodes (buddy decomposition)."""
    counts = [0] * levels
    for indices in free.values():
        for level, _ in node_cells(indices, levels):
            counts[level] += 1
    return counts


def node_cells(indices: Sequence[int], levels: int) -> list[tuple[int, int]]:
    """Maximal aligned free cells of one node as (level, first index), largest first."""
    return list(_node_cells(tuple(sorted(indices)), levels))


@lru_cache(maxsize=4096)  # a pure function of a node's free indices: few distinct ones recur
def _node_cells(indices: tuple[int, ...], levels: int) -> tuple[tuple[int, int], ...]:
    remaining = set(indices)
    cells: list[tuple[int, int]] = []
    for level in range(levels - 1, -1, -1):
        size = 1 << level
        for start in sorted(remaining):
            if start % size == 0 and all(start + i in remaining for i in range(size)):
                cells.append((level, start))
                remaining.difference_update(range(start, start + size))
    return tuple(cells)


def consolidation_feasible(requested: Sequence[int], free: Sequence[int]) -> bool:
    """Eq. 14: sum_{g>=i} 2^(g-i) N^con_g <= sum_{g>=i} 2^(g-i) N^cell_g for every level i."""
    levels = len(free)
    for i in range(levels):
        need = sum((requested[g] << (g - i)) for g in range(i, levels))
        have = sum((free[g] << (g - i)) for g in range(i, levels))
        if need > have:
            return False
    return True


@dataclass(frozen=True)
class CellRequest:
    """Cells for one job: ``gpus`` of them used, in processes of ``per_process`` GPUs;
    ``spread``: each cell on a different node (a two-node profiling run)."""

    job_id: str
    allocation: Allocation
    gpus: int
    per_process: int = 1
    spread: bool = False


@dataclass
class CellPool:
    """Free buddy cells per node, split on demand (the construction in Proposition 1)."""

    levels: int
    cells: dict[str, list[tuple[int, int]]]  # node -> free (level, start)

    @classmethod
    def of(cls, free: Mapping[str, Sequence[int]], levels: int) -> CellPool:
        """The pool of the free GPUs per node (nodes without any are left out: nothing can be
        taken from them, and a large cluster has many)."""
        return cls(
            levels, {node: node_cells(ids, levels) for node, ids in sorted(free.items()) if ids}
        )

    def free_gpus(self) -> dict[str, set[int]]:
        """The GPUs of the free cells, per node."""
        return {
            node: {start + i for level, start in cells for i in range(1 << level)}
            for node, cells in self.cells.items()
        }

    def take(
        self, level: int, prefer: Sequence[str] = (), avoid: Sequence[str] = ()
    ) -> tuple[str, int] | None:
        """Reserve one level-``level`` cell: on a preferred node if possible, else from the
        smallest free cell that holds it (best fit, keeping big cells whole), never on an
        avoided node. Returns (node, first GPU index) or None."""
        best: tuple[tuple[int, int, str], str, tuple[int, int]] | None = None
        for node, cells in self.cells.items():
            if node in avoid:
                continue
            for cell in cells:
                if cell[0] < level:
                    continue
                key = (0 if node in prefer else 1, cell[0], node)
                if best is None or key < best[0]:
                    best = (key, node, cell)
        if best is None:
            return None
        _, node, (cell_level, start) = best
        cells = self.cells[node]
        cells.remove((cell_level, start))
        while cell_level > level:  # split the buddy: keep the lower half, free the upper
            cell_level -= 1
            cells.append((cell_level, start + (1 << cell_level)))
        return node, start

    def give_back(self, node: str, level: int, start: int) -> None:
        """Free a taken cell again, merged with its buddy while the buddy is free: a failed
        request leaves the pool as whole as it found it (taking split a bigger cell, and the
        halves left split would turn away a later job that needs the whole one)."""
        cells = self.cells[node]
        while level < self.levels - 1:
            buddy = (level, start ^ (1 << level))
            if buddy not in cells:
                break
            cells.remove(buddy)
            level, start = level + 1, min(start, buddy[1])
        cells.append((level, start))

    def place_all(self, requests: Sequence[CellRequest]) -> dict[str, tuple[TaskPlacement, ...]]:
        """Concrete placements for the requests, by job id.

        Cells are taken level by level from the largest down, across all jobs (the
        construction that proves Proposition 1, so Eq. 14 makes consolidation-friendly
        requests fit), each on a node the job already uses when possible; a round-up cell's
        spare GPUs stay unused. A job whose cells do not all fit gets nothing (its cells go
        back to the pool) and is left out of the result.
        """
        taken: dict[str, list[tuple[str, int, int]]] = {r.job_id: [] for r in requests}
        failed: set[str] = set()
        for level in range(self.levels - 1, -1, -1):
            for request in requests:
                job, allocation = request.job_id, request.allocation
                count = allocation[level] if level < len(allocation) else 0
                for _ in range(count):
                    if job in failed:
                        break
                    nodes = [node for node, _, _ in taken[job]]
                    if request.spread:
                        got = self.take(level, avoid=nodes)
                    else:
                        got = self.take(level, prefer=nodes)
                    if got is None:
                        failed.add(job)
                        for node, start, lv in taken.pop(job):
                            self.give_back(node, lv, start)
                        break
                    taken[job].append((got[0], got[1], level))
        result: dict[str, tuple[TaskPlacement, ...]] = {}
        for request in requests:
            job, gpus, per_process = request.job_id, request.gpus, request.per_process
            if job in failed:
                continue
            by_node: dict[str, list[int]] = {}
            left = gpus
            for node, start, level in sorted(taken[job], key=lambda c: -c[2]):
                use = min(left, 1 << level)
                by_node.setdefault(node, []).extend(range(start, start + use))
                left -= use
            placement = _tasks(by_node, per_process)
            if placement is not None and left == 0:
                result[job] = placement
        return result


def _tasks(by_node: Mapping[str, list[int]], per_process: int) -> tuple[TaskPlacement, ...] | None:
    placements: list[TaskPlacement] = []
    for node, indices in by_node.items():
        indices = sorted(indices)
        if len(indices) % per_process:
            return None
        for i in range(0, len(indices), per_process):
            placements.append(
                TaskPlacement(len(placements), node, tuple(indices[i : i + per_process]))
            )
    return tuple(placements)
