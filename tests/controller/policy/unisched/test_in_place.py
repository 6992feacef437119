"""Best-effort execution rules of 2026-11-25 (docs/unisched.md, *Big best-effort jobs run where
they were profiled*): a job profiled inside its consolidated cells grows there, a renewed
best-effort job is displaced only by SLO deadlines, best-effort jobs stay consolidated, and the
smallest renewed jobs yield to an urgent SLO job first.

Jobs are ``make_job``'s (conftest): 1000 iterations, profiled on 2 GPUs of one node at
T_comp 1 s and T1 0.1 s, so Eq. 2 gives 1 + 7 x 0.1 = 1.7 s per iteration on 8 GPUs of one
node: 1,700 s plus the suspend/resume overhead, 1,730 s in all (3 SLO leases of 600 s).
"""

from __future__ import annotations

from dataclasses import replace

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot
from controller.policy.unisched import UniSchedConfig, UniSchedPolicy
from controller.policy.unisched.milp import MilpJob, Option
from controller.policy.unisched.policy import _Candidate, _Choice, _make_room, _pack
from mlsched.model import JobClass, JobEstimate, JobState, SpeedSample

PROFILE = (SpeedSample(2, 1, 1.1, 1.0),)
TWO_NODES = (SpeedSample(2, 2, 1.15, 1.0),)


def gpus_of(placement) -> set[tuple[str, int]]:
    return {(p.node_id, g) for p in placement for g in p.gpu_indices}


def profiled(view, launch, now: float = 300.0, samples=PROFILE):
    """``view`` running where ``launch`` put it, its lease ending at ``now``, profiled."""
    return replace(
        view,
        state=JobState.RUNNING,
        placement=launch.placement,
        lease_expires_at=now,
        running_since=0.0,
        speed_samples=samples,
    )


def test_an_8gpu_job_profiles_on_two_gpus_of_a_free_node_and_grows_there(make_job):
    new = make_job("big", JobClass.BEST_EFFORT, gpus=8, samples=(), sr_overhead_s=None)
    policy = UniSchedPolicy()
    start = policy.decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=[new]))
    [launch] = start.launch
    assert gpus_of(launch.placement) == {("a", 0), ("a", 1)}  # §III-B1: 2 GPUs of one node
    # between boundaries the other 6 GPUs of node a are held: a queued 1-GPU job waits
    small = make_job("small", JobClass.BEST_EFFORT, gpus=1)
    running = profiled(new, launch, samples=())
    fill = policy.decide(ClusterSnapshot.of(60.0, {"a": 8}, active=[running], queued=[small]))
    assert fill.launch == ()
    # at the boundary, profiled, it moves onto all 8 GPUs of node a: no suspension
    end = policy.decide(ClusterSnapshot.of(300.0, {"a": 8}, active=[profiled(new, launch)]))
    assert end.suspend == ()
    [move] = end.migrate
    assert gpus_of(move.placement) == {("a", g) for g in range(8)}
    assert move.lease_s == 300.0  # a BE lease to the next boundary of its grid


def test_without_profiling_in_place_the_held_gpus_are_free_and_the_run_is_suspended(make_job):
    new = make_job("big", JobClass.BEST_EFFORT, gpus=8, samples=(), sr_overhead_s=None)
    policy = UniSchedPolicy(UniSchedConfig(profile_in_place="off"))
    [launch] = policy.decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=[new])).launch
    small = make_job("small", JobClass.BEST_EFFORT, gpus=1)
    running = profiled(new, launch, samples=())
    fill = policy.decide(ClusterSnapshot.of(60.0, {"a": 8}, active=[running], queued=[small]))
    assert [item.job_id for item in fill.launch] == ["small"]
    end = policy.decide(ClusterSnapshot.of(300.0, {"a": 8}, active=[profiled(new, launch)]))
    assert [s.reason for s in end.suspend] == ["profiling done"]
    assert end.migrate == ()


