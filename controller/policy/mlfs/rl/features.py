"""MLF-RL's state: one feature row per candidate job, plus the cluster context (MLFS §3.4).

A *candidate* is a queued job or a job with tasks to move off an overloaded server (a
*mover*). Rows are per job: jobs are gang-scheduled in mlsched (all tasks launch together), so
the decision unit is the job and its tasks enter as aggregates (the largest task priority, the
largest partition share, edges per task). Every value goes through a fixed transform (log,
ratio, clip) into roughly [0, 1]; nothing is fitted to data, so a row depends only on the
snapshot.

Per job, computed once per cycle (:func:`job_rows`; ``JOB_FEATURES``):

* MLF-H's Eq. 2-5 inputs: urgency ``L^J``, ``1/I``, the loss-reduction ratio
  ``δl_{I-1} / Σ δl_j``, the largest partition share ``S_k^J``, the deadline term
  ``1/(d - t)`` and the remaining-time term ``1/r`` (hours, floored as in Eq. 4), the deadline
  slack ``d - t - r``, the remaining time and the waiting time;
* MLF-H's own priority ``P`` (Eq. 6, the job's largest task priority) and its two parts
  ``P^ML`` and ``P^C`` of that task;
* the job: GPUs requested (log and share of the cluster), iteration progress and budget, task
  count, model parallelism and dependency edges per task, batch size, suspensions so far,
  whether it is a mover, and its measured per-task demand per resource type.

Per decision step (:func:`step_rows`; ``STEP_FEATURES``), because placements change the
cluster: the job's rank by ``P`` among the candidates offered, the share of the free task
slots (free GPUs in whole ``gpus_per_process`` chunks) on the underloaded servers its tasks
would take, and whether one server holds them all. The context
(``CONTEXT_FEATURES``): free-GPU share, mean utilisation per resource type, the largest
server utilisation, the share of overloaded servers and the number of candidates left.

Not used (``docs/mlfs.md``, *MLF-RL*): the model (algorithm) name, an open vocabulary whose
effect on speed the remaining time already carries, and the training-data size, which mlsched
jobs do not declare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.policy.base import JobView
from controller.policy.mlfs.book import Priorities
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.jobs import job_features, task_demand, task_graph
from controller.policy.mlfs.priority import TaskFeatures, TaskKey, TaskPriority, loss_ratio
from mlsched.model import IterationStop, TargetMetricStop

JOB_FEATURES = (
    "urgency",
    "inv_iteration",
    "loss_ratio",
    "partition",
    "deadline_term",
    "slack",
    "has_deadline",
    "remaining_term",
    "remaining",
    "waiting",
    "gpus_log",
    "gpus_share",
    "priority",
    "priority_ml",
    "priority_c",
    "progress",
    "budget_log",
    "tasks_log",
    "model_parallel",
    "edges_per_task",
    "batch_log",
    "suspensions",
    "mover",
    "demand_gpu",
    "demand_cpu",
    "demand_memory",
    "demand_bandwidth",
)
STEP_FEATURES = ("priority_rank", "room_share", "fits_one_server")
CONTEXT_FEATURES = (
    "free_gpus",
    "util_gpu",
    "util_cpu",
    "util_memory",
    "util_bandwidth",
    "util_max",
    "overloaded_share",
    "candidates_log",
)
# What the network reads per candidate: its job row, its step row, the context.
CANDIDATE_FEATURES = JOB_FEATURES + STEP_FEATURES + CONTEXT_FEATURES
RESOURCES = ("gpu", "cpu", "memory", "bandwidth")  # the demand / utilisation columns, in order

_MAX_URGENCY = 10.0  # L^J is clipped here (MLFS §3.3.1: L^J in [0, m])


@dataclass(frozen=True)
class Candidate:
    """A job the step may pick: queued, or a mover with ``ranks`` leaving ``sources``."""

    view: JobView
    moving: bool = False
    sources: frozenset[str] = frozenset()
    ranks: tuple[int, ...] = ()

    @property
    def tasks(self) -> int:
        """Tasks to place: all of a queued job's, a mover's leaving ones."""
        return len(self.ranks) if self.moving else self.view.spec.num_tasks


def job_priorities(
    priorities: Mapping[TaskKey, TaskPriority],
) -> dict[str, TaskPriority]:
    """Each job's priority: that of its task with the largest ``P`` (MLF-H's rule: a job
    leaves the queue when its most urgent task would have), ties by the lower task index."""
    best: dict[str, tuple[TaskPriority, int]] = {}
    for (job_id, task), p in priorities.items():
        held = best.get(job_id)
        if held is None or p.total > held[0].total or (p.total == held[0].total and task < held[1]):
            best[job_id] = (p, task)
    return {job_id: p for job_id, (p, _) in best.items()}


def job_row(
    candidate: Candidate,
    priority: TaskPriority,
    now: float,
    total_gpus: int,
    config: MlfsConfig,
    first: TaskFeatures | None = None,
) -> list[float]:
    """The ``JOB_FEATURES`` of one candidate (module docstring). ``first``: its task 0's
    Eq. 2/4 features if already at hand (:func:`~controller.policy.mlfs.jobs.job_features`,
    waiting time counted only for a queued job)."""
    if first is None:
        first = job_features(candidate.view, now, queued=not candidate.moving)[0]
    row = static_row(candidate, first, total_gpus, config)
    set_dynamic(row, first, priority, now, config)
    return row


# The columns of a job row that move with the clock (set_dynamic); the others depend only on
# the job's own inputs and may be kept between cycles (RowBook).
DYNAMIC = tuple(
    JOB_FEATURES.index(n)
    for n in ("deadline_term", "slack", "waiting", "priority", "priority_ml", "priority_c")
)


def static_row(
    candidate: Candidate, first: TaskFeatures, total_gpus: int, config: MlfsConfig
) -> list[float]:
    """A job row with the columns that read the clock (``DYNAMIC``) at 0."""
    view = candidate.view
    spec = view.spec
    unit, floor = config.time_unit_s, config.min_horizon_s
    tasks = max(1, spec.num_tasks)
    shares, children = task_graph(tasks, spec.mlfs)
    remaining = first.remaining_s
    budget = _budget(view)
    demand = task_demand(view, RESOURCES)
    return [
        min(max(first.urgency, 0.0), _MAX_URGENCY),
        1.0 / first.iteration,
        loss_ratio(first),
        max(shares, default=1.0),
        0.0,  # deadline_term
        0.0,  # slack
        float(first.deadline is not None),
        0.0 if remaining is None else _log1p(unit / max(remaining, floor)),
        0.0 if remaining is None else _log1p(remaining / unit),
        0.0,  # waiting
        math.log2(max(1, spec.gpus)) / 5.0,
        spec.gpus / total_gpus if total_gpus else 0.0,
        0.0,  # priority
        0.0,  # priority_ml
        0.0,  # priority_c
        min(1.0, view.iteration / budget) if budget else 0.0,
        math.log10(1 + budget) / 6.0,
        math.log2(tasks) / 5.0,
        float(len(spec.mlfs.partitions) > 1),
        sum(len(c) for c in children) / tasks,
        math.log2(1 + max(0, spec.batch_size)) / 12.0,
        _log1p(view.suspensions),
        float(candidate.moving),
        *demand,
    ]


def set_dynamic(
    row: list[float], first: TaskFeatures, priority: TaskPriority, now: float, config: MlfsConfig
) -> None:
    """Fill the ``DYNAMIC`` columns of ``row`` for time ``now``."""
    unit, floor = config.time_unit_s, config.min_horizon_s
    if first.deadline is not None:
        to_deadline = first.deadline - now
        deadline_term = _log1p(unit / max(to_deadline, floor))
        slack = math.tanh((to_deadline - (first.remaining_s or 0.0)) / unit)
    else:
        deadline_term, slack = 0.0, 1.0  # §3.1: no deadline is the maximum deadline
    values = (
        deadline_term,
        slack,
        _log1p(first.waiting_s / unit),
        _log1p(priority.total),
        _log1p(priority.ml),
        _log1p(priority.computation),
    )
    for column, value in zip(DYNAMIC, values, strict=True):
        row[column] = value


class RowBook:
    """Job rows' clock-free columns (:func:`static_row`) per job id, kept while the job's
    inputs are unchanged; only the jobs asked for in the latest cycle are kept."""

    def __init__(self) -> None:
        # per job id: (inputs key, clock-free columns, view, Eq. 6 source, (moving, total
        # GPUs), config); the last four: what rows() found the columns good for, or None
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._seen: dict[str, tuple[Any, ...]] = {}

    def start(self) -> None:
        """A new cycle: forget the jobs the last one did not ask for."""
        self._rows, self._seen = self._seen, {}

    def row(
        self,
        candidate: Candidate,
        first: TaskFeatures,
        priority: TaskPriority,
        now: float,
        total_gpus: int,
        config: MlfsConfig,
    ) -> list[float]:
        """:func:`job_row` of the candidate, from the kept columns where they still hold."""
        row = list(self._static(candidate, first, total_gpus, config))
        set_dynamic(row, first, priority, now, config)
        return row

    def rows(
        self,
        candidates: Sequence[Candidate],
        priorities: Priorities,
        now: float,
        total_gpus: int,
        config: MlfsConfig,
    ) -> np.ndarray:
        """:func:`job_row` of each candidate (float32, one row each), as :meth:`row` gives it
        from ``priorities`` (its ``first`` and ``best``), with the clock columns computed for
        all rows at once: the same IEEE operations, ``math.log1p`` / ``math.tanh`` per value.
        A job whose view and Eq. 6 inputs are the same objects as last cycle's
        (``Priorities.source``) keeps its clock-free columns without a comparison."""
        static: list[list[float]] = []
        rows: list[int] = []
        seen, kept = self._seen, self._rows
        index, entries = priorities.index, priorities.entries
        extra = (total_gpus, config)
        for c in candidates:
            view = c.view
            job_id = view.id
            i = index[job_id]
            source = entries[i]
            held = seen.get(job_id) or kept.get(job_id)
            if (
                held is None
                or held[2] is not view
                or held[3] is not source
                or held[4] != c.moving
                or held[5] != extra
            ):
                columns = np.array(self._static(c, source.first, total_gpus, config))
                held = (seen[job_id][0], columns, view, source, c.moving, extra)
            seen[job_id] = held
            static.append(held[1])
            rows.append(i)
        out = np.array(static, dtype=np.float64).reshape(len(static), len(JOB_FEATURES))
        out[:, DYNAMIC] = dynamic_columns(priorities.clock[rows], now, config)
        return out.astype(np.float32)

    def columns(
        self, candidate: Candidate, first: TaskFeatures, total_gpus: int, config: MlfsConfig
    ) -> list[float]:
        """The candidate's clock-free columns (:func:`static_row`), kept as :meth:`row` keeps
        them (the job's inputs unchanged)."""
        return self._static(candidate, first, total_gpus, config)

    def _static(
        self, candidate: Candidate, first: TaskFeatures, total_gpus: int, config: MlfsConfig
    ) -> list[float]:
        view = candidate.view
        key = (
            view.spec,
            view.iteration,
            view.losses,
            view.submit_time,
            view.estimated_remaining_s,
            view.suspensions,
            view.resource_usage,
            len(view.placement),
            candidate.moving,
            total_gpus,
            config,
            first.urgency,
            first.iteration,
        )
        held = self._seen.get(view.id) or self._rows.get(view.id)
        if held is None or held[0] != key:
            held = (key, static_row(candidate, first, total_gpus, config), None, None, None, None)
        self._seen[view.id] = held
        return held[1]


def dynamic_columns(clock: np.ndarray, now: float, config: MlfsConfig) -> np.ndarray:
    """:func:`set_dynamic`'s columns for many rows: ``clock`` holds per row the deadline
    (infinity: none), the remaining time (0: unknown), the waiting time and ``P``, ``P^ML``,
    ``P^C``. Element-wise ``- / max`` round as Python's do, and the transcendental functions
    give Python's values once rounded to float32 (:func:`_as_libm`), so each value, as the
    float32 the rows are made of, is :func:`set_dynamic`'s to the bit."""
    unit, floor = config.time_unit_s, config.min_horizon_s
    deadline, remaining = clock[:, 0], clock[:, 1]
    has = np.isfinite(deadline)
    to_deadline = np.where(has, deadline - now, 0.0)
    n = clock.shape[0]
    out = np.empty((n, 6), dtype=np.float64)
    logs = np.empty((n, 5), dtype=np.float64)  # what the five log1p columns read, at once
    logs[:, 0] = unit / np.where(floor > to_deadline, floor, to_deadline)  # max(., floor)
    logs[:, 1] = clock[:, 2] / unit
    logs[:, 2:] = clock[:, 3:6]
    logged = _log1p_all(logs)
    out[:, 0] = np.where(has, logged[:, 0], 0.0)
    out[:, 2:] = logged[:, 1:]
    dated = np.flatnonzero(has)
    out[:, 1] = 1.0  # §3.1: no deadline is the maximum
    out[dated, 1] = _as_libm(np.tanh, math.tanh, (to_deadline[dated] - remaining[dated]) / unit)
    return out


def _log1p_all(values: np.ndarray) -> np.ndarray:
    """:func:`_log1p` of each value, as float32 (:func:`_as_libm`)."""
    out = np.zeros(values.shape, dtype=np.float64)
    ok = (values > 0) & np.isfinite(values)
    out[ok] = _as_libm(np.log1p, math.log1p, values[ok])
    return out


# NumPy's log1p and tanh may use SIMD code instead of the C library's, whose results differ in
# the last bits (measured here: at most 1 ulp over 12 million log1p values, 3 over 2 million
# tanh values); this many float64 ulps are a wide margin around that.
_LIBM_ULPS = 16.0


def _as_libm(
    fast: Callable[[np.ndarray], np.ndarray], libm: Callable[[float], float], x: np.ndarray
) -> np.ndarray:
    """``fast(x)``, where it rounds to the same float32 as ``libm`` (Python's ``math``): a
    value whose neighbours ``_LIBM_ULPS`` float64 ulps away round to the same float32 as it
    does is safe; the few others (near a float32 rounding boundary) are ``libm``'s own."""
    y = np.asarray(fast(x), dtype=np.float64)
    step = np.spacing(np.abs(y)) * _LIBM_ULPS
    unsure = (y - step).astype(np.float32) != (y + step).astype(np.float32)
    if unsure.any():
        y[unsure] = [libm(v) for v in x[unsure].tolist()]
    return y


def job_rows(
    candidates: Sequence[Candidate],
    priorities: Mapping[str, TaskPriority],
    now: float,
    total_gpus: int,
    config: MlfsConfig,
    firsts: Mapping[str, TaskFeatures] | None = None,
) -> np.ndarray:
    """``JOB_FEATURES`` of every candidate, one row each (float32); ``firsts``: task 0's
    features by job id where already at hand."""
    firsts = firsts or {}
    rows = [
        job_row(c, priorities[c.view.id], now, total_gpus, config, firsts.get(c.view.id))
        for c in candidates
    ]
    return np.asarray(rows, dtype=np.float32).reshape(len(rows), len(JOB_FEATURES))


def context_row(pool: HostPool, total_gpus: int, candidates_left: int) -> list[float]:
    """``CONTEXT_FEATURES`` of the servers as the decision has left them so far."""
    free, sums, peak, hot = pool.load_summary()
    count = max(1, len(pool.servers))
    means = [
        sums[pool.resources.index(r)] / count if r in pool.resources else 0.0 for r in RESOURCES
    ]
    return [
        free / total_gpus if total_gpus else 0.0,
        *means,
        peak,
        hot / count,
        _log1p(candidates_left) / 5.0,
    ]


def step_rows(
    candidates: Sequence[Candidate],
    totals: np.ndarray,
    pool: HostPool,
) -> np.ndarray:
    """``STEP_FEATURES`` of the given candidates; ``totals`` holds their ``P`` (same order)."""
    return StepKinds(candidates).rows(range(len(candidates)), totals, pool)


class StepKinds:
    """:func:`step_rows` for one cycle's candidates, step after step: each candidate's kind
    (GPUs per task, servers to avoid) and task count are found once, the free task slots per
    kind once per step."""

    def __init__(self, candidates: Sequence[Candidate]) -> None:
        kinds: dict[tuple[int, frozenset[str]], int] = {}
        self._kind = np.array(
            [
                kinds.setdefault((max(1, c.view.spec.gpus_per_process), c.sources), len(kinds))
                for c in candidates
            ],
            dtype=np.intp,
        )
        self._kinds: Sequence[tuple[int, frozenset[str]]] = list(kinds)
        self._tasks = np.array([max(1, c.tasks) for c in candidates], dtype=np.int64)

    @classmethod
    def numbered(
        cls, kind: np.ndarray, kinds: Sequence[tuple[int, frozenset[str]]], tasks: np.ndarray
    ) -> StepKinds:
        """The same from kinds found already: ``kind`` (per candidate) indexes ``kinds``
        (GPUs per task, at least 1; servers to avoid), ``tasks`` (at least 1 each)."""
        out = cls([])
        out._kind, out._kinds, out._tasks = kind, kinds, tasks
        return out

    def rows(self, indices: Sequence[int], totals: np.ndarray, pool: HostPool) -> np.ndarray:
        """``STEP_FEATURES`` of the candidates at ``indices`` (their ``P`` in ``totals``)."""
        index = np.asarray(indices, dtype=np.intp)
        n = len(index)
        out = np.zeros((n, len(STEP_FEATURES)), dtype=np.float32)
        if n == 0:
            return out
        order = np.argsort(-totals, kind="stable")
        ranks = np.empty(n, dtype=np.float32)
        ranks[order] = np.arange(n, dtype=np.float32)
        out[:, 0] = ranks / max(1, n - 1)
        kind = self._kind[index]
        room = np.zeros(len(self._kinds), dtype=np.int64)  # free task slots per kind
        best = np.zeros(len(self._kinds), dtype=np.int64)  # the most on one server
        for k in np.unique(kind).tolist():
            room[k], best[k] = pool.slots(*self._kinds[k])
        tasks = self._tasks[index]
        total = room[kind]
        share = np.minimum(1.0, tasks / np.where(total > 0, total, 1))
        out[:, 1] = np.where(total > 0, share, 1.0)
        out[:, 2] = best[kind] >= tasks
        return out


def candidate_matrix(job: np.ndarray, step: np.ndarray, context: Sequence[float]) -> np.ndarray:
    """The network's input: per candidate its job row, step row and the context row."""
    n = job.shape[0]
    ctx = np.broadcast_to(np.asarray(context, dtype=np.float32), (n, len(CONTEXT_FEATURES)))
    return np.concatenate([job, step, ctx], axis=1).astype(np.float32, copy=False)


def _budget(view: JobView) -> int:
    stopping = view.spec.stopping
    if isinstance(stopping, IterationStop):
        return max(0, stopping.iterations)
    if isinstance(stopping, TargetMetricStop):
        return max(0, stopping.max_iterations)
    return 0


def _log1p(value: float) -> float:
    return math.log1p(value) if value > 0 and math.isfinite(value) else 0.0
