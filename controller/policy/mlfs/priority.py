"""MLF-H task priorities (MLFS §3.3.1, Eqs. 2-6).

A task is one model partition of one mini-batch; a job's tasks form a dependency graph (a DAG)
whose edges run from a task to the tasks that need its output (``children``). A plain
data-parallel job is one task per worker, each with partition share ``1 / workers`` and no
children (:func:`data_parallel_tasks`).

Eqs. 3 and 5 are read recursively, as written: a child contributes its *own* Eq. 3 (Eq. 5)
value, so a descendant at depth h is discounted by ``gamma ** h`` ("dependent tasks in layers
closer to task k" count more, §3.3.1). A descendant reached by several paths counts once per
path. Since Eqs. 3, 5 and 6 are linear, ``total`` obeys the same recursion.

Edge cases (our choices; the paper leaves them open, see ``docs/mlfs.md``):

* ``I = 1`` (no finished iteration): the loss ratio of Eq. 2 is 1, the value it takes at
  ``I = 2`` whenever the first iteration reduced the loss.
* Total loss reduction <= 0: ratio 0 (no evidence that another iteration improves accuracy);
  otherwise the ratio is clamped to [0, 1] (a rise in loss gives 0).
* ``d - t`` and ``r`` are floored at ``min_horizon_s``, so a passed deadline or a finished
  estimate gives the largest finite term; ``deadline=None`` (the "maximum deadline" of §3.1)
  and ``remaining_s=None`` (no estimate) contribute 0.
* Eq. 4 reads times in ``time_unit_s`` (hours by default); the paper states no unit.
* A cycle or a child that is not among the given tasks is a :class:`ValueError`.

The parameter-server task of §3.3.1 (always the highest priority) is not modelled: mlsched's
jobs use all-reduce, where every task is a worker.

Complexity: :func:`task_priorities` is O(tasks + edges): one iterative depth-first traversal
with memoisation (no recursion limit on deep pipelines).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from controller.policy.mlfs.config import MlfsConfig

TaskKey = tuple[str, int]  # (job id, task index within the job)


@dataclass(frozen=True)
class TaskFeatures:
    """What Eqs. 2 and 4 read about one task. Times are seconds, ``deadline`` absolute."""

    job_id: str
    task: int
    urgency: float = 1.0  # L^J in [0, m]
    iteration: int = 1  # I >= 1, the iteration the task belongs to
    last_loss_reduction: float = 0.0  # δl_{I-1}
    total_loss_reduction: float = 0.0  # sum of δl_j for j = 1 .. I-1
    partition: float = 1.0  # S_k^J = S_k / S^J, in (0, 1]
    deadline: float | None = None  # d_{k,J}; None: no deadline
    remaining_s: float | None = None  # r_{k,J}; None: unknown
    waiting_s: float = 0.0  # w_{k,J}
    children: tuple[int, ...] = ()  # direct children (task indices of the same job)

    def __post_init__(self) -> None:
        where = f"task {self.task} of job {self.job_id!r}"
        if self.iteration < 1:
            raise ValueError(f"{where}: iteration must be >= 1, got {self.iteration}")
        if not (math.isfinite(self.urgency) and self.urgency >= 0):
            raise ValueError(f"{where}: urgency must be finite and >= 0, got {self.urgency}")
        if not 0 < self.partition <= 1:
            raise ValueError(f"{where}: partition must be in (0, 1], got {self.partition}")
        if not (
            math.isfinite(self.last_loss_reduction) and math.isfinite(self.total_loss_reduction)
        ):
            raise ValueError(f"{where}: loss reductions must be finite")
        if not self.waiting_s >= 0:
            raise ValueError(f"{where}: waiting_s must be >= 0, got {self.waiting_s}")
        if self.remaining_s is not None and not self.remaining_s >= 0:
            raise ValueError(f"{where}: remaining_s must be >= 0, got {self.remaining_s}")
        if self.deadline is not None and math.isnan(self.deadline):
            raise ValueError(f"{where}: deadline must be a time, got {self.deadline}")
        if len(set(self.children)) != len(self.children):
            raise ValueError(f"{where}: duplicate children {self.children}")

    @property
    def key(self) -> TaskKey:
        return (self.job_id, self.task)


@dataclass(frozen=True)
class TaskPriority:
    """A task's priority and its two parts, children included."""

    ml: float  # P^ML, Eq. 3
    computation: float  # P^C, Eq. 5
    total: float  # P, Eq. 6