def test_a_held_gpu_taken_by_another_job_ends_the_hold(make_job):
    # (a controller may start something there that the policy did not order)
    new = make_job("big", JobClass.BEST_EFFORT, gpus=8, samples=(), sr_overhead_s=None)
    policy = UniSchedPolicy()
    [launch] = policy.decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=[new])).launch
    other = make_job(
        "other",
        JobClass.BEST_EFFORT,
        gpus=1,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "a", (7,)),),
        lease_expires_at=600.0,
        running_since=100.0,
    )
    snapshot = ClusterSnapshot.of(300.0, {"a": 8}, active=[profiled(new, launch), other])
    end = policy.decide(snapshot)
    assert [s.reason for s in end.suspend] == ["profiling done"]
    assert end.migrate == ()


def test_a_job_larger_than_a_node_profiles_on_two_nodes_and_grows_onto_them(make_job):
    new = make_job("big", JobClass.BEST_EFFORT, gpus=16, samples=(), sr_overhead_s=None)
    nodes = {"a": 8, "b": 8, "c": 8}
    policy = UniSchedPolicy()
    [launch] = policy.decide(ClusterSnapshot.of(0.0, nodes, queued=[new])).launch
    profile = gpus_of(launch.placement)
    assert len(profile) == 2 and len({node for node, _ in profile}) == 2  # T2, §III-B1
    end = policy.decide(
        ClusterSnapshot.of(300.0, nodes, active=[profiled(new, launch, samples=TWO_NODES)])
    )
    [move] = end.migrate
    grown = gpus_of(move.placement)
    assert len(grown) == 16 and profile <= grown
    assert len({node for node, _ in grown}) == 2  # two whole nodes, the consolidated allocation


def test_a_best_effort_job_waits_for_a_whole_cell_and_an_slo_job_profiles_on_two_gpus(make_job):
    # node a has GPUs 0-3 taken: no free 8-GPU cell for an 8-GPU job
    taken = make_job(
        "taken",
        JobClass.BEST_EFFORT,
        gpus=4,
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, "a", (0, 1, 2, 3)),),
        lease_expires_at=600.0,
        running_since=0.0,
    )
    be = make_job("be", JobClass.BEST_EFFORT, gpus=8, samples=(), sr_overhead_s=None)
    slo = make_job("slo", gpus=8, deadline=20_000.0, samples=(), sr_overhead_s=None)
    for view, started in ((be, set()), (slo, {"slo"})):
        snapshot = ClusterSnapshot.of(300.0, {"a": 8}, active=[taken], queued=[view])
        decision = UniSchedPolicy().decide(snapshot)
        assert {item.job_id for item in decision.launch} == started
    # "first": the best-effort job too profiles on 2 GPUs when its cell is not free
    snapshot = ClusterSnapshot.of(300.0, {"a": 8}, active=[taken], queued=[be])
    first = UniSchedPolicy(UniSchedConfig(profile_in_place="first")).decide(snapshot)
    [launch] = first.launch
    assert len(gpus_of(launch.placement)) == 2


def test_an_slo_job_profiles_on_a_bare_run_and_holds_no_other_gpus(make_job):
    # the default ("best-effort" mode): even with its whole 8-GPU cell free, an SLO job's
    # profiling run takes 2 GPUs and holds nothing else, so a queued 1-GPU job fills node a
    # (held cells kept the UniSched demo's 2-GPU SLO job out)
    slo = make_job("slo", gpus=8, deadline=20_000.0, samples=(), sr_overhead_s=None)
    policy = UniSchedPolicy()
    [launch] = policy.decide(ClusterSnapshot.of(0.0, {"a": 8}, queued=[slo])).launch
    assert gpus_of(launch.placement) == {("a", 0), ("a", 1)}
    small = make_job("small", JobClass.BEST_EFFORT, gpus=1)
    running = profiled(slo, launch, samples=())
    fill = policy.decide(ClusterSnapshot.of(60.0, {"a": 8}, active=[running], queued=[small]))
    assert [item.job_id for item in fill.launch] == ["small"]


