"""From a :class:`JobView` to MLF-H's tasks: their graph, Eq. 2/4 features, load and traffic.

A job runs ``spec.num_tasks`` tasks (one per process, rank order). ``spec.mlfs.partitions``
holds the P model partitions' sizes S_p / S^J and ``dependencies`` the (parent, child) edges
between partitions. Task ``k`` runs partition ``k % P`` of replica ``k // P`` (data parallelism
over copies of the partition graph, MLFS §3.2, Fig. 2); its share S_k^J is its partition's size
over the number of tasks running that partition, so the shares of all tasks sum to 1, and its
children are the tasks of the same replica running the partition's children (a last, partial
replica keeps the edges whose ends it has). No partitions (or an invalid graph: a size that is
not positive, an edge naming an unknown partition, a cycle) is a plain data-parallel job:
``1 / num_tasks`` each, no edges, as :func:`~controller.policy.mlfs.priority.data_parallel_tasks`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

from controller.policy.base import JobView
from controller.policy.mlfs.priority import TaskFeatures, TaskKey
from mlsched.model import MlfsSpec

Graph = tuple[tuple[float, ...], tuple[tuple[int, ...], ...]]  # (S_k^J, children) per task


@lru_cache(maxsize=4096)
def task_graph(tasks: int, spec: MlfsSpec) -> Graph:
    """Each task's partition share and children (module docstring). Memoised: a pure
    function of its arguments."""
    if tasks < 1:
        return (), ()
    parts = spec.partitions
    edges = _partition_edges(spec)
    if edges is None:
        return (1.0 / tasks,) * tasks, ((),) * tasks
    count = len(parts)
    full, extra = divmod(tasks, count)  # tasks running partition p: full, +1 for p < extra
    total = sum(parts)
    share = [min(1.0, parts[p] / total / (full + (p < extra))) for p in range(min(count, tasks))]
    shares = tuple(share[k % count] for k in range(tasks))
    children = []
    for base in range(0, tasks, count):  # one replica of the partition graph at a time
        last = tasks - base  # a last, partial replica keeps the edges whose ends it has
        for p in range(min(count, last)):
            children.append(tuple([base + c for c in edges[p] if c < last]))
    return shares, tuple(children)


def _partition_edges(spec: MlfsSpec) -> tuple[tuple[int, ...], ...] | None:
    """Children of each partition, or None for a data-parallel job (no or invalid graph)."""
    parts = spec.partitions
    if not parts or not all(math.isfinite(s) and s > 0 for s in parts):
        return None
    return _dag_children(len(parts), spec.dependencies)


@lru_cache(maxsize=1024)
def _dag_children(
    count: int, dependencies: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, ...], ...] | None:
    """Each of ``count`` partitions' children, sorted, or None when an edge names an unknown
    partition or a self-loop or the edges close a cycle. Memoised: jobs of one model share
    their graph's shape, whatever their partitions' sizes."""
    children: list[set[int]] = [set() for _ in range(count)]
    for parent, child in dependencies:
        if not (0 <= parent < count and 0 <= child < count) or parent == child:
            return None
        children[parent].add(child)
    indegree = [0] * count
    for kids in children:
        for c in kids:
            indegree[c] += 1
    ready = [p for p in range(count) if indegree[p] == 0]
    seen = 0
    while ready:  # Kahn: a DAG empties
        p = ready.pop()
        seen += 1
        for c in children[p]:
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    return tuple(tuple(sorted(kids)) for kids in children) if seen == count else None


def is_data_parallel(view: JobView) -> bool:
    """All tasks alike (same share, no edges): one task's priority stands for all."""
    shares, children = task_graph(max(1, view.spec.num_tasks), view.spec.mlfs)
    return not any(children) and len(set(shares)) <= 1


def loss_reductions(losses: Sequence[float], iteration: int) -> tuple[float, float]:
    """(δl_{I-1}, Σ δl_j) of Eq. 2 from the reported (first, previous, latest) losses, with
    ``iteration`` finished iterations. Fewer than two losses (or a non-finite one): equal
    reductions are assumed, so the ratio is 1 / (I - 1) (our choice, ``docs/mlfs.md``)."""
    if len(losses) >= 2 and all(math.isfinite(v) for v in losses):
        first, previous, latest = losses[0], losses[-2], losses[-1]
        return previous - latest, first - latest
    return 1.0, float(max(1, iteration))


