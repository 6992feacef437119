"""UniSched's settings, with the paper's defaults."""

from __future__ import annotations

from dataclasses import dataclass

SOLVERS = ("cbc", "highs", "scipy")
OBJECTIVES = ("reward", "feasible")
PLACEMENTS = ("joint", "roundup")
IN_PLACE = ("off", "first", "only", "best-effort")


@dataclass(frozen=True)
class UniSchedConfig:
    """Defaults from UniSched §III-C unless noted.

    ``be_lease_s``: BE and profiler lease (5 min in the paper); None takes the controller's or
    simulator's lease. ``slo_lease_multiple``: the SLO lease is this integer multiple of the BE
    lease (10 min = 2 x 5 min). ``horizon``: SLO lease terms modelled by explicit x_{k,i}
    variables (terms beyond it count as available, without a capacity check; our choice, the
    paper does not bound the plan). ``solver`` / ``time_limit_s``: the MILP backend and its
    limit per cycle; past it the previous cycle's solution is reused (§III-C4). "scipy" (HiGHS
    in ``scipy.optimize.milp`` on a sparse-matrix build) is the default, "cbc" and "highs"
    build the same model with python-mip (docs/unisched.md, "Solver speed").
    ``default_t_sr_s``: t_sr before one is measured. ``inter_node_ratio``: T2 / T1 when only
    one was profiled (see ``controller.estimator.speed``). Ablations: ``sr_aware`` off drops
    T_sr from Eq. 1; ``iteration_estimator`` off uses the maximum iterations for
    performance-based jobs; ``placement="roundup"`` allows only Chronus' consolidated round-up
    allocation. ``isolate_solver``: run the MILP in a child process, so that a crash or hang of
    the native solver costs a cycle (the cached solution), not the process
    (:mod:`controller.policy.unisched.isolated`).

    ``oracle``: the limit, not a scheduler: every job's true iterations, speeds and t_sr are
    known at submission (``JobView.truth``, filled by the simulator only), and nothing is
    profiled.

    Best-effort execution (our choices where §III leaves it open; docs/unisched.md, *Big
    best-effort jobs run where they were profiled*): ``be_relaxed`` offers best-effort jobs the
    relaxed multi-node allocations SLO jobs get (off: only their consolidated allocation).
    ``keep_reward`` per GPU is added to the reward of a running best-effort job whose lease is
    renewed where it runs (and of a profiled job growing in place). At 0.5 (the profiler reward
    over a profiling run's 2 GPUs) its GPUs are worth more than any queued best-effort jobs
    could earn on them, and at least as much as 2-GPU profiling runs: it yields to SLO
    deadlines and to profiling runs that use its GPUs more densely (a 1-GPU job's), never to
    other best-effort work.
    ``yield_smallest_first``: when an urgent SLO job needs GPUs of renewed jobs, the
    smallest jobs yield first and only those whose GPUs it needs (off: lowest reward first).
    ``keep_started``: a queued best-effort job that has run at its full size (a speed sample
    at its size) earns ``keep_reward`` per GPU too, so it resumes before jobs not started
    (on since SLO jobs profile on a bare run: the held-out cases of
    ``test_joint_allocation.py`` that it once lost all hold; docs/unisched.md).
    ``pack``: a job the MILP chose whose cells the free GPUs cannot hold is given a whole
    cell by moving renewed best-effort jobs out of it to free cells elsewhere.
    ``profile_in_place``: a job larger than its profiling run is profiled inside the cells of
    its consolidated allocation, whose other GPUs are held for it, and at the end of profiling
    grows to its full size there (a move, not a suspension into the queue). "first": that
    allocation is its first profiling option and a bare 2-GPU run the fallback; "only": it is
    profiled only where it can grow; "best-effort": "only" for best-effort jobs and a bare run
    for SLO jobs (whose deadlines do not wait for a whole cell, and whose held cells kept
    other SLO jobs out: the UniSched demo's 2+1 allocations never ran); "off": a bare 2-GPU
    run (the code before 2026-11-25).
    ``objective="feasible"``: the solver stops at its first feasible solution
    instead of maximising Eq. 4 (Fig. 10b). ``static_profile_nodes``: that many nodes (the
    last by id) only profile, first come first served, outside the MILP (Fig. 9a's static
    profiler; the paper uses 2); 0 plans profiling jobs in the MILP as §III-C does.
    """

    be_lease_s: float | None = None
    slo_lease_multiple: int = 2
    horizon: int = 12
    solver: str = "scipy"
    time_limit_s: float = 1.0
    profiler_reward: float = 1.0  # above every best-effort reward, 1:100 against SLO rewards
    profiling: bool = True
    default_t_sr_s: float = 30.0
    inter_node_ratio: float = 1.5
    sr_aware: bool = True
    iteration_estimator: bool = True
    placement: str = "joint"
    isolate_solver: bool = True
    oracle: bool = False
    objective: str = "reward"
    static_profile_nodes: int = 0
    be_relaxed: bool = False
    keep_reward: float = 0.5
    profile_in_place: str = "best-effort"
    yield_smallest_first: bool = True
    pack: bool = True
    keep_started: bool = True

    def __post_init__(self) -> None:
        if self.be_lease_s is not None and not self.be_lease_s > 0:
            raise ValueError(f"be_lease_s must be positive, got {self.be_lease_s}")
        if self.slo_lease_multiple < 1:
            raise ValueError(f"slo_lease_multiple must be >= 1, got {self.slo_lease_multiple}")
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon}")
        if self.solver not in SOLVERS:
            raise ValueError(f"unknown solver {self.solver!r}; valid: {', '.join(SOLVERS)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"unknown placement {self.placement!r}; valid: {', '.join(PLACEMENTS)}"
            )
        if self.objective not in OBJECTIVES:
            raise ValueError(
                f"unknown objective {self.objective!r}; valid: {', '.join(OBJECTIVES)}"
            )
        if self.profile_in_place not in IN_PLACE:
            raise ValueError(
                f"unknown profile_in_place {self.profile_in_place!r}; valid: {', '.join(IN_PLACE)}"
            )
        if self.keep_reward < 0:
            raise ValueError(f"keep_reward must be >= 0, got {self.keep_reward}")
        if self.static_profile_nodes < 0:
            raise ValueError(f"static_profile_nodes must be >= 0, got {self.static_profile_nodes}")
        if self.oracle and (self.profiling or self.static_profile_nodes):
            raise ValueError("the oracle profiles nothing: set profiling=False")
        if not self.time_limit_s > 0:
            raise ValueError(f"time_limit_s must be positive, got {self.time_limit_s}")
        if self.default_t_sr_s < 0 or self.inter_node_ratio <= 0:
            raise ValueError("default_t_sr_s must be >= 0 and inter_node_ratio > 0")