def test_a_renewed_best_effort_job_is_displaced_only_by_an_slo_deadline(make_job):
    placement = (TaskPlacement(0, "a", tuple(range(8))),)
    running = make_job(
        "run",
        JobClass.BEST_EFFORT,
        gpus=8,
        state=JobState.RUNNING,
        placement=placement,
        lease_expires_at=300.0,
        running_since=0.0,
    )
    profilers = [
        make_job(f"p{i}", JobClass.BEST_EFFORT, gpus=2, samples=(), sr_overhead_s=None)
        for i in range(4)
    ]

    def suspended(config: UniSchedConfig, queued) -> list[str]:
        snapshot = ClusterSnapshot.of(300.0, {"a": 8}, active=[running], queued=queued)
        return [s.job_id for s in UniSchedPolicy(config).decide(snapshot).suspend]

    # four 2-GPU profilers earn 4 x 1 on its node; its own reward is 1 / (2 + 1730 / 300) =
    # 0.129, and keep_reward 0.5 per GPU adds 4: 4.129 > 4
    assert suspended(UniSchedConfig(keep_reward=0.0), profilers) == ["run"]
    assert suspended(UniSchedConfig(), profilers) == []
    # eight 1-GPU profilers earn 8 > 4.129: profiling runs that use its GPUs more densely win
    singles = [
        make_job(f"q{i}", JobClass.BEST_EFFORT, gpus=1, samples=(), sr_overhead_s=None)
        for i in range(8)
    ]
    assert suspended(UniSchedConfig(), singles) == ["run"]
    # an SLO job that must start now (deadline 2,500 s: 3 terms left, 3 needed) earns 100
    urgent = make_job("urgent", gpus=8, deadline=2500.0)
    assert suspended(UniSchedConfig(), [urgent]) == ["run"]
    # one past its deadline (1,900 s: 2 terms left) competes as a best-effort job: it waits
    late = make_job("late", gpus=8, deadline=1900.0)
    assert suspended(UniSchedConfig(), [late]) == []


def test_best_effort_jobs_get_only_their_consolidated_allocation(make_job):
    # §II-B's second case: three 6-GPU SLO jobs and one 6-GPU best-effort job on three 8-GPU
    # nodes. The best-effort job is offered only a whole node (its round-up); the SLO jobs'
    # deadlines take the three nodes, and it waits. With relaxed best-effort allocations all
    # four run.
    queued = [make_job(f"s{i}") for i in range(3)] + [make_job("be", JobClass.BEST_EFFORT)]
    snapshot = ClusterSnapshot.of(0.0, {"a": 8, "b": 8, "c": 8}, queued=queued)
    consolidated = UniSchedPolicy().decide(snapshot)
    assert {item.job_id for item in consolidated.launch} == {"s0", "s1", "s2"}
    for item in consolidated.launch:
        assert len({p.node_id for p in item.placement}) == 1
    relaxed = UniSchedPolicy(UniSchedConfig(be_relaxed=True)).decide(snapshot)
    assert {item.job_id for item in relaxed.launch} == {"s0", "s1", "s2", "be"}


def _kept(view, reward: float) -> _Candidate:
    gpus = sum(len(p.gpu_indices) for p in view.placement)
    choice = _Choice((gpus, 0, 0, 0) if gpus == 1 else (0, 0, 1, 0), 1, gpus, keep=True)
    milp = MilpJob(view.id, gpus, (Option(choice.allocation),))
    estimate = JobEstimate("best-effort", 0, 0.0, 0.0, reward, "", 0.0)
    return _Candidate(view, "best-effort", [choice], milp, estimate)


def _room(on, waiting, running, snapshot, jobs, smallest_first: bool = True) -> list[str]:
    """One 8-GPU node; ``jobs``: (id, GPUs, reward) running best-effort jobs whose leases
    end now; an urgent 4-GPU SLO job the MILP chose on a 4-GPU cell."""
    views = [running(job_id, on("n1", *gpus), expires=300.0) for job_id, gpus, _ in jobs]
    kept = [_kept(v, reward) for v, (_, _, reward) in zip(views, jobs, strict=True)]
    s = waiting("s", 4, job_class=JobClass.STRICT_SLO, deadlines=(3600.0,))
    choice = _Choice((0, 0, 1, 0), 1, 4)
    milp = MilpJob("s", 4, (Option(choice.allocation),))
    wanted = [(_Candidate(s, "slo", [choice], milp, kept[0].estimate, 0), choice)]
    snap = snapshot(300.0, active=views, queued=[s], nodes={"n1": 8})
    found = _make_room(snap, kept, wanted, [], 4, smallest_first)
    return [c.view.id for c in found]


