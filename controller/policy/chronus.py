"""Chronus (Gao et al., SoCC 2021): deadline guarantees by time-aware lease scheduling.

Written from the paper and from the description of its public artifact (ChronusArtifact,
``time-aware-with-lease``); see ``docs/chronus.md`` for the sources of every default and for
the choices the paper leaves open. The mechanism:

* **Leases on one grid** (§4.2): time is cut into SLO leases of ``lease_s`` (20 min, the
  artifact's Philly setting), numbered ``k = floor(t / lease_s)``. Best-effort work runs on
  slot leases of ``slot_s`` (5 min, the artifact's best-effort slot) on the same grid.
* **Estimates** (§4.1): a job's remaining time is its profiled estimate (``JobView.
  estimated_remaining_s``), padded by ``margin`` and by the checkpoint + resume cost each lease
  may add; ``L_i = ceil(padded / lease_s)`` leases remain to be guaranteed.
* **Round-up allocation** (§4.3): an SLO job is planned and placed on the smallest buddy cell
  that holds it (3 GPUs -> a 4-GPU cell, 5-7 -> a node, more -> whole nodes), consolidated.
* **Admission control** (§4.2), as the artifact's fast check: when an SLO job arrives, its
  ``L_i`` leases are packed *latest first*, from the last lease that ends by its *first*
  deadline back towards the next lease, into the room the plans of the jobs admitted before it
  leave (those plans are kept, as the artifact keeps its cached solutions). It is admitted if
  they fit, else rejected: it then runs as best-effort work and is never guaranteed. A soft
  job's later deadlines serve only when its plan is repaired.
* **Time-aware lease scheduling** (§4.2): at each SLO lease boundary the admitted jobs planned
  for lease ``k`` are *guaranteed*: they get the lease (renewed in place or launched). Plans
  are repaired there: leases in the past are dropped, a job that needs fewer leases than it
  holds gives up its earliest ones, one that needs more gets the latest free ones before its
  deadline (a soft job moves to a later deadline when that is the only way), else it is
  *overdue*, first among opportunistic jobs, as the artifact's force-guarantee of jobs past
  their estimate. Between boundaries a job running ahead of its plan gives back its earliest
  leases as soon as it needs fewer. While no SLO job is rejected, a boundary fills lease ``k``
  with planned work (the artifact's ``adaptive`` objective), else plans stay latest first.
* **Opportunistic running** (the artifact's spot resources): GPUs left over go, in order, to
  overdue jobs and *forced* rejected SLO jobs (those whose remaining time fits in the rest of
  the current lease get spot GPUs, as the artifact does every slot), then best-effort and
  rejected SLO jobs by least remaining GPU-time, then admitted jobs outside their planned
  leases by least slack, then SLO jobs that can no longer meet any deadline. At an SLO lease
  boundary every lease ends and this order picks who runs; between boundaries freed GPUs are
  filled in the same order, and only guaranteed, overdue or forced jobs preempt (jobs of the
  opportunistic classes whose slot lease ended).
* **Reserved profiling GPUs** (§4.1): ``profile_nodes`` nodes (the last ones by id) are kept
  out of the SLO plan for profiling runs of jobs without an estimate (one slot on the job's
  GPU count, at most a node; the artifact profiles on a separate small cluster); while nobody
  waits for profiling they are lent to opportunistic jobs on slot leases.

State kept between cycles (bounded by the live jobs): each SLO job's admission outcome and plan,
GPUs planned per future lease, the forced set of the current lease, and for reports the ids ever
admitted (``admitted_ever``) and rejected (``rejected_ever``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.unisched.cells import (
    CellPool,
    CellRequest,
    allocations,
    cell_gpus,
    node_cells,
    top_level,
)
from mlsched.model import JobClass

_EPS = 1e-6
# Opportunistic tiers (smaller runs first); tier 0 is the guaranteed set of the current lease.
GUARANTEED, URGENT, SPOT, SLACK, HOPELESS = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class ChronusConfig:
    """Settings; sources in ``docs/chronus.md``."""

    lease_s: float = 1200.0  # SLO lease: 20 min (artifact batch_run.sh, Philly traces)
    slot_s: float = 300.0  # best-effort slot: 5 min (artifact BEST_SLOT)
    margin: float = 1.1  # estimate padding (artifact: duration x coef x 1.1)
    overhead_s: float = 30.0  # checkpoint + resume per lease, x (1 + log2 g): 0.1 + 0.4 min
    profile_nodes: int = 0  # nodes reserved for profiling (the artifact profiles off-cluster)
    profile_s: float = 300.0  # one profiling run: one slot
    admission: bool = True  # False: admit every SLO job (no guarantee check; an ablation)
    adaptive: bool = True  # fill the current lease with planned work while none is rejected

    def __post_init__(self) -> None:
        if not (self.lease_s > 0 and self.slot_s > 0 and self.profile_s > 0):
            raise ValueError("lease_s, slot_s and profile_s must be positive")
        ratio = self.lease_s / self.slot_s
        if abs(ratio - round(ratio)) > 1e-9:
            raise ValueError("lease_s must be an integral multiple of slot_s (one grid)")
        if self.margin < 1 or self.overhead_s < 0 or self.profile_nodes < 0:
            raise ValueError("need margin >= 1, overhead_s >= 0, profile_nodes >= 0")


@dataclass
class _Slo:
    """An SLO job's admission outcome and, when admitted, its planned leases."""

    admitted: bool
    target: int = -1  # index of the deadline it is admitted for
    last: int = -1  # last lease index that ends by that deadline
    plan: list[int] = field(default_factory=list)  # lease indices, ascending
    overdue: bool = False  # its plan cannot cover what it still needs
    size: int = 0  # GPUs of its round-up allocation, as planned


