"""The preemptive priority scheduler shared by ``srtf``, ``tiresias``, ``edf`` and ``themis``.

Those policies differ only in how they rank jobs; :func:`schedule_by_priority` turns a ranking
into a :class:`Decision` with the same lease, preemption and backfill rules for all of them:

* **One priority order over all jobs**, queued and active, given by a policy's ``key`` (smaller
  is better; every key ends with the job id, so the order is total and deterministic). The first
  ``preempt_depth`` components of the key are the job's *preemption class*: a queued job may
  displace an active one only if its class is strictly better. Components after that are
  tie-breaks (FIFO, ids) and never cause a preemption.
* **Queued jobs are served in priority order.** A job that fits on the free GPUs is launched
  (``place_job``). One that does not fit is skipped and lower-priority jobs may start behind it
  (backfilling, as the schedulers of the Tiresias simulator do); a job that cannot fit even on
  the empty cluster is ignored and blocks nothing.
* **Preemption only at lease boundaries.** A job that does not fit now first looks at the GPUs
  already on their way back (``snapshot.busy``: suspending or cancelling jobs; and GPUs of jobs
  suspended earlier in this same decision). If those suffice, the job *reserves* its placement
  on them (and on the free GPUs it needs next to them, so nothing lower backfills there) and
  waits for the release: nobody else is suspended on its behalf. Otherwise it may suspend active
  jobs whose lease has expired (``snapshot.expired()``) and whose class is strictly worse than
  its own, lowest priority first, until it fits; the set is then pruned so that every victim is
  needed (dropping the highest-priority victims first). If even all such victims are not enough,
  nobody is suspended for it. Jobs whose lease has not expired are never touched.
* **Every expired lease is answered**: each expired job is either suspended (as a victim, once)
  or renewed.

Complexity, for q queued jobs, e expired jobs, n nodes and G GPUs (no quadratic term in q):
sorting is O((q + e) log(q + e)). A fit test is first an O(1) chunk count (``place_job``
succeeds exactly when the GPUs hold enough ``gpus_per_process`` chunks, and the counts are kept
up to date incrementally), so on a full cluster a queued job costs O(1); ``place_job``
(O(n log n)) runs only when the count says yes, i.e. about once per launch or reservation (at
most G of each), and its failures are cached per (gpus, gpus_per_process) until the map
changes. The empty-cluster test is cached per (gpus, gpus_per_process). A victim search walks
the candidates once (O(e) plus the GPUs they hold) and prunes the few it picked; its failures
are cached per ``gpus_per_process`` until the map changes (later jobs have fewer candidates,
so a failure for k tasks also rules out every k' >= k). The loop stops as soon as no GPU is
free or on its way back and no candidate victim is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.placement import TaskPlacement, place_job
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend

Key = tuple[Any, ...]


class GpuMap:
    """A mutable free-GPU map (node -> GPU indices) with chunk counts kept up to date.

    ``slots(p)`` is the number of whole ``p``-GPU chunks over all nodes, which decides whether
    ``place_job`` can succeed. ``version`` changes with every change to the map.
    """

    def __init__(self, gpus: Mapping[str, Iterable[int]]) -> None:
        self.map: dict[str, tuple[int, ...]] = {n: tuple(ids) for n, ids in gpus.items()}
        self.total = sum(len(ids) for ids in self.map.values())
        self.version = 0
        self._slots: dict[int, int] = {}
        self._failed: dict[tuple[int, int], int] = {}  # (gpus, per process) -> version

    def slots(self, per_process: int) -> int:
        if per_process not in self._slots:
            self._slots[per_process] = sum(len(ids) // per_process for ids in self.map.values())
        return self._slots[per_process]

    def place(self, gpus: int, per_process: int) -> tuple[TaskPlacement, ...] | None:
        """``place_job`` on this map, short-circuited by the chunk count and the failure cache."""
        if self.slots(per_process) < gpus // per_process:
            return None
        if self._failed.get((gpus, per_process)) == self.version:
            return None
        placement = place_job(self.map, gpus, per_process)
        if placement is None:
            self._failed[(gpus, per_process)] = self.version
        return placement

    def take(self, placements: Iterable[TaskPlacement]) -> None:
        """Remove these GPUs (those of them that are in the map)."""
        for node_id, gone in _by_node(placements, self.map).items():
            self._set(node_id, tuple(i for i in self.map[node_id] if i not in gone))

    def give(self, placements: Iterable[TaskPlacement]) -> None:
        """Add these GPUs (on nodes that are in the map)."""
        for node_id, back in _by_node(placements, self.map).items():
            self._set(node_id, tuple(sorted(back.union(self.map[node_id]))))

    def _set(self, node_id: str, ids: tuple[int, ...]) -> None:
        before = len(self.map[node_id])
        if len(ids) == before and ids == self.map[node_id]:
            return
        for per_process in self._slots:
            self._slots[per_process] += len(ids) // per_process - before // per_process
        self.total += len(ids) - before
        self.map[node_id] = ids
        self.version += 1


def schedule_by_priority(
    snapshot: ClusterSnapshot,
    key: Callable[[JobView], Key],
    *,
    lease_s: float,
    preempt_depth: int,
) -> Decision:
    """Launch, reserve, preempt and renew by ``key`` (see the module docstring)."""
    queued = sorted(((key(j), j) for j in snapshot.queued), key=_first)
    # Candidate victims, lowest priority first: for a queued job of class c the candidates are
    # the expired jobs of class > c, a prefix of this list that shrinks as c gets worse.
    expired = sorted(((key(j), j) for j in snapshot.expired()), key=_first, reverse=True)
    classes = [k[:preempt_depth] for k, _ in expired]

    whole = GpuMap({n.id: n.gpu_indices for n in snapshot.nodes})
    free = GpuMap(snapshot.free_gpus())
    avail = GpuMap(snapshot.free_gpus())  # free now, or once in-flight releases complete
    avail.give(p for view in snapshot.busy for p in view.placement)

    runnable: dict[tuple[int, int], bool] = {}  # (gpus, per process) -> fits the empty cluster
    launches: list[Launch] = []
    suspends: list[Suspend] = []
    chosen: set[str] = set()
    eligible = len(expired)  # candidates for the current job: expired[:eligible], not chosen
    unchosen = eligible
    no_victims: dict[int, tuple[int, int]] = {}  # per process -> (avail.version, fewest tasks)

    for job_key, job in queued:
        job_class = job_key[:preempt_depth]
        while eligible and classes[eligible - 1] <= job_class:
            eligible -= 1
            if expired[eligible][1].id not in chosen:
                unchosen -= 1
        if avail.total == 0 and unchosen == 0:
            break  # nothing free, nothing coming back, nobody left to preempt
        gpus, per_process = job.gpus, job.spec.gpus_per_process
        shape = (gpus, per_process)
        if shape not in runnable:
            runnable[shape] = whole.place(gpus, per_process) is not None
        if not runnable[shape]:
            continue  # can never run on this cluster: must not block anything
        placement = free.place(gpus, per_process)
        if placement is not None:
            launches.append(Launch(job.id, placement, lease_s))
            free.take(placement)
            avail.take(placement)
            continue
        placement = avail.place(gpus, per_process)
        if placement is not None:  # GPUs being released will do: reserve them, suspend nobody
            free.take(placement)
            avail.take(placement)
            continue
        if unchosen == 0:
            continue
        tasks = gpus // per_process
        failed = no_victims.get(per_process)
        if failed is not None and failed[0] == avail.version and tasks >= failed[1]:
            continue
        candidates = [v for _, v in expired[:eligible] if v.id not in chosen]
        victims = _victims_to_fit(avail, candidates, gpus, per_process)
        if victims is None:
            no_victims[per_process] = (avail.version, tasks)
            continue
        for victim in victims:
            chosen.add(victim.id)
            unchosen -= 1
            suspends.append(Suspend(victim.id, f"lease expired; yields to {job.id}"))
            avail.give(victim.placement)
        placement = avail.place(gpus, per_process)
        if placement is not None:
            free.take(placement)
            avail.take(placement)

    renewals = tuple(Renew(j.id, lease_s) for _, j in reversed(expired) if j.id not in chosen)
    return Decision(launch=tuple(launches), renew=renewals, suspend=tuple(suspends))


def _victims_to_fit(
    avail: GpuMap, candidates: list[JobView], gpus: int, per_process: int
) -> list[JobView] | None:
    """A minimal prefix-then-pruned set of ``candidates`` whose release lets the job fit.

    Candidates are added in order (lowest priority first) until the chunk count suffices; then
    each chosen victim, highest priority first, is dropped again if the job still fits without
    it. ``None`` when releasing every candidate is not enough.
    """
    tasks = gpus // per_process
    slots = avail.slots(per_process)
    grown: dict[str, set[int]] = {}
    picked: list[JobView] = []
    for victim in candidates:
        for p in victim.placement:
            if p.node_id not in avail.map:
                continue
            ids = grown.setdefault(p.node_id, set(avail.map[p.node_id]))
            before = len(ids) // per_process
            ids.update(p.gpu_indices)
            slots += len(ids) // per_process - before
        picked.append(victim)
        if slots >= tasks:
            break
    else:
        return None
    if not _fits_with(avail, picked, gpus, per_process):
        return None
    for victim in reversed(picked[:]):
        rest = [v for v in picked if v is not victim]
        if _fits_with(avail, rest, gpus, per_process):
            picked = rest
    return picked


def _fits_with(avail: GpuMap, victims: list[JobView], gpus: int, per_process: int) -> bool:
    grown: dict[str, set[int]] = {}
    for victim in victims:
        for p in victim.placement:
            if p.node_id in avail.map:
                grown.setdefault(p.node_id, set(avail.map[p.node_id])).update(p.gpu_indices)
    slots = avail.slots(per_process) + sum(
        len(ids) // per_process - len(avail.map[n]) // per_process for n, ids in grown.items()
    )
    if slots < gpus // per_process:
        return False
    merged = dict(avail.map)
    for node_id, ids in grown.items():
        merged[node_id] = tuple(sorted(ids))
    return place_job(merged, gpus, per_process) is not None


def _by_node(
    placements: Iterable[TaskPlacement], known: Mapping[str, object]
) -> dict[str, set[int]]:
    grouped: dict[str, set[int]] = {}
    for p in placements:
        if p.node_id in known:
            grouped.setdefault(p.node_id, set()).update(p.gpu_indices)
    return grouped


def _first(item: tuple[Key, JobView]) -> Key:
    return item[0]


def fifo_key(job: JobView) -> tuple[float, float, str]:
    """Queue order: when the job last joined the queue, then submission, then id."""
    return (job.queued_since, job.submit_time, job.id)