def test_the_smallest_renewed_jobs_yield_first(on, waiting, running, snapshot):
    # free: GPUs 2 and 3. q (4 GPUs on 4-7) has the lowest reward; p and r (1 GPU each on 0
    # and 1) have more. Lowest reward first, q yields; smallest first, p and r do.
    jobs = [("q", (4, 5, 6, 7), 0.01), ("p", (0,), 0.2), ("r", (1,), 0.3)]
    assert _room(on, waiting, running, snapshot, jobs, smallest_first=False) == ["q"]
    assert _room(on, waiting, running, snapshot, jobs) == ["p", "r"]


def test_a_renewed_job_whose_gpus_are_not_needed_keeps_running(on, waiting, running, snapshot):
    # free: GPUs 2, 3, 6, 7. p (GPU 4) yields first, then r (GPU 0) and t (GPU 1), which free
    # the cell 0-3; p's GPU is not part of it, so p keeps running.
    jobs = [("p", (4,), 0.1), ("r", (0,), 0.2), ("t", (1,), 0.3), ("u", (5,), 0.4)]
    assert _room(on, waiting, running, snapshot, jobs) == ["r", "t"]


def test_renewed_jobs_move_off_the_cheapest_whole_cell_for_a_chosen_job(on, running):
    # n1: p (GPU 0) and q (GPUs 4, 5) are renewed best-effort jobs, GPUs 1-3, 6, 7 free;
    # n2: GPUs 0-3 held by a job that may not move, 4-7 free. An 8-GPU job the MILP chose
    # needs a whole node: n1 is one once p and q (3 GPUs, at most the 8 it needs) move to
    # n2's free 4-GPU cell, q on its 2-GPU half and p on one GPU of the other.
    p = _kept(running("p", on("n1", 0), expires=300.0), 0.2)
    q = _kept(running("q", on("n1", 4, 5), expires=300.0), 0.1)
    big = _kept(running("big", on("n1", 0), expires=300.0), 0.0)  # its view: an 8-GPU job
    choice = _Choice((0, 0, 0, 1), 1, 8)
    free = {"n1": {1, 2, 3, 6, 7}, "n2": {4, 5, 6, 7}}
    moves, placed = _pack(free, 8, 4, [(big, choice)], [p, q])
    assert {c.view.id: gpus_of(at) for c, at in moves} == {
        "q": {("n2", 4), ("n2", 5)},
        "p": {("n2", 6)},
    }
    assert gpus_of(placed["big"]) == {("n1", g) for g in range(8)}
    assert free == {"n1": set(), "n2": {7}}


def test_no_move_when_the_movers_find_no_cell_elsewhere(on, running):
    # a 4-GPU job on one 8-GPU node: GPUs 3-5 free, 6 and 7 held by a job that may not move.
    # Cell 0-3 is free once p (GPUs 0-2) moves, but p then needs a 4-GPU cell (its round-up)
    # and only GPUs 4 and 5 are left: nothing moves
    p = _kept(running("p", on("n1", 0, 1, 2), expires=300.0), 0.2)
    want = _kept(running("w", on("n1", 0), expires=300.0), 0.0)
    free = {"n1": {3, 4, 5}}
    moves, placed = _pack(free, 8, 4, [(want, _Choice((0, 0, 1, 0), 1, 4))], [p])
    assert (moves, placed) == ([], {})


def test_with_keep_started_a_job_that_ran_at_full_size_resumes_first(make_job):
    # two queued 8-GPU best-effort jobs, one node: "done" has run at its size (a sample of 8
    # GPUs on one node) and has 1,000 iterations left; "fresh" has 500 left (850 s plus 15 s
    # of overhead), so its reward 1 / (2 + 865 / 300) = 0.205 beats done's
    # 1 / (2 + 1730 / 300) = 0.129. With
    # keep_started (the default), done earns 0.5 x 8 more and resumes first.
    done = make_job(
        "done", JobClass.BEST_EFFORT, gpus=8, samples=(*PROFILE, SpeedSample(8, 1, 1.7, 1.0))
    )
    fresh = make_job("fresh", JobClass.BEST_EFFORT, gpus=8, iteration=500)
    snapshot = ClusterSnapshot.of(0.0, {"a": 8}, queued=[done, fresh])
    plain = UniSchedPolicy(UniSchedConfig(keep_started=False)).decide(snapshot)
    assert [item.job_id for item in plain.launch] == ["fresh"]
    started = UniSchedPolicy().decide(snapshot)
    assert [item.job_id for item in started.launch] == ["done"]
