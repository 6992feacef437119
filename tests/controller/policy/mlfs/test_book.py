"""PriorityBook (controller/policy/mlfs/book.py): Eq. 6 with the clock-free parts kept per job.

Defaults (MlfsConfig): alpha 0.3, gamma 0.8, gamma_w 0.35, gamma_d = gamma_r = 0.3, one hour as
the time unit, a 60 s horizon floor.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from controller.policy.base import JobView
from controller.policy.mlfs.book import PriorityBook, SameViews
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.jobs import job_features
from controller.policy.mlfs.priority import task_priorities
from mlsched.model import Deadline, IterationStop, JobSpec, JobState, MlfsSpec

HOUR = 3600.0
CONFIG = MlfsConfig()


def view(
    job_id: str = "j",
    gpus: int = 1,
    iteration: int = 3,
    losses: tuple[float, ...] = (2.0, 1.0, 0.5),
    queued_since: float = 0.0,
    deadline_s: float | None = None,
    remaining_s: float | None = None,
    mlfs: MlfsSpec | None = None,
) -> JobView:
    spec = JobSpec(
        job_id,
        ("train",),
        gpus,
        IterationStop(100),
        deadlines=() if deadline_s is None else (Deadline(deadline_s, 1.0),),
        mlfs=mlfs or MlfsSpec(urgency=2.0),
    )
    return JobView(
        id=job_id,
        user="u",
        spec=spec,
        state=JobState.PENDING,
        submit_time=0.0,
        queued_since=queued_since,
        attempt=0,
        suspensions=0,
        iteration=iteration,
        losses=losses,
        estimated_remaining_s=remaining_s,
    )


def test_by_hand_and_recomputed_when_the_losses_change() -> None:
    book = PriorityBook(CONFIG)
    j = view()
    # I = 4, δl = 1.0 - 0.5 = 0.5 of Σ δl = 2.0 - 0.5 = 1.5: P^ML = 2 / 4 * (1/3) * 1 = 1/6.
    # One hour waited: P^C = 0.35. P = 0.3 / 6 + 0.7 * 0.35 = 0.295.
    assert book.priorities([j], [], HOUR).job["j"] == pytest.approx(0.295)
    # Same inputs an hour later: only the waiting time moves. P^C = 0.7, P = 0.05 + 0.49.
    assert book.priorities([j], [], 2 * HOUR).job["j"] == pytest.approx(0.54)
    # A new loss report (and iteration): I = 5, δl = 0.1 of 1.6, P^ML = 2 / 5 / 16 = 0.025.
    # P = 0.3 * 0.025 + 0.7 * 0.7 = 0.4975: the kept P^ML was not reused.
    later = replace(j, iteration=4, losses=(2.0, 0.5, 0.4))
    assert book.priorities([later], [], 2 * HOUR).job["j"] == pytest.approx(0.4975)


def test_recomputed_when_requeued_or_the_estimate_changes() -> None:
    book = PriorityBook(CONFIG)
    j = view(iteration=0, losses=())  # I = 1: ratio 1, P^ML = 2 * 1 * 1 = 2
    assert book.priorities([j], [], HOUR).job["j"] == pytest.approx(0.6 + 0.7 * 0.35)
    # Queued again at 1 h: no waiting at 1 h. An estimate of 30 min: gamma_r / 0.5 h = 0.6.
    again = replace(j, queued_since=HOUR, estimated_remaining_s=HOUR / 2)
    assert book.priorities([again], [], HOUR).job["j"] == pytest.approx(0.6 + 0.7 * 0.6)
    # Running (not queued): no waiting time counts, the deadline term does: 1 h left, 0.3.
    running = replace(again, state=JobState.RUNNING, spec=view(deadline_s=2 * HOUR).spec)
    assert book.priorities([], [running], HOUR).job["j"] == pytest.approx(0.6 + 0.7 * 0.9)


def test_only_the_latest_cycles_jobs_are_kept() -> None:
    book = PriorityBook(CONFIG)
    book.priorities([view("a"), view("b")], [view("c")], HOUR)
    assert len(book) == 3
    book.priorities([view("b")], [], HOUR)
    assert len(book) == 1


def _random_view(rng: random.Random, job_id: str) -> JobView:
    gpus = rng.choice((1, 2, 4, 8, 16))
    parts = rng.choice(((), (0.5, 0.3, 0.2), (0.25, 0.25, 0.25, 0.25)))
    edges = ((0, 1), (1, 2)) if len(parts) == 3 else ((0, 1), (0, 2), (1, 3), (2, 3))
    mlfs = MlfsSpec(
        urgency=rng.uniform(0, 10), partitions=parts, dependencies=edges if parts else ()
    )
    iteration = rng.randint(0, 50)
    losses = () if iteration < 2 else tuple(sorted(rng.uniform(0, 3) for _ in range(3))[::-1])
    return view(
        job_id,
        gpus,
        iteration,
        losses,
        queued_since=rng.uniform(0, 5 * HOUR),
        deadline_s=rng.choice((None, rng.uniform(0, 10 * HOUR))),
        remaining_s=rng.choice((None, rng.uniform(0, 10 * HOUR))),
        mlfs=mlfs,
    )


@pytest.mark.parametrize("seed", range(5))
def test_equals_task_priorities_to_the_bit(seed: int) -> None:
    """Over cycles with jobs coming, changing and going, the kept values give exactly what
    task_priorities computes from scratch (model-parallel graphs included)."""
    rng = random.Random(seed)
    book = PriorityBook(CONFIG)
    jobs = {f"j{i}": _random_view(rng, f"j{i}") for i in range(30)}
    for cycle in range(6):
        now = 5 * HOUR + cycle * 600.0
        for job_id in rng.sample(sorted(jobs), 5):  # some change, some leave, some arrive
            jobs[job_id] = replace(jobs[job_id], iteration=jobs[job_id].iteration + 1)
        jobs.pop(rng.choice(sorted(jobs)))
        jobs[f"n{cycle}"] = _random_view(rng, f"n{cycle}")
        ordered = [v for _, v in sorted(jobs.items())]
        queued = [v for i, v in enumerate(ordered) if i % 3]
        active = [v for i, v in enumerate(ordered) if not i % 3]
        got = book.priorities(queued, active, now)
        features = [f for v in queued for f in job_features(v, now, queued=True)]
        features += [f for v in active for f in job_features(v, now, queued=False)]
        want = task_priorities(features, now, CONFIG)
        assert got.tasks == {k: p.total for k, p in want.items()}
        for v in (*queued, *active):
            best = max(
                (p for k, p in want.items() if k[0] == v.id), key=lambda p: p.total
            )  # the first of equals, as max keeps it
            assert got.best(v.id) == best
            assert got.first(v.id) == job_features(v, now, queued=v in queued)[0]


def test_same_views_match_by_identity_by_hand() -> None:
    a, b, c, x = view("a"), view("b"), view("c"), view("x")
    same = SameViews()
    assert same.match([a, b, c]).tolist() == [-1, -1, -1]  # nothing before
    # c was at 2, a at 0; x is new; an equal copy of b is not b
    assert same.match([c, x, a, replace(b)]).tolist() == [2, -1, 0, -1]
    assert same.match([a, a, x]).tolist() == [2, 2, 1]
    assert same.match([x, a]).tolist() == [2, 0]  # a twice before: its first place
    same.forget()
    assert same.match([x, a]).tolist() == [-1, -1]
    assert same.match([]).tolist() == []
    assert same.match([a]).tolist() == [-1]  # the empty list before


@pytest.mark.parametrize("seed", range(4))
def test_kept_queue_equals_a_fresh_book_to_the_bit(seed: int) -> None:
    """A queue kept between cycles as the simulator keeps it (the same view objects, some
    launched from the middle, some changed, new ones at the end, now and then a job id twice
    or a queued job also active): the same priorities as a new book's, to the bit."""
    rng = random.Random(seed)
    book = PriorityBook(CONFIG)
    queue = [_random_view(rng, f"q{i}") for i in range(40)]
    active = [_random_view(rng, f"a{i}") for i in range(5)]
    for cycle in range(12):
        now = 5 * HOUR + cycle * 600.0
        for _ in range(rng.randint(0, 4)):
            queue.pop(rng.randrange(len(queue)))
        for i in rng.sample(range(len(queue)), 3):
            queue[i] = replace(queue[i], queued_since=queue[i].queued_since + 1.0)
        queue += [_random_view(rng, f"n{cycle}-{k}") for k in range(rng.randint(0, 3))]
        queued, running = list(queue), list(active)
        if cycle % 5 == 3:
            queued.append(replace(queued[0], iteration=queued[0].iteration + 2))  # twice
        if cycle % 5 == 4:
            running.append(queued[1])  # queued and active: the active one counts
        got = book.priorities(queued, running, now)
        want = PriorityBook(CONFIG).priorities(queued, running, now)
        assert got.tasks == want.tasks
        assert got.job == want.job
        assert got.index == want.index
        assert got.clock.tobytes() == want.clock.tobytes()
        assert [e.row for e in got.entries] == [e.row for e in want.entries]


def test_without_task_graphs_tasks_reads_like_the_dict_it_stands_for() -> None:
    book = PriorityBook(CONFIG)
    # j as in the first test (P = 0.295 at 1 h); k active, so no waiting: I = 1, P^ML = 2,
    # P^C = 0, P = 0.3 * 2 = 0.6
    out = book.priorities([view("j")], [view("k", iteration=0, losses=())], HOUR)
    expected = {("j", 0): pytest.approx(0.295), ("k", 0): pytest.approx(0.6)}
    assert dict(out.tasks) == expected
    assert out.tasks[("k", 0)] == out.tasks.get(("k", 0)) == out.job["k"]
    assert out.tasks.get(("j", 1)) is None and out.tasks.get(("x", 0), -1.0) == -1.0
    assert ("j", 0) in out.tasks and ("j", 1) not in out.tasks and "j" not in out.tasks
    with pytest.raises(KeyError):
        out.tasks[("j", 1)]
    assert len(out.tasks) == 2 and list(out.tasks) == [("j", 0), ("k", 0)]
    assert out.job == {"j": pytest.approx(0.295), "k": pytest.approx(0.6)}