class ChronusPolicy:
    """Chronus as a :class:`~controller.policy.base.Policy` (see the module docstring)."""

    def __init__(self, config: ChronusConfig | None = None, name: str = "chronus") -> None:
        self.config = config or ChronusConfig()
        self.name = name
        self._slo: dict[str, _Slo] = {}
        self._planned: dict[int, int] = {}  # lease index -> GPUs promised (rounded)
        self._index: int | None = None  # the lease whose boundary was processed last
        self._forced: set[str] = set()
        self._known: set[str] = set()  # jobs seen (SLO or not) and given their admission
        self.admitted_ever: set[str] = set()
        self.rejected_ever: set[str] = set()
        self.stats: dict[str, int] = {}  # rejections by cause, filled boundaries (for reports)
        self._rejected_since = False  # an SLO job was rejected since the last boundary

    # --- the cycle --------------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if not snapshot.nodes:
            return Decision()
        cfg = self.config
        now = snapshot.now
        node_size = max(len(n.gpu_indices) for n in snapshot.nodes)
        levels = top_level(node_size) + 1
        pool_ids = self._profile_nodes(snapshot)
        capacity = sum(len(n.gpu_indices) for n in snapshot.nodes if n.id not in pool_ids)
        k = math.floor(now / cfg.lease_s + _EPS)
        boundary = self._index is None or k > self._index
        views = (*snapshot.active, *snapshot.queued)
        self._forget({v.id for v in (*views, *snapshot.busy)})
        if boundary:
            self._index = k
            self._forced.clear()
            for key in [i for i in self._planned if i < k]:
                del self._planned[key]
        at_edge = abs(now - k * cfg.lease_s) < _EPS
        start = k if at_edge else k + 1  # first lease an arrival can be promised
        arrivals = [v for v in views if v.id not in self._known]
        for view in sorted(arrivals, key=lambda v: (v.submit_time, v.id)):
            self._known.add(view.id)
            self._admit(view, start, capacity, levels)
        for view in views:
            state = self._slo.get(view.id)
            if state is not None and state.admitted:
                if boundary:
                    self._repair(view, state, k, capacity, levels)
                elif state.plan and state.plan[0] != k:
                    self._trim(view, state, levels)
        for view in views:  # SLO jobs that can no longer meet any deadline lose their plan
            state = self._slo.get(view.id)
            if state is not None and state.plan and self._hopeless(view, now):
                self._release(state)
        if boundary and cfg.adaptive:
            if not self._rejected_since and not self._unaccepted(views):
                self._fill_lease(views, k, capacity)
            self._rejected_since = False
        self._force(snapshot, k, capacity, levels)
        ranks = {v.id: self._rank(v, now, k, levels) for v in views}
        return self._schedule(snapshot, ranks, boundary, k, levels, pool_ids)

    # --- admission and plans (§4.2) ---------------------------------------------------------
    def _admit(self, view: JobView, start: int, capacity: int, levels: int) -> None:
        """Admission control (§4.2) as the artifact's fast check (``batch_fast_check_if_packable``):
        the newcomer's ``L`` leases are packed *latest first*, from the last lease that ends by
        its *first* deadline back towards ``start``, into the room the kept plans leave. The
        artifact lists one entry per deadline but checks each job once, on its least-laxity
        entry, i.e. its first deadline: a soft job is admitted for its first deadline or not at
        all (its later deadlines serve only when its plan is repaired)."""
        if view.job_class is JobClass.BEST_EFFORT or not view.spec.deadlines:
            return
        if view.estimated_remaining_s is None:  # admitted once profiled
            self._known.discard(view.id)
            return
        need = self._need(view, levels)
        size = _rounded(view.gpus, levels)
        ends = [self._last_lease(view, d.seconds_after_submit) for d in _ordered(view)]
        state = _Slo(admitted=False, size=size)
        self._slo[view.id] = state
        if not self.config.admission:
            ends = [max(end, start + need - 1) for end in ends]
        st = self.stats
        if size <= capacity and ends:
            last = ends[0]
            plan = self._free_leases(start, last, size, capacity, need, ())
            if len(plan) < need:  # by cause: the window alone, or the kept plans
                cause = "rejected_window" if last - start + 1 < need else "rejected_full"
                st[cause] = st.get(cause, 0) + 1
            else:
                state.admitted, state.target, state.last = True, 0, last
                self._take(state, plan, size)
        (self.admitted_ever if state.admitted else self.rejected_ever).add(view.id)
        self._rejected_since |= not state.admitted

    def _unaccepted(self, views: Iterable[JobView]) -> bool:
        """Whether a live SLO job was never admitted (the artifact's UNACCEPTED_SLO count)."""
        return any(
            (st := self._slo.get(v.id)) is not None
            and not st.admitted
            and v.id not in self.admitted_ever
            for v in views
        )

    def _fill_lease(self, views: Iterable[JobView], k: int, capacity: int) -> None:
        """The artifact's ``adaptive`` MILP objective at a lease boundary: while no SLO job is
        rejected (none live, none since the last boundary) it maximises the GPUs guaranteed in
        the current lease, else it minimises them. Maximise: admitted jobs not planned for
        lease ``k`` move their earliest planned lease to ``k`` while it has room, largest
        first (an earlier lease never breaks a deadline). Minimise: plans stay latest first."""
        movable = []
        for view in views:
            state = self._slo.get(view.id)
            if state is not None and state.admitted and state.plan and state.plan[0] > k:
                movable.append((-state.size, view.submit_time, view.id, state))
        for _, _, _, state in sorted(movable, key=lambda m: m[:3]):
            if self._planned.get(k, 0) + state.size <= capacity:
                self._give(state.plan[:1], state.size)
                state.plan = state.plan[1:]
                self._take(state, [k], state.size)
                self.stats["pulled_leases"] = self.stats.get("pulled_leases", 0) + 1

    def _repair(self, view: JobView, state: _Slo, k: int, capacity: int, levels: int) -> None:
        """At boundary ``k``: drop past leases, give back extra ones (earliest first, as the
        artifact trims its cached solution), add missing ones latest first before the deadline;
        a soft job that no longer fits before its deadline moves to the next deadline whose
        window holds its plan (the artifact's re-solve picks one deadline entry per job, by
        reward), else it is overdue."""
        size = _rounded(view.gpus, levels)
        state.plan = [i for i in state.plan if i >= k]
        need = self._need(view, levels)
        if len(state.plan) > need:
            extra = len(state.plan) - need
            self._give(state.plan[:extra], size)
            state.plan = state.plan[extra:]
        elif len(state.plan) < need:
            missing = need - len(state.plan)
            more = self._free_leases(k, state.last, size, capacity, missing, state.plan)
            if len(more) < missing:
                ends = [self._last_lease(view, d.seconds_after_submit) for d in _ordered(view)]
                for target in range(state.target + 1, len(ends)):
                    later = self._free_leases(k, ends[target], size, capacity, missing, state.plan)
                    if len(later) == missing:
                        state.target, state.last, more = target, ends[target], later
                        break
            self._take(state, more, size)
        state.overdue = len(state.plan) < need

    def _trim(self, view: JobView, state: _Slo, levels: int) -> None:
        """Between boundaries a job running outside its planned leases gives back its earliest
        planned leases as soon as its estimate needs fewer (the artifact recounts a job's
        leases every minute, for jobs not holding a lease, and trims its cached solution)."""
        extra = len(state.plan) - self._need(view, levels)
        if extra > 0:
            self._give(state.plan[:extra], state.size)
            state.plan = state.plan[extra:]

    def _free_leases(
        self, first: int, last: int, size: int, capacity: int, count: int, taken: Iterable[int]
    ) -> list[int]:
        """Up to ``count`` leases in [first, last] with ``size`` GPUs unplanned, latest first
        (the artifact's packer walks each job's window from its last lease back), ascending."""
        skip = set(taken)
        found: list[int] = []
        planned = self._planned
        for i in range(last, first - 1, -1):
            if len(found) == count:
                break
            if i not in skip and planned.get(i, 0) + size <= capacity:
                found.append(i)
        found.reverse()
        return found

    def _take(self, state: _Slo, leases: list[int], size: int) -> None:
        for i in leases:
            self._planned[i] = self._planned.get(i, 0) + size
        state.plan = sorted((*state.plan, *leases))

    def _give(self, leases: Iterable[int], size: int) -> None:
        for i in leases:
            left = self._planned.get(i, 0) - size
            if left > 0:
                self._planned[i] = left
            else:
                self._planned.pop(i, None)

    def _release(self, state: _Slo) -> None:
        self._give(state.plan, state.size)
        state.plan = []

    def _forget(self, live: set[str]) -> None:
        for job_id in [j for j in self._slo if j not in live]:
            state = self._slo.pop(job_id)
            self._release(state)
        self._known &= live
        self._forced &= live

    def _force(self, snapshot: ClusterSnapshot, k: int, capacity: int, levels: int) -> None:
        """Spot GPUs of this lease for rejected SLO jobs that can finish before it ends,
        least remaining GPU-time first (the artifact's force guarantee, every slot)."""
        now = snapshot.now
        left = (k + 1) * self.config.lease_s - now
        spot = capacity - self._planned.get(k, 0)
        spot -= sum(_rounded(v.gpus, levels) for v in snapshot.active if v.id in self._forced)
        spot -= sum(_rounded(v.gpus, levels) for v in snapshot.queued if v.id in self._forced)
        chosen = []
        by_now: dict[str, float] = {}
        for view in snapshot.queued:
            state = self._slo.get(view.id)
            rem = view.estimated_remaining_s
            if state is None or state.admitted or view.id in self._forced or rem is None:
                continue
            if rem <= left and not self._hopeless(view, now):
                chosen.append((rem * view.gpus, view.submit_time, view.id, view.gpus))
                by_now[view.id] = view.submit_time
        for _, _, job_id, gpus in sorted(chosen):
            size = _rounded(gpus, levels)
            if size <= spot:
                spot -= size
                self._forced.add(job_id)
                if by_now[job_id] >= k * self.config.lease_s:  # the artifact admits it then
                    self.admitted_ever.add(job_id)
                    self.rejected_ever.discard(job_id)

    # --- estimates --------------------------------------------------------------------------
    def _need(self, view: JobView, levels: int) -> int:
        """L_i: leases still to guarantee, from the padded estimate (§4.1)."""
        rem = view.estimated_remaining_s or 0.0
        cfg = self.config
        per_lease = cfg.overhead_s * (1 + math.log2(max(1, view.gpus)))
        padded = rem * cfg.margin * (1 + per_lease / cfg.lease_s)
        return max(0, math.ceil(padded / cfg.lease_s - _EPS))

    def _last_lease(self, view: JobView, after_submit: float) -> int:
        """The last lease that ends by the deadline ``submit + after_submit``."""
        return math.floor((view.submit_time + after_submit) / self.config.lease_s + _EPS) - 1

    def _hopeless(self, view: JobView, now: float) -> bool:
        """An SLO job whose estimate ends after its last deadline (the artifact's LOWEST)."""
        if view.job_class is JobClass.BEST_EFFORT or not view.spec.deadlines:
            return False
        rem = view.estimated_remaining_s
        last = max(d.seconds_after_submit for d in view.spec.deadlines if d.reward > 0)
        return rem is not None and now + rem > view.submit_time + last + _EPS

    def _rank(self, view: JobView, now: float, k: int, levels: int) -> tuple:
        rem = view.estimated_remaining_s
        work = math.inf if rem is None else rem * view.gpus
        state = self._slo.get(view.id)
        tail = (view.submit_time, view.id)
        if state is not None and state.admitted and state.plan and state.plan[0] == k:
            return (GUARANTEED, -_rounded(view.gpus, levels), *tail)
        if self._hopeless(view, now):
            return (HOPELESS, work, *tail)
        if view.id in self._forced or (state is not None and state.overdue):
            return (URGENT, work, *tail)
        if state is not None and state.admitted:
            deadline = view.submit_time + _ordered(view)[state.target].seconds_after_submit
            slack = deadline - now - (rem or 0.0)
            return (SLACK, slack * view.gpus, *tail)
        return (SPOT, work, *tail)

    # --- turning ranks into orders ----------------------------------------------------------
    def _schedule(
        self,
        snapshot: ClusterSnapshot,
        ranks: Mapping[str, tuple],
        boundary: bool,
        k: int,
        levels: int,
        pool_ids: set[str],
    ) -> Decision:
        cfg = self.config
        now = snapshot.now
        slot_end = (math.floor(now / cfg.slot_s + _EPS) + 1) * cfg.slot_s
        lease_end = (k + 1) * cfg.lease_s
        expired = {v.id: v for v in snapshot.expired()}
        profiling = [v for v in snapshot.queued if self._needs_profile(v, levels, pool_ids)]
        suspend: list[Suspend] = []
        victims: dict[str, JobView] = {}

        def evict(view: JobView, reason: str) -> None:
            victims[view.id] = view
            suspend.append(Suspend(view.id, reason))

        for view in expired.values():  # a profiling run resumes later on its full count
            if _held(view) < view.gpus and view.estimated_remaining_s is not None:
                evict(view, "profiling done")
        if boundary:
            # Every lease ends here: the ranking picks who runs (by rounded GPU count).
            room = sum(len(n.gpu_indices) for n in snapshot.nodes)
            room -= sum(_held(v) for v in snapshot.active if v.id not in expired)
            room -= sum(_held(v) for v in snapshot.busy)
            wanted: set[str] = set()
            pool = (*(v for v in expired.values() if v.id not in victims), *snapshot.queued)
            for view in sorted(pool, key=lambda v: ranks[v.id]):
                # a renewal keeps its GPUs; a launch takes its round-up cell
                size = _held(view) if view.placement else _rounded(view.gpus, levels)
                if size <= room:
                    room -= size
                    wanted.add(view.id)
            for view in expired.values():
                if view.id not in wanted and view.id not in victims:
                    evict(view, "lease ended: outranked (Chronus)")
        if profiling:  # lent profiling GPUs come back at the end of their slot lease
            for view in expired.values():
                if view.id not in victims and any(p.node_id in pool_ids for p in view.placement):
                    evict(view, "profiling GPUs reclaimed")
        launch = self._fill(snapshot, ranks, victims, evict, profiling, pool_ids, levels)
        renew: list[Renew] = []
        for view in expired.values():
            if view.id not in victims:
                end = lease_end if ranks[view.id][0] == GUARANTEED else slot_end
                renew.append(Renew(view.id, _length(end, now, cfg.slot_s)))
        timed = []
        for job_id, placement, tier in launch:
            end = now + cfg.profile_s if tier is None else lease_end if tier == 0 else slot_end
            timed.append(Launch(job_id, placement, _length(end, now, cfg.slot_s)))
        return Decision(launch=tuple(timed), renew=tuple(renew), suspend=tuple(suspend))

    def _fill(
        self,
        snapshot: ClusterSnapshot,
        ranks: Mapping[str, tuple],
        victims: dict[str, JobView],
        evict: Callable[[JobView, str], None],
        profiling: list[JobView],
        pool_ids: set[str],
        levels: int,
    ) -> list[tuple[str, tuple[TaskPlacement, ...], int | None]]:
        """Queued jobs in rank order onto free GPUs; those whose GPUs are still being released
        reserve them. A guaranteed, overdue or forced job that fits nowhere may suspend
        opportunistic jobs whose slot lease ended, lowest rank first. Returns (job, placement,
        tier; None for a profiling run)."""
        free = {n.id: set(n.free_gpu_indices) for n in snapshot.nodes}
        launch: list[tuple[str, tuple[TaskPlacement, ...], int | None]] = []
        if profiling:  # profiling runs first, on the reserved nodes only
            pool = CellPool.of({n: sorted(free[n]) for n in pool_ids}, levels)
            for view in profiling:
                placed = pool.place_all([_request(view, levels)]).get(view.id)
                if placed is not None:
                    _remove(free, placed)
                    launch.append((view.id, placed, None))
        lend = not profiling
        avail = {n: set(ids) for n, ids in free.items() if lend or n not in pool_ids}
        for view in (*victims.values(), *snapshot.busy):
            _add(avail, view.placement, lend, pool_ids)
        pool = CellPool.of({n: sorted(ids) for n, ids in avail.items()}, levels)
        left = sum(len(ids) for ids in avail.values())
        candidates = sorted(
            (v for v in snapshot.expired() if v.id not in victims and ranks[v.id][0] >= SPOT),
            key=lambda v: ranks[v.id],
            reverse=True,
        )  # lowest rank first
        failed: dict[int, int] = {}  # rounded size -> pool version at which it did not fit
        version = 0
        skip = {v.id for v in profiling}
        for view in sorted(snapshot.queued, key=lambda v: ranks[v.id]):
            tier = ranks[view.id][0]
            if tier > URGENT and left <= 0:
                break
            if view.id in skip or (view.estimated_remaining_s is None and pool_ids):
                continue
            size = _rounded(view.gpus, levels)
            may_evict = tier <= URGENT and bool(candidates)
            if failed.get(size) == version and not may_evict:
                continue
            request = _request(view, levels)
            placed = pool.place_all([request]).get(view.id)
            while placed is None and tier <= URGENT and candidates:
                if ranks[candidates[0].id] <= ranks[view.id]:
                    break
                victim = candidates.pop(0)
                evict(victim, f"lease ended; yields to {view.id} (Chronus)")
                for p in victim.placement:
                    if p.node_id in avail:
                        avail[p.node_id].update(p.gpu_indices)
                        pool.cells[p.node_id] = node_cells(sorted(avail[p.node_id]), levels)
                        left += len(p.gpu_indices)
                version += 1
                placed = pool.place_all([request]).get(view.id)
            if placed is None:
                failed[size] = version
                continue
            for p in placed:
                avail[p.node_id].difference_update(p.gpu_indices)
                left -= len(p.gpu_indices)
            if all(g in free[p.node_id] for p in placed for g in p.gpu_indices):
                _remove(free, placed)
                launch.append((view.id, placed, tier))
        return launch

    def _needs_profile(self, view: JobView, levels: int, pool_ids: set[str]) -> bool:
        node_size = 1 << (levels - 1)
        return bool(pool_ids) and view.estimated_remaining_s is None and view.gpus <= node_size

    def _profile_nodes(self, snapshot: ClusterSnapshot) -> set[str]:
        count = min(self.config.profile_nodes, max(0, len(snapshot.nodes) - 1))
        if count == 0:
            return set()
        return {n.id for n in sorted(snapshot.nodes, key=lambda n: n.id)[-count:]}


