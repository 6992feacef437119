"""The UniSched policy (§III): Estimator + Selector, one MILP per lease boundary.

Each job first runs as a *profiler job* on at most 2 GPUs for one BE lease (§III-A: one node,
or two nodes when it needs more than a node), then joins the SLO or best-effort queue with the
speed model (Eq. 2) its profile gave. At a cycle where some lease expired the policy builds the
joint MILP (:mod:`controller.policy.unisched.milp`) over every queued job and every job whose
lease expired (plus, for planning, the SLO jobs that hold unexpired leases), and turns its
answer into renewals, suspensions and launches on concrete GPUs
(:class:`~controller.policy.unisched.cells.CellPool`). On a long queue the MILP gets only what
can matter now (:func:`_within_reach`). Between boundaries, GPUs freed by a completion are
filled without a new MILP: first with the jobs the last solution chose that could not start
yet (their GPUs were still being released), then in the MILP's order of term-0 value
(:meth:`UniSchedPolicy._fill_order`), each on its most consolidated allocation that fits.

Best-effort execution (docs/unisched.md, *Big best-effort jobs run where they were profiled*):
a job larger than its profiling run profiles inside its consolidated cells, the rest of them
held for it, and grows there when profiling ends; running best-effort jobs earn
``keep_reward`` per GPU when renewed, and so do queued ones that already ran at their full size
(``keep_started``: they resume first); jobs the MILP chose whose cells are scattered get a whole
cell by moving renewed best-effort jobs (:func:`_pack`).

State kept between cycles, by design and bounded by the live jobs: the previous solution (the
paper's cache, reused when the solver returns nothing within its time limit), the full-size
placement held for each profiling run in place, and the last
learning-curve prediction per performance-based job (refitted when its history has grown by a
quarter); and memos of pure per-job results, each stored with what it was computed from and
recomputed when that differs: the Eq. 2 fit per set of speed samples, a running job's kept
choice per placement, a queued job's whole candidate per (progress, samples, overhead, terms to
its deadlines), and the allocation choices per job size. They change no decision (checked
cycle by cycle against the code without them, docs/unisched.md); they save re-estimating the
hundreds of queued jobs that did not move since the last boundary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from controller.estimator.duration import predicted_iterations
from controller.estimator.speed import SpeedModel, fit_speed_model
from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    Migrate,
    Renew,
    Suspend,
)
from controller.policy.overload import requested
from controller.policy.unisched import static_profiler
from controller.policy.unisched.cells import (
    Allocation,
    CellPool,
    CellRequest,
    allocations,
    free_cells,
    node_cells,
    top_level,
)
from controller.policy.unisched.config import UniSchedConfig
from controller.policy.unisched.estimates import JobEstimator
from controller.policy.unisched.isolated import IsolatedSolver, WorkerFailed
from controller.policy.unisched.milp import MilpJob, MilpProblem, MilpSolution, Option, solve
from mlsched.model import JobClass, JobEstimate, TargetMetricStop

log = logging.getLogger(__name__)

MAX_OPTIONS = 8  # allocation choices per job given to the MILP (most consolidated first)
# A relaxed allocation spans at most this many nodes more than the consolidated one: Eq. 2
# only tells one node from several, profiled on two, and wider spreads cost far more (our
# choice; the paper's example relaxes a 6-GPU job to a 2-cell allocation).
MAX_EXTRA_NODES = 1
PROFILE_GPUS = 2  # §III-B: profiling uses at most 2 GPUs
# Share of the best-effort reward an SLO job earns for running now (our choice; measured on the
# full MIX1 trace at C120, R^slo 2.44 % with 0.1 and 1.12 % with 1: started early, an SLO job
# leaves later terms to the jobs that arrive later; docs/unisched.md).
EARLY_SLO_WEIGHT = 1.0
GRID_EPS = 1e-9  # in periods: a clock a hair past a boundary is on it
TIE_BREAK = 1e-3  # weight of an allocation's normalised speed for SLO jobs (Eq. 8)
URGENT_SLACK = 1  # SLO lease terms of slack at most which an SLO job must start to be safe
_PHASES = ("profiling", "slo", "best-effort")  # a candidate's phase (UniSchedPolicy._phase)
REACH = 2  # queued jobs of each kind in the MILP: up to this many times the GPUs it can give out


@dataclass(frozen=True)
class _Choice:
    """One allocation of a candidate: cells, the nodes it spans at worst, or a kept placement.

    ``profile``: a profiling run of that many GPUs inside the allocation's cells, whose other
    GPUs are held for the job to grow into (``UniSchedConfig.profile_in_place``); ``gpus`` is
    then the job's full size. ``placement``: a kept choice that grows in place, onto these
    GPUs (its profiling run's and the ones held for it)."""

    allocation: Allocation
    nodes: int
    gpus: int
    spread: bool = False
    keep: bool = False
    profile: int = 0
    placement: tuple[TaskPlacement, ...] = ()


@dataclass
class _Candidate:
    view: JobView
    phase: str  # "profiling", "slo", "best-effort"
    choices: list[_Choice]
    milp: MilpJob
    estimate: JobEstimate
    # SLO jobs that can still meet a deadline: the fewest spare lease terms before one
    slack: int | None = None


class UniSchedPolicy:
    """UniSched as a :class:`~controller.policy.base.Policy` (see the module docstring)."""

    def __init__(self, config: UniSchedConfig | None = None, name: str = "unisched") -> None:
        self.config = config or UniSchedConfig()
        self.name = name
        self._curves: dict[str, tuple[int, int]] = {}  # job -> (history length, iterations)
        self._waiting: dict[str, _Choice] = {}  # chosen by the last MILP, not launched yet
        self._last: MilpSolution | None = None
        self._picked: dict[str, Allocation] = {}  # job -> allocation of the last solution
        self._rank: dict[str, tuple[int, float]] = {}  # fill order of jobs at the last boundary
        # profiling runs in place: job -> the full-size placement held for it to grow into, and
        # (this cycle) the GPUs of it that the run does not use yet, per node
        self._growing: dict[str, tuple[TaskPlacement, ...]] = {}
        self._spares: dict[str, dict[str, set[int]]] = {}
        # Memos of pure per-job results, each with what it was computed from and recomputed
        # when that changed (a new speed sample, progress, a new placement, another term):
        self._speeds: dict[str, tuple[object, SpeedModel | None]] = {}  # samples -> Eq. 2 fit
        self._held: dict[str, tuple[object, _Choice]] = {}  # placement -> the kept choice
        # not running: (inputs, terms to the deadlines, candidate, its term-free estimates)
        self._queued: dict[str, tuple[tuple[object, ...], list[int], _Candidate, tuple]] = {}
        # an SLO job's Q_f per deadline: (from, until, SLO lease, deadlines, Q_f), valid while
        # the cycle's time is in [from, until)
        self._terms: dict[str, tuple[float, float, float, object, list[int]]] = {}
        self._options: dict[tuple[str, str, int, int, int], tuple[_Choice, ...]] = {}
        self._described: dict[_Choice, str] = {}  # _describe's text per choice (few shapes)
        self.solve_times_s: list[float] = []  # solver time per MILP cycle (for reports)
        self.boundary_cycles = 0  # cycles at lease boundaries (the MILP's, solved or not)
        self._worker = IsolatedSolver() if self.config.isolate_solver else None
        self.needs_job_truth = self.config.oracle  # the simulator fills JobView.truth

    def close(self) -> None:
        """Stop the MILP worker process, if one runs (a later cycle starts another)."""
        if self._worker is not None:
            self._worker.close()

    # --- the cycle --------------------------------------------------------------------------
    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        if not snapshot.nodes:
            return Decision()
        snapshot = self._hold(_without_new_work_on_overloaded(snapshot))
        if self.config.static_profile_nodes:
            return self._with_static_profiler(snapshot)
        return self._decide(snapshot)

    def _decide(self, snapshot: ClusterSnapshot) -> Decision:
        if snapshot.expired() or self._last is None:
            return self._boundary(snapshot)
        return self._fill(snapshot)

    def _with_static_profiler(self, snapshot: ClusterSnapshot) -> Decision:
        """Fig. 9(a)'s static profiler: the reserved nodes profile jobs first come first
        served; the MILP schedules everything else on the other nodes."""
        reserved = static_profiler.reserved_nodes(snapshot, self.config.static_profile_nodes)
        if not reserved:  # a cluster of one or two nodes: nothing set aside
            return self._decide(snapshot)
        profiling = tuple(v for v in snapshot.queued if self._phase(v) == "profiling")
        main = static_profiler.execution_part(snapshot, reserved, profiling)
        decision = self._decide(main) if main.queued or main.active else Decision()
        be, slo = self._leases(snapshot)
        levels = top_level(max(len(n.gpu_indices) for n in snapshot.nodes)) + 1
        renew: list[Renew] = []
        suspend: list[Suspend] = []
        for view in snapshot.expired():
            if not static_profiler.on_nodes(view, reserved):
                continue
            if view.speed_samples:
                suspend.append(Suspend(view.id, "profiling done"))
            else:  # slow to start: profile on
                renew.append(Renew(view.id, self._lease_for("profiling", be, slo, snapshot.now)))
        free = {n: ids for n, ids in snapshot.free_gpus().items() if n in reserved}
        pool = CellPool.of(free, levels)
        launch: list[Launch] = []
        for view in profiling:
            choice = self._bare_profile(view, levels)
            if choice.spread and len(reserved) < 2:  # one profiling node: T1 measured there
                choice = _Choice(allocations(choice.gpus, levels)[0], 1, choice.gpus)
            placed = pool.place_all([_request(view, choice)])
            if view.id in placed:
                lease = self._lease_for("profiling", be, slo, snapshot.now)
                launch.append(Launch(view.id, placed[view.id], lease))
        profiler = Decision(launch=tuple(launch), renew=tuple(renew), suspend=tuple(suspend))
        return static_profiler.merge(decision, profiler)

    def _leases(self, snapshot: ClusterSnapshot) -> tuple[float, float]:
        be = self.config.be_lease_s or snapshot.default_lease_s
        return be, be * self.config.slo_lease_multiple

    def _boundary(self, snapshot: ClusterSnapshot) -> Decision:
        self.boundary_cycles += 1
        be, slo = self._leases(snapshot)
        levels = top_level(max(len(n.gpu_indices) for n in snapshot.nodes)) + 1
        expired = {v.id for v in snapshot.expired()}
        pool = {n.id: set(n.free_gpu_indices) for n in snapshot.nodes}
        suspend: list[Suspend] = []
        candidates: list[_Candidate] = []
        fixed_views: list[JobView] = []
        for view in snapshot.busy:
            _give_back(pool, view.placement)
        for view in snapshot.active:
            if view.id not in expired:
                if view.job_class is not JobClass.BEST_EFFORT and _held(view) == view.gpus:
                    fixed_views.append(view)
                continue
            held = _held(view)
            _give_back(pool, view.placement)
            if held < view.gpus and view.speed_samples and view.id in self._spares:
                # profiled in place: its kept choice is to grow there (or it goes to the queue)
                for node, ids in self._spares[view.id].items():
                    pool.setdefault(node, set()).update(ids)
                grow = self._growing[view.id]
                candidates.append(
                    self._candidate(view, snapshot.now, be, slo, levels, keep=True, grow=grow)
                )
                continue
            if held < view.gpus and view.speed_samples:  # profiled: resume at full size later
                suspend.append(Suspend(view.id, "profiling done"))
                # Planned in this MILP with every other job (§III-C: profiling and execution in
                # one framework); it starts on its chosen allocation once its GPUs are back.
                candidates.append(self._candidate(view, snapshot.now, be, slo, levels))
                continue
            candidates.append(self._candidate(view, snapshot.now, be, slo, levels, keep=True))
        for view in snapshot.queued:
            candidates.append(self._candidate(view, snapshot.now, be, slo, levels))
        self._prune(v.id for v in (*snapshot.active, *snapshot.queued, *snapshot.busy))
        self._rank = self._ranks(candidates)
        capacity = sum(len(ids) for ids in pool.values())
        candidates, later = _within_reach(candidates, capacity)
        solution = self._uncontended(snapshot, candidates, levels)
        if solution is not None:  # everything fits now: the MILP's optimum, without solving
            self._remember(solution, candidates)
            return self._apply(snapshot, candidates, solution, suspend, be, slo, levels)
        problem = MilpProblem(
            jobs=tuple(c.milp for c in candidates),
            free_cells=tuple(free_cells({n: sorted(ids) for n, ids in pool.items()}, levels)),
            total_gpus=sum(len(n.gpu_indices) for n in snapshot.nodes),
            horizon=self.config.horizon,
            reserved=_plus(
                self._reserved(fixed_views, slo), _planned_demand(later, self.config.horizon)
            ),
            first_feasible=self.config.objective == "feasible",
        )
        solution = self._solve(problem)
        if solution is None:
            solution = self._cached(candidates)
        else:
            self.solve_times_s.append(solution.solve_s + solution.build_s)
        self._remember(solution, candidates)
        decision = self._apply(snapshot, candidates, solution, suspend, be, slo, levels)
        if not later:
            return decision
        planned = {c.view.id: c.estimate for c in later}
        return replace(decision, estimates={**decision.estimates, **planned})

    def _solve(self, problem: MilpProblem) -> MilpSolution | None:
        """The MILP, in the worker process unless isolation is off or it cannot start."""
        solver, limit = self.config.solver, self.config.time_limit_s
        if self._worker is not None:
            try:
                return self._worker.solve(problem, solver, limit)
            except WorkerFailed as exc:
                log.warning("%s; solving in this process from now on", exc)
                self._worker = None
        return solve(problem, solver, limit)

    def _apply(
        self,
        snapshot: ClusterSnapshot,
        candidates: list[_Candidate],
        solution: MilpSolution,
        suspend: list[Suspend],
        be: float,
        slo: float,
        levels: int,
    ) -> Decision:
        kept: list[_Candidate] = []
        wanted: list[tuple[_Candidate, _Choice]] = []
        for cand in candidates:
            pick = solution.run_now.get(cand.view.id)
            keep = cand.choices and cand.choices[0].keep
            if pick is None:
                if keep and cand.choices[0].placement:
                    suspend.append(Suspend(cand.view.id, "profiling done; not grown in place"))
                elif keep:
                    suspend.append(Suspend(cand.view.id, "lease not renewed by the MILP"))
                continue
            choice = cand.choices[pick]
            if choice.keep:
                kept.append(cand)
            else:
                wanted.append((cand, choice))
        wanted.sort(key=lambda cw: _launch_order(cw[0]))
        smallest = self.config.yield_smallest_first
        for cand in _make_room(snapshot, kept, wanted, suspend, levels, smallest):
            kept.remove(cand)
            suspend.append(Suspend(cand.view.id, "yields its GPUs to an SLO job's allocation"))
        now = snapshot.now
        grown = {c.view.id for c in kept if c.choices[0].placement}
        migrate = [
            Migrate(
                c.view.id,
                c.choices[0].placement,
                self._lease_for(c.phase, be, slo, now),
                "grows in place after profiling",
            )
            for c in kept
            if c.view.id in grown
        ]
        free = {node: set(ids) for node, ids in snapshot.free_gpus().items()}
        stopping = {s.job_id for s in suspend}  # profiled: they start once suspended
        for job_id, spare in self._spares.items():  # grown, or no longer held: let go
            if job_id in grown or job_id in stopping:
                self._growing.pop(job_id, None)
                if job_id not in grown:
                    for node, ids in spare.items():
                        free.setdefault(node, set()).update(ids)
        pool = CellPool.of({node: sorted(ids) for node, ids in free.items()}, levels)
        placed = pool.place_all(
            [_request(c.view, ch) for c, ch in wanted if c.view.id not in stopping]
        )
        if self.config.pack:
            unplaced = [
                (c, ch) for c, ch in wanted if c.view.id not in stopping and c.view.id not in placed
            ]
            movable = [c for c in kept if c.phase == "best-effort" and c.view.id not in grown]
            size = max(len(n.gpu_indices) for n in snapshot.nodes)
            moves, packed = _pack(pool.free_gpus(), size, levels, unplaced, movable)
            placed.update(packed)
            for cand, placement in moves:
                kept.remove(cand)
                lease = self._lease_for(cand.phase, be, slo, now)
                migrate.append(Migrate(cand.view.id, placement, lease, "packed for a whole cell"))
        leases = {phase: self._lease_for(phase, be, slo, now) for phase in _PHASES}
        renew = [Renew(c.view.id, leases[c.phase]) for c in kept if not c.choices[0].placement]
        launch: list[Launch] = []
        self._waiting = {}
        for cand, choice in wanted:
            placement = placed.get(cand.view.id)
            if placement is None:
                self._waiting[cand.view.id] = choice  # GPUs still being released
                continue
            lease = self._lease_for(cand.phase, be, slo, now)
            launch.append(self._launch(cand.view, choice, placement, lease))
        estimates = {c.view.id: self._chosen(c, solution, snapshot.now) for c in candidates}
        return Decision(
            launch=tuple(launch),
            renew=tuple(renew),
            suspend=tuple(suspend),
            estimates=estimates,
            migrate=tuple(migrate),
        )

    def _launch(
        self, view: JobView, choice: _Choice, placement: tuple[TaskPlacement, ...], lease: float
    ) -> Launch:
        """The launch of a job placed on ``placement``; a profiling run in place takes only its
        profiling GPUs of it, and the rest is held for it to grow into."""
        if not choice.profile:
            return Launch(view.id, placement, lease)
        self._growing[view.id] = placement
        return Launch(view.id, _profiling_part(placement, choice.profile), lease)

    def _hold(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot without the GPUs held for profiling runs to grow into (as if busy).
        A hold ends when its job no longer runs inside it or one of its GPUs is not free."""
        self._spares = {}
        if not self._growing:
            return snapshot
        active = {v.id: v for v in snapshot.active}
        free = snapshot.free_gpus()
        held: dict[str, set[int]] = {}
        for job_id, full in list(self._growing.items()):
            view = active.get(job_id)
            spare = None if view is None else _spare(full, view.placement)
            if spare is None or any(not ids <= set(free.get(n, ())) for n, ids in spare.items()):
                del self._growing[job_id]
                continue
            self._spares[job_id] = spare
            for node, ids in spare.items():
                held.setdefault(node, set()).update(ids)
        nodes = tuple(
            replace(n, free_gpu_indices=tuple(g for g in n.free_gpu_indices if g not in held[n.id]))
            if n.id in held
            else n
            for n in snapshot.nodes
        )
        return replace(snapshot, nodes=nodes)

    def _uncontended(
        self, snapshot: ClusterSnapshot, candidates: list[_Candidate], levels: int
    ) -> MilpSolution | None:
        """When every candidate can run now on its first (most consolidated) allocation, that
        is the MILP's optimum (each running job adds reward, nothing competes), so the solver
        is skipped; None otherwise."""
        wanted = [c for c in candidates if not c.choices[0].keep]
        if any(sum(len(p.gpu_indices) for p in v.placement) for v in snapshot.busy) and wanted:
            return None  # GPUs on their way back: let the MILP weigh waiting for them
        free = snapshot.free_gpus()
        if sum(c.choices[0].gpus for c in wanted) > sum(len(ids) for ids in free.values()):
            return None  # more GPUs asked for than are free: they cannot all be placed
        pool = CellPool.of(free, levels)
        placed = pool.place_all([_request(c.view, c.choices[0]) for c in wanted])
        if len(placed) < len(wanted):
            return None
        return MilpSolution(run_now={c.view.id: 0 for c in candidates}, status="uncontended")

    def _fill(self, snapshot: ClusterSnapshot) -> Decision:
        """Between boundaries: start waiting jobs on GPUs freed since the last cycle. The jobs
        the last MILP chose go first, all together (their cells were planned jointly, and
        placing them one by one could split the cells another of them needs); while some of
        their GPUs are still being released, none of them starts early."""
        free = snapshot.free_gpus()
        left = sum(len(ids) for ids in free.values())
        if left == 0 or not snapshot.queued:
            return Decision()
        be, slo = self._leases(snapshot)
        levels = top_level(max(len(n.gpu_indices) for n in snapshot.nodes)) + 1
        pool = CellPool.of(free, levels)
        launch: list[Launch] = []
        placed: dict[str, tuple[TaskPlacement, ...]] = {}
        planned = [v for v in snapshot.queued if v.id in self._waiting]
        if planned:
            requests = [_request(v, self._waiting[v.id]) for v in planned]
            placed = pool.place_all(requests)
            if len(placed) < len(planned) and snapshot.busy:
                return Decision()  # the planned cells are not all back yet
            for view in planned:
                if view.id in placed:
                    lease = self._lease_for(self._phase(view), be, slo, snapshot.now)
                    choice = self._waiting.pop(view.id)
                    launch.append(self._launch(view, choice, placed[view.id], lease))
            left -= sum(r.gpus for r in requests if r.job_id in placed)
        ordered = sorted(
            (v for v in snapshot.queued if v.id not in self._waiting and v.id not in placed),
            key=self._fill_order,
        )
        # Cells a request could not get: a failed request leaves the pool as it was, and a
        # launch only shrinks it, so the same cells cannot be had later in this cycle either.
        refused: set[tuple[Allocation, int, bool]] = set()
        for view in ordered:
            if left <= 0:
                break
            phase = self._phase(view)
            for choice in self._choices(view, phase, levels):
                if choice.gpus > left:
                    continue
                request = _request(view, choice)
                shape = (request.allocation, request.gpus, request.spread)
                single = request.per_process == 1  # (processes of more GPUs: always tried)
                if single and shape in refused:
                    continue
                placed = pool.place_all([request])
                if view.id in placed:
                    lease = self._lease_for(phase, be, slo, snapshot.now)
                    launch.append(self._launch(view, choice, placed[view.id], lease))
                    left -= choice.gpus
                    break
                if single:
                    refused.add(shape)
        return Decision(launch=tuple(launch))

    # --- candidates -------------------------------------------------------------------------
    def _phase(self, view: JobView) -> str:
        if self.config.profiling and not view.speed_samples:
            return "profiling"
        return "best-effort" if view.job_class is JobClass.BEST_EFFORT else "slo"

    def _lease_for(self, phase: str, be: float, slo: float, now: float) -> float:
        """The lease from ``now`` to a boundary of its grid (§III-C1, Fig. 4): BE leases end on
        multiples of the BE lease, SLO leases on multiples of the SLO lease (so an SLO lease
        always expires together with a BE lease), counted from time 0. A job started between
        boundaries holds its lease to the next one, or to the one after when less than half
        a BE lease is left (our choice: a lease is never shorter than that)."""
        period = slo if phase == "slo" else be
        end = math.ceil((now + be / 2) / period - GRID_EPS) * period
        return end - now

    def _choices(self, view: JobView, phase: str, levels: int) -> list[_Choice]:
        """The allocation choices of a job that does not keep its placement (a pure function
        of its phase, size, GPUs per process and the cell levels; memoised)."""
        key = (phase, view.job_class.value, view.gpus, view.spec.gpus_per_process, levels)
        found = self._options.get(key)
        if found is None:
            found = self._options[key] = tuple(self._new_choices(view, phase, levels))
        return list(found)

    def _bare_profile(self, view: JobView, levels: int) -> _Choice:
        """A profiling run alone (§III-B1): at most 2 GPUs, on one node, or on two nodes (one
        GPU each) when the job needs more GPUs than a node holds."""
        node_size = 1 << (levels - 1)
        per = view.spec.gpus_per_process
        gpus = min(view.gpus, max(PROFILE_GPUS, per))
        gpus -= gpus % per
        if view.gpus > node_size and gpus >= 2 and per == 1:
            return _Choice(_cells({0: gpus}, levels), gpus, gpus, spread=True)
        return _Choice(allocations(gpus, levels)[0], 1, gpus)

    def _new_choices(self, view: JobView, phase: str, levels: int) -> list[_Choice]:
        node_size = 1 << (levels - 1)
        per = view.spec.gpus_per_process
        consolidated = math.ceil(view.gpus / node_size)
        if phase == "profiling":
            bare = self._bare_profile(view, levels)
            mode = self.config.profile_in_place
            if mode == "off" or bare.gpus >= view.gpus:
                return [bare]
            # the cells of the consolidated allocation (the Chronus round-up), run in by the
            # profiling run and held for the job to grow into when its profile is taken
            cells = allocations(view.gpus, levels, roundup=True)[0]
            grow = _Choice(cells, consolidated, view.gpus, profile=bare.gpus)
            if mode == "best-effort":  # SLO jobs: a bare run, whose cells hold no GPU idle
                if view.job_class is not JobClass.BEST_EFFORT:
                    return [bare]
                mode = "only"
            return [grow] if mode == "only" else [grow, bare]
        roundup = self.config.placement == "roundup"
        found = []
        extra = MAX_EXTRA_NODES if phase == "slo" or self.config.be_relaxed else 0
        for i, alloc in enumerate(allocations(view.gpus, levels, roundup)):
            nodes = consolidated if i == 0 else max(consolidated, min(sum(alloc), view.gpus))
            if nodes > consolidated + extra or len(found) == MAX_OPTIONS:
                continue
            if per > 1 and any(alloc[lv] for lv in range(levels) if (1 << lv) < per):
                continue  # a process's GPUs must share a node
            found.append(_Choice(alloc, nodes, view.gpus))
        return found

    def _iterations(self, view: JobView) -> int:
        if self.config.oracle and view.truth is not None:
            return view.truth.iterations
        stop = view.spec.stopping
        if not isinstance(stop, TargetMetricStop) or not self.config.iteration_estimator:
            return predicted_iterations(stop, view.metric_history, self.config.iteration_estimator)
        count = len(view.metric_history)
        cached = self._curves.get(view.id)
        if cached is None or count >= cached[0] * 1.25 + 1:
            cached = (count, predicted_iterations(stop, view.metric_history))
            self._curves[view.id] = cached
        return cached[1]

    def _candidate(
        self,
        view: JobView,
        now: float,
        be: float,
        slo: float,
        levels: int,
        keep: bool = False,
        grow: tuple[TaskPlacement, ...] = (),
    ) -> _Candidate:
        """A job's MILP entry. ``keep``: its one choice is where it runs (``grow``: onto these
        GPUs, its profiling run's and the ones held for it)."""
        phase = self._phase(view)
        # A kept job still without a speed sample (slow to start) goes on profiling.
        if grow:
            nodes = len({p.node_id for p in grow})
            choices = [_Choice(_held_cells(grow, levels), nodes, view.gpus, True, True, 0, grow)]
        elif keep:
            choices = [self._held_choice(view, levels)]
        else:
            choices = self._choices(view, phase, levels)
        if phase == "profiling":
            reward = self.config.profiler_reward
            # a profiling run in place is preferred where its cells cost nothing else
            options = tuple(
                Option(c.allocation, (), TIE_BREAK if c.profile else 0.0) for c in choices
            )
            milp = MilpJob(view.id, choices[0].gpus, options, reward)
            estimate = JobEstimate(phase, 0, 0.0, 0.0, reward, _describe(choices[0]), now)
            return _Candidate(view, phase, choices, milp, estimate)
        iterations = self._iterations(view)
        terms = self._deadline_terms(view, now, slo) if phase == "slo" else []
        key: tuple[object, ...] = ()
        memo = None
        if not keep:  # what a queued job's candidate is computed from, besides its spec
            key = (phase, iterations, view.iteration, view.speed_samples, view.sr_overhead_s)
            key += (view.estimated_remaining_s, view.truth, be, slo, levels)
            memo = self._queued.get(view.id)
            if memo is not None and memo[0] == key and memo[1] == terms:
                return _again(memo[2], view, now)
        if memo is not None and memo[0] == key:  # only the terms to the deadlines moved
            est, runs, remainings, rewards = memo[3]
        else:
            est = JobEstimator.fitted(view, iterations, self.config, self._speed(view))
            runs = [est.run_s(view.gpus, c.nodes) for c in choices]
            remainings = [est.best_effort_remaining_s(r, be) for r in runs]
            rewards = [self._be_reward(r, be) for r in remainings]
        be_reward = max(rewards)
        if phase == "slo":
            deadlines = tuple(
                (q, d.reward) for q, d in zip(terms, view.spec.deadlines, strict=True)
            )
            fastest = min(runs)
            options = tuple(  # Eq. 8's phi-bar, as a tie-break between allocations
                Option(c.allocation, est.slo_leases_before(r, slo, terms), TIE_BREAK * fastest / r)
                for c, r in zip(choices, runs, strict=True)
            )
            fewest = [min(need) for need in zip(*(o.leases for o in options), strict=True)]
            spare = [q - n for q, n in zip(terms, fewest, strict=True) if q >= 1 and n <= q]
            feasible = bool(spare)
            # Running now earns an SLO job a best-effort job's reward (EARLY_SLO_WEIGHT), on top
            # of its deadline's; one that can no longer meet any deadline is a best-effort job
            # (without keep_reward: given it, running late SLO jobs held their GPUs, and on the
            # MIX1 slice of docs/unisched.md R^slo rose from 1.18 % to 2.84 %).
            now_reward = be_reward * (EARLY_SLO_WEIGHT if feasible else 1.0)
            milp = MilpJob(view.id, view.gpus, options, now_reward, deadlines, slo=True)
        else:  # best-effort: the reward of the allocation it runs on (§III-C2)
            # a running job renewed where it runs earns keep_reward more per GPU (our choice):
            # more than queued best-effort jobs could earn on its GPUs, so it yields to SLO
            # deadlines and profiling runs, not to other best-effort work; with keep_started,
            # so does a queued job that has run at its full size (it resumes first)
            bonus = self._keep_bonus(view, keep)
            options = tuple(
                Option(c.allocation, (), r + bonus) for c, r in zip(choices, rewards, strict=True)
            )
            milp = MilpJob(view.id, view.gpus, options)
        t_iter = est.iteration_time(view.gpus, choices[0].nodes) or 0.0
        estimate = JobEstimate(
            phase,
            int(view.iteration + est.remaining_iterations),
            t_iter,
            remainings[0],
            be_reward
            if phase == "best-effort"
            else max((d.reward for d in view.spec.deadlines), default=0.0),
            "",
            now,
        )
        slack = min(spare) if phase == "slo" and spare else None
        cand = _Candidate(view, phase, choices, milp, estimate, slack)
        if key:
            self._queued[view.id] = (key, terms, cand, (est, runs, remainings, rewards))
        return cand

    def _deadline_terms(self, view: JobView, now: float, slo: float) -> list[int]:
        """:func:`_terms`, memoised while none of them can have changed: Q_f = q >= 1 stays q
        while the time is below the deadline less q terms (less a microsecond, against
        rounding), and a Q_f of 0 stays 0."""
        deadlines = view.spec.deadlines
        memo = self._terms.get(view.id)
        valid = memo is not None and memo[0] <= now < memo[1] and memo[2] == slo
        if valid and memo[3] is deadlines:
            return memo[4]
        terms = _terms(view, now, slo)
        until = math.inf
        for q, d in zip(terms, deadlines, strict=True):
            if q >= 1:
                until = min(until, view.submit_time + d.seconds_after_submit - q * slo - 1e-6)
        self._terms[view.id] = (now, until, slo, deadlines, terms)
        return terms

    def _keep_bonus(self, view: JobView, keep: bool) -> float:
        """``keep_reward`` per GPU for a best-effort job that runs (renewed where it is) or,
        with ``keep_started``, has run at its full size (a speed sample at its size); 0
        otherwise."""
        started = self.config.keep_started and any(s.gpus == view.gpus for s in view.speed_samples)
        return self.config.keep_reward * view.gpus if keep or started else 0.0

    def _speed(self, view: JobView) -> SpeedModel | None:
        """Eq. 2 fitted to the job's speed samples, refitted only when they changed."""
        memo = self._speeds.get(view.id)
        if memo is not None and memo[0] == view.speed_samples:
            return memo[1]
        model = fit_speed_model(view.speed_samples, self.config.inter_node_ratio)
        self._speeds[view.id] = (view.speed_samples, model)
        return model

    def _held_choice(self, view: JobView, levels: int) -> _Choice:
        """A running job's own placement as its one choice (recomputed when it moved)."""
        memo = self._held.get(view.id)
        if memo is not None and memo[0] == (view.placement, levels):
            return memo[1]
        nodes = len({p.node_id for p in view.placement})
        held = sum(len(p.gpu_indices) for p in view.placement)
        choice = _Choice(_held_cells(view.placement, levels), nodes, held, keep=True)
        self._held[view.id] = ((view.placement, levels), choice)
        return choice

    def _be_reward(self, remaining_s: float, lease_s: float) -> float:
        """Best-effort reward: reciprocal of the estimated remaining time (in leases, offset so
        it stays below the profiler reward; §III-C2)."""
        return self.config.profiler_reward / (2.0 + remaining_s / lease_s)

    def _reserved(self, running: list[JobView], slo: float) -> tuple[float, ...]:
        """GPUs that SLO jobs on unexpired leases hold in each future term until they finish."""
        reserved = [0.0] * (self.config.horizon - 1)
        for view in running:
            if self._phase(view) != "slo":
                continue
            est = JobEstimator.fitted(view, self._iterations(view), self.config, self._speed(view))
            nodes = len({p.node_id for p in view.placement})
            terms = math.ceil(est.run_s(view.gpus, nodes) / slo)
            for k in range(1, min(terms, self.config.horizon)):
                reserved[k - 1] += view.gpus
        return tuple(reserved)

    def _fill_order(self, view: JobView) -> tuple[int, float, float]:
        """Who gets GPUs freed between boundaries, in the MILP's own order of term-0 value:
        the last solution's waiting jobs; profilers (reward 1); SLO jobs that must run in the
        next term to meet a deadline; then every other job by its term-0 reward per GPU as of
        the last boundary (shortest remaining GPU-time first)."""
        if view.id in self._waiting:
            return (0, 0.0, view.queued_since)
        phase = self._phase(view)
        if phase == "profiling":
            return (1, 0.0, view.queued_since)
        ranked = self._rank.get(view.id, (3, 0.0))  # not seen at a boundary yet: by arrival
        return (*ranked, view.queued_since)

    def _ranks(self, candidates: list[_Candidate]) -> dict[str, tuple[int, float]]:
        """:meth:`_fill_order`'s keys for the jobs seen at a boundary."""
        ranks: dict[str, tuple[int, float]] = {}
        for cand in candidates:
            if cand.phase == "profiling":
                continue
            if cand.slack is not None and cand.slack <= URGENT_SLACK:
                ranks[cand.view.id] = (2, float(cand.slack))
            else:  # a best-effort job by its own reward, without keep_reward (the MILP's)
                value = cand.estimate.reward if cand.phase == "best-effort" else _now_reward(cand)
                ranks[cand.view.id] = (3, -value / max(1, cand.view.gpus))
        return ranks

    def _describe(self, choice: _Choice) -> str:
        text = self._described.get(choice)
        if text is None:
            text = self._described[choice] = _describe(choice)
        return text

    def _chosen(self, cand: _Candidate, solution: MilpSolution, now: float) -> JobEstimate:
        pick = solution.run_now.get(cand.view.id)
        if pick is None:
            return cand.estimate
        e = cand.estimate
        return JobEstimate(
            e.phase,
            e.iterations,
            e.iteration_time_s,
            e.remaining_s,
            e.reward,
            self._describe(cand.choices[pick]),
            now,
        )

    def _remember(self, solution: MilpSolution, candidates: list[_Candidate]) -> None:
        self._last = solution
        picked = {
            c.view.id: c.choices[solution.run_now[c.view.id]].allocation
            for c in candidates
            if c.view.id in solution.run_now
        }
        if solution.status != "cached":
            self._picked = picked
        else:  # a cached cycle keeps the choices of jobs it did not see
            self._picked.update(picked)

    def _cached(self, candidates: list[_Candidate]) -> MilpSolution:
        """The solver found nothing in time: reuse the last solution's choices (§III-C4).

        A running job keeps running where it is (the safe default, cached choice or not); a
        job the last solution chose runs on the allocation it chose then, when that is still
        one of its options (its first option otherwise); others wait for the next cycle."""
        run: dict[str, int] = {}
        for cand in candidates:
            if cand.choices[0].keep:
                run[cand.view.id] = 0
                continue
            previous = self._picked.get(cand.view.id)
            if previous is None:
                continue
            allocations = [c.allocation for c in cand.choices]
            run[cand.view.id] = allocations.index(previous) if previous in allocations else 0
        return MilpSolution(run_now=run, status="cached")

    def _prune(self, live: Iterable[str]) -> None:
        keep = set(live)
        self._picked = {j: a for j, a in self._picked.items() if j in keep}
        self._growing = {j: p for j, p in self._growing.items() if j in keep}
        for memo in (self._speeds, self._held, self._queued, self._terms):
            for job_id in [j for j in memo if j not in keep]:
                del memo[job_id]
        for job_id in [j for j in self._curves if j not in keep]:
            del self._curves[job_id]


def _spare(
    full: tuple[TaskPlacement, ...], running: tuple[TaskPlacement, ...]
) -> dict[str, set[int]] | None:
    """The GPUs of ``full`` a job running on ``running`` does not use, per node; None when it
    does not run inside ``full`` (moved) or already runs on all of it (grown)."""
    inside = {(p.node_id, g) for p in full for g in p.gpu_indices}
    used = {(p.node_id, g) for p in running for g in p.gpu_indices}
    if not used or not used < inside:
        return None
    spare: dict[str, set[int]] = {}
    for node, gpu in inside - used:
        spare.setdefault(node, set()).add(gpu)
    return spare


def _profiling_part(full: tuple[TaskPlacement, ...], gpus: int) -> tuple[TaskPlacement, ...]:
    """The profiling run's GPUs inside a job's full-size placement (§III-B1): one GPU on each
    of two nodes when the placement spans several nodes and a process has one GPU, else the
    first ``gpus`` GPUs of its first node, in its processes."""
    per = len(full[0].gpu_indices) if full else 1
    nodes: dict[str, list[int]] = {}
    for p in full:
        nodes.setdefault(p.node_id, []).extend(p.gpu_indices)
    order = list(nodes)
    if len(order) >= 2 and gpus == 2 and all(len(p.gpu_indices) == 1 for p in full):
        picked = {order[0]: [min(nodes[order[0]])], order[1]: [min(nodes[order[1]])]}
    else:
        picked = {order[0]: sorted(nodes[order[0]])[:gpus]}
    tasks: list[TaskPlacement] = []
    for node, indices in picked.items():
        for i in range(0, len(indices), per):
            tasks.append(TaskPlacement(len(tasks), node, tuple(indices[i : i + per])))
    return tuple(tasks)


def _held(view: JobView) -> int:
    """GPUs the job holds now."""
    return sum(len(p.gpu_indices) for p in view.placement)


def _again(cand: _Candidate, view: JobView, now: float) -> _Candidate:
    """A memoised candidate for this cycle's view of the job, its estimate dated ``now``."""
    e = cand.estimate
    estimate = JobEstimate(
        e.phase, e.iterations, e.iteration_time_s, e.remaining_s, e.reward, e.allocation, now
    )
    return _Candidate(view, cand.phase, cand.choices, cand.milp, estimate, cand.slack)


def _without_new_work_on_overloaded(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Plan an overloaded server with reduced capacity: while one of its agents' requests to
    move a job is pending (MLFS §3.3.3; issue 10), its free GPUs take no new work. Moving the
    agent's Euclidean choice off it is the registry's overload answer
    (:mod:`controller.policy.overload`), at once."""
    hot = {p.node_id for v in requested(snapshot) for p in v.placement}
    if not hot:
        return snapshot
    nodes = tuple(replace(n, free_gpu_indices=()) if n.id in hot else n for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def _within_reach(
    candidates: list[_Candidate], capacity: int
) -> tuple[list[_Candidate], list[_Candidate]]:
    """The MILP's jobs, cut to what can matter now (our reduction; the paper solves over the
    whole queue). Running jobs are all kept. Of the queued jobs:

    * best-effort and profiler jobs, and SLO jobs past every deadline, only gain by running
      now (their reward is term 0's): those of the best reward per GPU are kept until they
      ask for ``REACH`` times the GPUs that can be given out now (free, expiring or being
      released); the rest could only fill a fragment the better ones left, which the
      filling between boundaries does;
    * SLO jobs: the least-slack ones up to the same ``REACH`` are kept; the others cannot
      start now anyway, and are returned apart: their future terms are reserved for them
      (:func:`_planned_demand`) instead of being planned in the MILP.

    Returns (the MILP's candidates, the SLO jobs planned apart)."""
    budget = REACH * capacity
    now_only = sorted(
        (c for c in candidates if c.slack is None and not c.choices[0].keep),
        key=lambda c: -_now_reward(c) / max(1, c.choices[0].gpus),
    )
    urgent = sorted(
        (c for c in candidates if c.slack is not None and not c.choices[0].keep),
        key=lambda c: c.slack,
    )
    dropped = set(_beyond(now_only, budget))
    later = set(_beyond(urgent, budget))
    if not dropped and not later:
        return candidates, []
    kept = [c for c in candidates if c.view.id not in dropped and c.view.id not in later]
    return kept, [c for c in urgent if c.view.id in later]


def _beyond(ranked: list[_Candidate], budget: int) -> list[str]:
    """Ids of the ranked candidates after the first ones that together ask for ``budget``."""
    asked, beyond = 0, []
    for cand in ranked:
        if asked >= budget:
            beyond.append(cand.view.id)
        asked += cand.choices[0].gpus
    return beyond


def _planned_demand(later: list[_Candidate], horizon: int) -> tuple[float, ...]:
    """GPUs per future term (k = 1..horizon-1) that SLO jobs planned apart will need: each job
    spreads the leases its first reachable deadline needs over the terms before it."""
    demand = [0.0] * (horizon - 1)
    for cand in later:
        job = cand.milp
        reachable = [
            (q, min(o.leases[f] for o in job.options))
            for f, (q, _) in enumerate(job.deadlines)
            if q >= 1 and min(o.leases[f] for o in job.options) <= q
        ]
        if not reachable:
            continue
        q, need = reachable[0]
        share = job.gpus * min(1.0, need / max(1, q - 1))
        for k in range(1, min(q, horizon)):
            demand[k - 1] += share
    return tuple(demand)


def _plus(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _now_reward(cand: _Candidate) -> float:
    return cand.milp.now_reward + max((o.reward for o in cand.milp.options), default=0.0)


def _make_room(
    snapshot: ClusterSnapshot,
    kept: list[_Candidate],
    wanted: list[tuple[_Candidate, _Choice]],
    suspend: list[Suspend],
    levels: int,
    smallest_first: bool = True,
) -> list[_Candidate]:
    """Kept non-SLO jobs to suspend so that every urgent SLO job the MILP chose can be placed.

    The MILP checks cells against the whole pool (Eq. 14), as if every job could be placed
    anew; a job whose lease is renewed stays where it is, and its GPUs can split the cells an
    SLO job was given. Once the jobs suspended now have released their GPUs, the chosen SLO
    jobs that must start in this term to keep a deadline (slack of at most ``URGENT_SLACK``
    terms) must fit: if not, renewed best-effort and profiler jobs yield, lowest reward first,
    until they do (our repair; the paper's cells abstract placement away). A chosen SLO job
    with more slack waits for its cells instead (started by a fill cycle, or planned again at
    the next boundary): evicting a best-effort job to start it a term early costs that job a
    suspension and a resume, and measured on MIX1 these evictions were most best-effort
    suspensions (docs/unisched.md). ``smallest_first``: the smallest jobs yield first (a
    small job finds room again soon, a job of whole nodes waits for whole nodes), and of
    those, any whose GPUs the SLO jobs turn out not to need keeps running; otherwise the
    lowest reward first, all kept suspended (the code before 2026-11-25)."""
    slo = [(c, ch) for c, ch in wanted if c.phase == "slo" and _urgent(c)]
    if not slo:
        return []
    free = {node: set(ids) for node, ids in snapshot.free_gpus().items()}
    leaving = {s.job_id for s in suspend}
    for view in snapshot.active:
        if view.id in leaving:
            _give_back(free, view.placement)
    for view in snapshot.busy:  # suspended or cancelled earlier: their GPUs are on their way
        _give_back(free, view.placement)
    requests = [_request(c.view, ch) for c, ch in slo]
    yielding: list[_Candidate] = []
    movable = sorted(
        (c for c in kept if c.phase != "slo"),
        key=lambda c: (c.view.gpus if smallest_first else 0, c.estimate.reward),
    )
    while not _fits(free, requests, levels) and movable:
        cand = movable.pop(0)
        _give_back(free, _holding(cand))
        yielding.append(cand)
    if not _fits(free, requests, levels):
        return []  # no renewal frees enough: nothing gained by suspending any
    for cand in reversed(yielding[:-1] if smallest_first else []):  # not needed: they stay
        without = {node: set(ids) for node, ids in free.items()}
        for p in _holding(cand):
            without[p.node_id].difference_update(p.gpu_indices)
        if _fits(without, requests, levels):
            free = without
            yielding.remove(cand)
    return yielding


_Move = tuple[_Candidate, tuple[TaskPlacement, ...]]  # a renewed job and where it moves


def _pack(
    free: dict[str, set[int]],
    node_size: int,
    levels: int,
    unplaced: list[tuple[_Candidate, _Choice]],
    movable: list[_Candidate],
) -> tuple[list[_Move], dict[str, tuple[TaskPlacement, ...]]]:
    """Moves of renewed best-effort jobs that free whole cells for jobs the MILP chose but
    that the free GPUs cannot hold as cells (our repair, beside :func:`_make_room`).

    Eq. 14 counts the cells of renewed jobs as if they could be placed anew, so the MILP
    chooses a job of whole cells where free GPUs are many but scattered. For each such job,
    in launch order, whose allocation is cells of one level: the cell positions whose GPUs
    are free or held by movable jobs (renewed best-effort jobs on one node), fewest GPUs to
    move first, at most as many as the job needs; the movers are placed on free cells
    elsewhere (a move is a suspension and a resumption at once). Returns the moves and the
    placements of the jobs they made room for; ``free`` is updated."""
    owner: dict[tuple[str, int], _Candidate] = {}
    for cand in movable:
        nodes = {p.node_id for p in cand.view.placement}
        if len(nodes) == 1:
            for p in cand.view.placement:
                for g in p.gpu_indices:
                    owner[(p.node_id, g)] = cand
    moves: list[_Move] = []
    placed: dict[str, tuple[TaskPlacement, ...]] = {}
    moved: set[str] = set()
    for cand, choice in unplaced:
        used = [lv for lv, count in enumerate(choice.allocation) if count]
        if len(used) != 1 or choice.spread:
            continue
        level, count = used[0], choice.allocation[used[0]]
        width = 1 << level
        cells: list[tuple[str, list[int]]] = []
        trial = {node: set(ids) for node, ids in free.items()}
        trial_moves: list[_Move] = []
        budget = choice.gpus
        for _ in range(count):
            best: tuple[int, str, int, list[_Candidate]] | None = None
            for node, ids in trial.items():
                if any(n == node for n, _ in cells):
                    continue  # one cell per node when the job spans several
                for start in range(0, node_size, width):
                    span = range(start, start + width)
                    movers: dict[str, _Candidate] = {}
                    ok = True
                    for g in span:
                        if g in ids:
                            continue
                        holder = owner.get((node, g))
                        if holder is None or holder.view.id in moved:
                            ok = False
                            break
                        movers[holder.view.id] = holder
                    if not ok:
                        continue
                    cost = sum(_held(m.view) for m in movers.values())
                    if best is None or cost < best[0]:
                        best = (cost, node, start, list(movers.values()))
            if best is None or best[0] > budget:
                break
            cost, node, start, movers = best
            span_ids = set(range(start, start + width))
            for mover in movers:  # its GPUs are free once it moves; the cell is not for it
                _give_back(trial, mover.view.placement)
            trial[node] -= span_ids
            requests = [  # each onto its consolidated cell
                CellRequest(
                    m.view.id,
                    allocations(_held(m.view), levels)[0],
                    _held(m.view),
                    m.view.spec.gpus_per_process,
                )
                for m in movers
            ]
            found = CellPool.of({n: sorted(i) for n, i in trial.items()}, levels).place_all(
                requests
            )
            if len(found) < len(movers):
                break
            for mover in movers:
                for p in found[mover.view.id]:
                    trial[p.node_id].difference_update(p.gpu_indices)
                trial_moves.append((mover, found[mover.view.id]))
                moved.add(mover.view.id)
            budget -= cost
            cells.append((node, list(span_ids)))
        else:
            per = cand.view.spec.gpus_per_process
            gpus = choice.gpus
            by_node: dict[str, list[int]] = {}
            for node, ids in cells:
                take = sorted(ids)[: min(gpus, len(ids))]
                by_node[node] = take
                gpus -= len(take)
            placement = _tasks_of(by_node, per)
            if gpus == 0 and placement is not None:
                free.clear()
                free.update(trial)
                moves.extend(trial_moves)
                placed[cand.view.id] = placement
                continue
        for mover, _ in trial_moves:  # not committed: they stay where they run
            moved.discard(mover.view.id)
    return moves, placed


def _tasks_of(by_node: dict[str, list[int]], per: int) -> tuple[TaskPlacement, ...] | None:
    tasks: list[TaskPlacement] = []
    for node, indices in by_node.items():
        if len(indices) % per:
            return None
        for i in range(0, len(indices), per):
            tasks.append(TaskPlacement(len(tasks), node, tuple(indices[i : i + per])))
    return tuple(tasks)


def _fits(free: dict[str, set[int]], requests: list[CellRequest], levels: int) -> bool:
    return len(CellPool.of(free, levels).place_all(requests)) == len(requests)


def _holding(cand: _Candidate) -> tuple[TaskPlacement, ...]:
    """The GPUs a kept candidate holds (a profiling run in place: with those held for it)."""
    return cand.choices[0].placement or cand.view.placement


def _urgent(cand: _Candidate) -> bool:
    """An SLO job that must start in this term to keep a deadline."""
    return cand.slack is not None and cand.slack <= URGENT_SLACK


def _give_back(pool: dict[str, set[int]], placement: tuple[TaskPlacement, ...]) -> None:
    for p in placement:
        pool.setdefault(p.node_id, set()).update(p.gpu_indices)


def _cells(counts: dict[int, int], levels: int) -> Allocation:
    return tuple(counts.get(level, 0) for level in range(levels))


def _held_cells(placement: tuple[TaskPlacement, ...], levels: int) -> Allocation:
    by_node: dict[str, list[int]] = {}
    for p in placement:
        by_node.setdefault(p.node_id, []).extend(p.gpu_indices)
    counts = [0] * levels
    for indices in by_node.values():
        for level, _ in node_cells(indices, levels):
            counts[level] += 1
    return tuple(counts)


def _terms(view: JobView, now: float, slo: float) -> list[int]:
    """Q_f: whole SLO lease terms from now until each deadline."""
    return [
        max(0, math.floor((view.submit_time + d.seconds_after_submit - now) / slo))
        for d in view.spec.deadlines
    ]


def _request(view: JobView, choice: _Choice) -> CellRequest:
    return CellRequest(
        view.id, choice.allocation, choice.gpus, view.spec.gpus_per_process, choice.spread
    )


def _launch_order(cand: _Candidate) -> tuple[int, float]:
    rank = {"slo": 0 if _urgent(cand) else 1, "profiling": 2, "best-effort": 3}[cand.phase]
    return (rank, -cand.estimate.reward)  # best-effort: shortest remaining time first


def _describe(choice: _Choice) -> str:
    cells = "/".join(str(c) for c in choice.allocation)
    where = "kept placement" if choice.keep else f"cells {cells}"
    return f"{where} ({choice.gpus} GPUs on {'>=' if choice.spread else '<='}{choice.nodes} nodes)"
