"""Shared machinery for the policy tests: the randomized-snapshot property check.

Every priority policy must keep the same invariants on arbitrary cluster states: launches use
only free GPUs and never share one, every expired lease is answered (renewed xor suspended)
exactly once, a suspended job is outranked by some queued job, and ``decide`` is deterministic.
Test modules ask for the ``check_policy_properties`` fixture and call it once per seed with
their policy's ``decide`` and an ``outranks`` predicate; only that predicate is policy-specific.

The hand-built scenarios share their factories through fixtures too (test modules cannot import
each other): ``on``/``tp`` for placements, ``waiting``/``running`` for queued and active jobs,
``snapshot`` for a cluster (2 nodes x 2 GPUs unless told, lease ``LEASE``) and ``launched`` for
the ids a decision launches, in order.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
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
        JobClass.STRICT_SLO: (first,),
        JobClass.SOFT_SLO: (first, first * 2),
    }[job_class]
    return make_spec(gpus, per_process, job_class, deadlines)


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
    return make_snapshot(now, active, queued, busy, sizes)


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


# --- factories for hand-built snapshots ------------------------------------------------------


def make_spec(
    gpus: int,
    gpus_per_process: int = 1,
    job_class: JobClass = JobClass.BEST_EFFORT,
    deadlines: tuple[float, ...] = (),
) -> JobSpec:
    """``deadlines``: seconds after submission, with rewards 1, 1/2, 1/3, ..."""
    return JobSpec(
        "job",
        ("python", "t.py"),
        gpus,
        IterationStop(10),
        job_class=job_class,
        deadlines=tuple(Deadline(a, 1.0 / (i + 1)) for i, a in enumerate(deadlines)),
        gpus_per_process=gpus_per_process,
    )


def make_task(rank: int, node: str, *gpus: int) -> TaskPlacement:
    """Task ``rank`` on ``gpus`` of ``node``."""
    return TaskPlacement(rank, node, tuple(gpus))


def make_placement(node: str, *gpus: int) -> tuple[TaskPlacement, ...]:
    """One task per GPU, all on ``node``."""
    return tuple(make_task(rank, node, g) for rank, g in enumerate(gpus))


def _times(submit_time: float | None, queued_since: float | None) -> tuple[float, float]:
    """(submit_time, queued_since): each defaults to the other, both to 0."""
    if submit_time is None:
        submit_time = 0.0 if queued_since is None else queued_since
    return submit_time, submit_time if queued_since is None else queued_since


def make_waiting(
    job_id: str,
    gpus: int,
    *,
    queued_since: float | None = None,
    submit_time: float | None = None,
    state: JobState = JobState.PENDING,
    attained: float = 0.0,
    remaining: float | None = None,
    gpus_per_process: int = 1,
    job_class: JobClass = JobClass.BEST_EFFORT,
    deadlines: tuple[float, ...] = (),
) -> JobView:
    """A queued job of user alice; a SUSPENDED one has had one attempt and one suspension."""
    submit, queued = _times(submit_time, queued_since)
    again = 0 if state is JobState.PENDING else 1
    return JobView(
        id=job_id,
        user="alice",
        spec=make_spec(gpus, gpus_per_process, job_class, deadlines),
        state=state,
        submit_time=submit,
        queued_since=queued,
        attempt=again,
        suspensions=again,
        attained_gpu_s=attained,
        estimated_remaining_s=remaining,
    )


def make_running(
    job_id: str,
    placement: tuple[TaskPlacement, ...],
    *,
    expires: float,
    since: float | None = None,
    submit_time: float | None = None,
    queued_since: float | None = None,
    state: JobState = JobState.RUNNING,
    attained: float = 0.0,
    remaining: float | None = None,
    job_class: JobClass = JobClass.BEST_EFFORT,
    deadlines: tuple[float, ...] = (),
    startup_s: float | None = 0.0,
) -> JobView:
    """An active job (attempt 1) on ``placement``, its lease ending at ``expires``; it runs
    ``since`` its submission unless told. ``attained``: GPU-seconds so far, including the
    current attempt. ``startup_s``: from the attempt's start to its first step (None: it has
    not trained yet)."""
    submit, queued = _times(submit_time, queued_since)
    started = submit if since is None else since
    return JobView(
        id=job_id,
        user="alice",
        spec=make_spec(
            sum(len(p.gpu_indices) for p in placement),
            len(placement[0].gpu_indices),
            job_class,
            deadlines,
        ),
        state=state,
        submit_time=submit,
        queued_since=queued,
        attempt=1,
        suspensions=0,
        lease_expires_at=expires,
        placement=placement,
        running_since=started,
        training_since=None if startup_s is None else started + startup_s,
        attained_gpu_s=attained,
        estimated_remaining_s=remaining,
    )


def make_snapshot(
    now: float,
    active: Iterable[JobView] = (),
    queued: Iterable[JobView] = (),
    busy: Iterable[JobView] = (),
    nodes: dict[str, int] | None = None,
) -> ClusterSnapshot:
    """``nodes``: GPUs per node (default 2 nodes x 2 GPUs); free = not held by active/busy."""
    nodes = nodes if nodes is not None else {"n1": 2, "n2": 2}
    return ClusterSnapshot.of(now, nodes, active, queued, busy, default_lease_s=LEASE)


def launched_ids(decision: Decision) -> list[str]:
    """The ids of the jobs ``decision`` launches, in launch order."""
    return [item.job_id for item in decision.launch]


@pytest.fixture
def tp() -> Callable[..., TaskPlacement]:
    """``tp(rank, node, *gpus)``: one task's placement."""
    return make_task


@pytest.fixture
def on() -> Callable[..., tuple[TaskPlacement, ...]]:
    """``on(node, *gpus)``: one task per GPU, all on ``node``."""
    return make_placement


@pytest.fixture
def waiting() -> Callable[..., JobView]:
    """``waiting(job_id, gpus, **details)``: a queued job (see ``make_waiting``)."""
    return make_waiting


@pytest.fixture
def running() -> Callable[..., JobView]:
    """``running(job_id, placement, expires=..., **details)``: an active job."""
    return make_running


@pytest.fixture
def snapshot() -> Callable[..., ClusterSnapshot]:
    """``snapshot(now, active, queued, busy, nodes)``: a cluster state for ``decide``."""
    return make_snapshot


@pytest.fixture
def launched() -> Callable[[Decision], list[str]]:
    """``launched(decision)``: the launched job ids in order."""
    return launched_ids