def _ordered(view: JobView) -> list:
    return sorted(view.spec.deadlines, key=lambda d: d.seconds_after_submit)


def _rounded(gpus: int, levels: int) -> int:
    """GPUs of the round-up allocation (§4.3): one buddy cell, or whole nodes."""
    return cell_gpus(allocations(max(1, gpus), levels, roundup=True)[0])


def _request(view: JobView, levels: int) -> CellRequest:
    alloc = allocations(max(1, view.gpus), levels, roundup=True)[0]
    return CellRequest(view.id, alloc, view.gpus, view.spec.gpus_per_process)


def _held(view: JobView) -> int:
    return sum(len(p.gpu_indices) for p in view.placement)


def _length(end: float, now: float, step: float) -> float:
    """A lease from ``now`` to the grid point ``end`` (one more step if it is upon us)."""
    length = end - now
    return length if length > 1.0 else length + step


def _remove(free: dict[str, set[int]], placement: Iterable[TaskPlacement]) -> None:
    for p in placement:
        free[p.node_id].difference_update(p.gpu_indices)


def _add(
    avail: dict[str, set[int]],
    placement: Iterable[TaskPlacement],
    lendable: bool,
    pool_ids: set[str],
) -> None:
    for p in placement:
        if lendable or p.node_id not in pool_ids:
            avail.setdefault(p.node_id, set()).update(p.gpu_indices)