def job_features(view: JobView, now: float, queued: bool) -> tuple[TaskFeatures, ...]:
    """The Eq. 2/4 features of the job's tasks; a data-parallel job gives only its task 0.

    I is the iteration now running (``view.iteration`` finished ones, plus one); the deadline
    is the earliest one (absolute); the waiting time counts only while queued.
    """
    template, shares, children = job_template(view, now, queued)
    if len(shares) == 1:
        return (template,)
    return (
        template,
        *(_variant(template, k, shares[k], children[k]) for k in range(1, len(shares))),
    )


def job_template(
    view: JobView, now: float, queued: bool
) -> tuple[TaskFeatures, tuple[float, ...], tuple[tuple[int, ...], ...]]:
    """Task 0's features (:func:`job_features`) and the partition share and children of
    every task :func:`job_features` gives (one task for a data-parallel job); the other
    tasks' features are task 0's with those two fields changed."""
    spec = view.spec
    tasks = max(1, spec.num_tasks)
    shares, children = task_graph(tasks, spec.mlfs)
    last, total = loss_reductions(view.losses, view.iteration)
    urgency = spec.mlfs.urgency if math.isfinite(spec.mlfs.urgency) else 1.0
    first = min((d.seconds_after_submit for d in spec.deadlines), default=None)
    remaining = view.estimated_remaining_s
    if remaining is not None and not math.isfinite(remaining):
        remaining = None
    template = TaskFeatures(
        job_id=view.id,
        task=0,
        urgency=max(0.0, urgency),
        iteration=max(0, view.iteration) + 1,
        last_loss_reduction=last,
        total_loss_reduction=total,
        partition=shares[0],
        deadline=None if first is None else view.submit_time + first,
        remaining_s=None if remaining is None else max(0.0, remaining),
        waiting_s=max(0.0, now - view.queued_since) if queued else 0.0,
        children=children[0],
    )
    if not any(children) and len(set(shares)) <= 1:  # is_data_parallel
        return template, shares[:1], children[:1]
    return template, shares, children


def _variant(
    template: TaskFeatures, task: int, partition: float, children: tuple[int, ...]
) -> TaskFeatures:
    """``template`` for another task of its job. Built without ``__init__`` (its validation
    dominated the cost): only the fields that :func:`task_graph` computes differ, and they are
    valid by construction (a test checks the result equals the validated one)."""
    f = object.__new__(TaskFeatures)
    f.__dict__.update(template.__dict__)
    f.__dict__.update(task=task, partition=partition, children=children)
    return f


def task_demand(view: JobView, resources: Sequence[str]) -> tuple[float, ...]:
    """One task's load per resource type: ``resource_usage`` (summed over the job's tasks) over
    its task count, each in [0, 1]; a resource never measured counts 0 (``docs/mlfs.md``)."""
    usage: Mapping[str, float] = view.resource_usage
    if not usage:
        return (0.0,) * len(resources)
    tasks = len(view.placement) or max(1, view.spec.num_tasks)
    return tuple(_share(usage.get(r, 0.0) / tasks) for r in resources)


def peer_traffic(view: JobView) -> dict[int, dict[TaskKey, float]]:
    """Communication volume of each task with each peer task (relative units): 1 with every
    other task of the job (the all-reduce exchange) plus 1 along each dependency edge."""
    tasks = max(1, view.spec.num_tasks)
    _, children = task_graph(tasks, view.spec.mlfs)
    peers = [(view.id, j) for j in range(tasks)]
    traffic: dict[int, dict[TaskKey, float]] = {}
    for k in range(tasks):
        traffic[k] = volumes = dict.fromkeys(peers, 1.0)
        del volumes[peers[k]]
    for k, kids in enumerate(children):
        for c in kids:
            traffic[k][(view.id, c)] += 1.0
            traffic[c][(view.id, k)] += 1.0
    return traffic


def _share(value: float) -> float:
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0