def loss_ratio(f: TaskFeatures) -> float:
    """The normalised loss reduction of the last finished iteration (Eq. 2), edge cases as in
    the module docstring."""
    if f.iteration == 1:
        return 1.0
    if f.total_loss_reduction <= 0:
        return 0.0
    return min(1.0, max(0.0, f.last_loss_reduction / f.total_loss_reduction))


def own_ml_priority(f: TaskFeatures) -> float:
    """P^ML of the task alone (Eq. 2)."""
    # MLFS Eq. 2: L^J * (1 / I) * (δl_{I-1} / Σ δl_j) * S_k^J
    return f.urgency / f.iteration * loss_ratio(f) * f.partition


def own_computation_priority(f: TaskFeatures, now: float, config: MlfsConfig) -> float:
    """P^C of the task alone (Eq. 4), times in ``config.time_unit_s``."""
    unit, floor = config.time_unit_s, config.min_horizon_s
    # MLFS Eq. 4: gamma_d / (d - t) + gamma_r / r + gamma_w * w
    p = config.gamma_w * f.waiting_s / unit
    if f.deadline is not None:
        p += config.gamma_d * unit / max(f.deadline - now, floor)
    if f.remaining_s is not None:
        p += config.gamma_r * unit / max(f.remaining_s, floor)
    return p


def task_priorities(
    tasks: Iterable[TaskFeatures], now: float, config: MlfsConfig | None = None
) -> dict[TaskKey, TaskPriority]:
    """Priorities of all given tasks at time ``now`` (Eqs. 2-6).

    Every child named by a task must be among ``tasks``; keys must be unique.
    """
    config = config or MlfsConfig()
    by_key: dict[TaskKey, TaskFeatures] = {}
    for f in tasks:
        if f.key in by_key:
            raise ValueError(f"task {f.task} of job {f.job_id!r} given twice")
        by_key[f.key] = f
    own = {
        k: (own_ml_priority(f), own_computation_priority(f, now, config)) for k, f in by_key.items()
    }
    sums = _discounted_sums(by_key, own, config.gamma)
    a = config.alpha
    # MLFS Eq. 6: P = alpha P^ML + (1 - alpha) P^C
    return {k: TaskPriority(ml, c, a * ml + (1 - a) * c) for k, (ml, c) in sums.items()}


def _discounted_sums(
    tasks: Mapping[TaskKey, TaskFeatures],
    own: Mapping[TaskKey, tuple[float, float]],
    gamma: float,
) -> dict[TaskKey, tuple[float, float]]:
    """(Eq. 3, Eq. 5) for every task: own value plus gamma times each child's, post-order."""
    done: dict[TaskKey, tuple[float, float]] = {}
    for root in tasks:
        if root in done:
            continue
        path = [root]  # the current depth-first path; a child already on it closes a cycle
        on_path = {root}
        pending = [iter(tasks[root].children)]
        while path:
            key = path[-1]
            for index in pending[-1]:
                child = (key[0], index)
                if child in done:
                    continue
                if child not in tasks:
                    raise ValueError(f"task {key[1]} of job {key[0]!r}: unknown child {index}")
                if child in on_path:
                    cycle = [k[1] for k in path[path.index(child) :]] + [index]
                    raise ValueError(
                        f"dependency cycle in job {key[0]!r}: {' -> '.join(map(str, cycle))}"
                    )
                path.append(child)
                on_path.add(child)
                pending.append(iter(tasks[child].children))
                break
            else:  # all children done: MLFS Eqs. 3 and 5
                path.pop()
                on_path.discard(key)
                pending.pop()
                ml, c = own[key]
                for index in tasks[key].children:
                    child_ml, child_c = done[(key[0], index)]
                    ml += gamma * child_ml
                    c += gamma * child_c
                done[key] = (ml, c)
    return done


def data_parallel_tasks(template: TaskFeatures, workers: int) -> tuple[TaskFeatures, ...]:
    """A data-parallel job's tasks: ``workers`` copies of ``template`` numbered 0 .. n-1, each
    with partition ``1 / workers`` and no dependencies."""
    if workers < 1:
        raise ValueError(f"job {template.job_id!r}: workers must be >= 1, got {workers}")
    return tuple(
        replace(template, task=i, partition=1.0 / workers, children=()) for i in range(workers)
    )


def queue_order(priorities: Mapping[TaskKey, TaskPriority]) -> list[TaskKey]:
    """Task keys by descending priority (the MLF-H queue order); ties by (job id, task)."""
    return sorted(priorities, key=lambda k: (-priorities[k].total, k))
