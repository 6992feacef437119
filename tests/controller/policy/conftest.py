"""Shared machinery for the policy tests: the randomized-snapshot property check.

Every priority policy must keep the same invariants on arbitrary cluster states: launches use
only free GPUs and never share one, every expired lease is answered (renewed xor suspended)
exactly once, a suspended job is outranked by some queued job, and ``decide`` is deterministic.
Test modules ask for the ``check_policy_properties`` fixture and call it once per seed with
their policy's ``decide`` and an ``outranks`` predicate; only that predicate is policy-specific.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, JobView
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState

LEASE = 100.0

Decide = Callable[[ClusterSnapshot], Decision]
# outranks(snap, queued_job, victim): True when ``queued_job`` may take ``victim``'s GPUs.
Outranks = Callable[[ClusterSnapshot, JobView, JobView], bool]


def random_spec(rng: random.Random, gpus: int, per_process: int) -> JobSpec:
    job_class = rng.choice(list(JobClass))
    first = rng.uniform(100, 3000)
    deadlines = {
        JobClass.BEST_EFFORT: (),
        JobClass.STRICT_SLO: (Deadline(first, 1.0),),
        JobClass.SOFT_SLO: (Deadline(first, 1.0), Deadline(first * 2, 0.5)),
    }[job_class]
    return JobSpec(
        "job",
        ("python", "t.py"),
        gpus,
        IterationStop(10),
        job_class=job_class,
        deadlines=deadlines,
        gpus_per_process=per_process,
    )


def random_snapshot(rng: random.Random) -> ClusterSnapshot:
    """A few nodes, running/expired/suspending jobs on random GPUs, a random queue."""
    now = 10_000.0
    sizes = {f"n{i}": rng.randint(1, 8) for i in range(rng.randint(1, 5))}
    active: list[JobView] = []
    busy: list[JobView] = []
    for node, count in sizes.items():
        free = list(range(count))
        rng.shuffle(free)
        while free and rng.random() < 0.8:
            cut = rng.randint(1, len(free))
            take, free = sorted(free[:cut]), free[cut:]
            since = rng.uniform(0, now)
            job = JobView(
                id=f"r{len(active) + len(busy)}",
                user="u",
                spec=random_spec(rng, len(take), 1),
                state=JobState.RUNNING,
                submit_time=rng.uniform(0, since),
                queued_since=rng.uniform(0, since),
                attempt=1,
                suspensions=0,
                lease_expires_at=rng.choice([now - 1.0, now, now + 50.0]),
                placement=tuple(TaskPlacement(r, node, (g,)) for r, g in enumerate(take)),
                running_since=since,
                attained_gpu_s=(now - since) * len(take) + rng.choice([0.0, rng.uniform(0, 9000)]),
                estimated_remaining_s=rng.choice([None, rng.uniform(0, 2000)]),
            )
            if rng.random() < 0.15:
                busy.append(replace(job, state=JobState.SUSPENDING))
            else:
                active.append(job)
    queued = []
    for i in range(rng.randint(0, 12)):
        per_process = rng.choice([1, 1, 2, 4])
        queued_since = rng.uniform(0, now)
        queued.append(
            JobView(
                id=f"q{i}",
                user="u",
                spec=random_spec(rng, per_process * rng.choice([1, 1, 2, 3, 4]), per_process),
                state=rng.choice([JobState.PENDING, JobState.SUSPENDED]),
                submit_time=rng.uniform(0, queued_since),
                queued_since=queued_since,
                attempt=0,
                suspensions=0,
                attained_gpu_s=rng.choice([0.0, rng.uniform(0, 9000)]),
                estimated_remaining_s=rng.choice([None, rng.uniform(0, 2000)]),
            )
        )
    rng.shuffle(queued)
    return _snapshot(now, active, queued, busy, sizes)


def _snapshot(
    now: float,
    active: list[JobView],
    queued: list[JobView],
    busy: list[JobView],
    nodes: dict[str, int],
) -> ClusterSnapshot:
    """``nodes``: GPUs per node; free = not held by active/busy."""
    return ClusterSnapshot.of(now, nodes, active, queued, busy, default_lease_s=LEASE)


def check_invariants(snap: ClusterSnapshot, decision: Decision) -> None:
    free = {n.id: set(n.free_gpu_indices) for n in snap.nodes}
    queued = {j.id: j for j in snap.queued}
    taken: set[tuple[str, int]] = set()
    assert len({item.job_id for item in decision.launch}) == len(decision.launch)
    for item in decision.launch:
        job = queued[item.job_id]
        assert item.lease_s > 0
        assert sum(len(p.gpu_indices) for p in item.placement) == job.gpus
        assert [p.rank for p in item.placement] == list(range(len(item.placement)))
        for p in item.placement:
            assert len(p.gpu_indices) == job.spec.gpus_per_process
            for gpu in p.gpu_indices:
                assert gpu in free[p.node_id], "launch on a GPU that is not free (or not there)"
                assert (p.node_id, gpu) not in taken, "two launches share a GPU"
                taken.add((p.node_id, gpu))
    expired = {j.id for j in snap.expired()}
    answered = [r.job_id for r in decision.renew] + [s.job_id for s in decision.suspend]
    assert sorted(answered) == sorted(expired), "every expired lease: renewed xor suspended"


def check_policy_properties_on_seed(seed: int, decide: Decide, outranks: Outranks) -> None:
    """Build the random snapshot for ``seed`` and check every property of ``decide`` on it."""
    snap = random_snapshot(random.Random(seed))
    decision = decide(snap)
    check_invariants(snap, decision)
    jobs = {j.id: j for j in snap.queued + snap.active}
    for item in decision.suspend:
        victim = jobs[item.job_id]
        assert any(outranks(snap, q, victim) for q in snap.queued), "needless victim"
    assert decide(snap) == decision


@pytest.fixture
def check_policy_properties() -> Callable[[int, Decide, Outranks], None]:
    """``check(seed, decide, outranks)``: the randomized property check for one seed."""
    return check_policy_properties_on_seed
