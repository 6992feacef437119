"""MLF-RL's state rows (controller/policy/mlfs/rl/features.py), against hand computations.

Defaults throughout (MlfsConfig): alpha 0.3, gamma_d = gamma_r = 0.3, gamma_w 0.35, time unit one
hour, horizon floor 60 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView, NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.jobs import job_features
from controller.policy.mlfs.priority import task_priorities
from controller.policy.mlfs.rl.features import (
    CANDIDATE_FEATURES,
    CONTEXT_FEATURES,
    JOB_FEATURES,
    STEP_FEATURES,
    Candidate,
    _as_libm,
    _log1p_all,
    candidate_matrix,
    context_row,
    job_priorities,
    job_row,
    step_rows,
)
from mlsched.model import Deadline, IterationStop, JobSpec, JobState, MlfsSpec

HOUR = 3600.0
CONFIG = MlfsConfig()


def view(
    job_id: str = "j",
    gpus: int = 4,
    iteration: int = 3,
    losses: tuple[float, ...] = (2.0, 1.0, 0.5),
    deadline_s: float | None = 2 * HOUR,
    remaining_s: float | None = HOUR / 2,
    queued_since: float = 0.0,
    usage: dict[str, float] | None = None,
    mlfs: MlfsSpec | None = None,
    **extra: object,
) -> JobView:
    spec = JobSpec(
        job_id,
        ("python", "t.py"),
        gpus,
        IterationStop(10),
        deadlines=() if deadline_s is None else (Deadline(deadline_s, 1.0),),
        batch_size=255,
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
        suspensions=1,
        iteration=iteration,
        losses=losses,
        estimated_remaining_s=remaining_s,
        resource_usage=usage or {},
        **extra,  # type: ignore[arg-type]
    )


def row_of(v: JobView, now: float, total_gpus: int = 16, **kind: object) -> dict[str, float]:
    c = Candidate(v, **kind)  # type: ignore[arg-type]
    queued = not c.moving
    p = job_priorities(task_priorities(job_features(v, now, queued), now, CONFIG))[v.id]
    return dict(zip(JOB_FEATURES, job_row(c, p, now, total_gpus, CONFIG), strict=True))


def test_job_row_by_hand() -> None:
    # urgency 2; 3 iterations done so I = 4; losses (first 2.0, previous 1.0, latest 0.5):
    # δl_{I-1} = 0.5, Σ δl = 1.5, ratio 1/3; data parallel over 4 GPUs: S = 1/4.
    # now 1 h: deadline (2 h after submission at 0) 1 h away, 0.5 h remaining, waited 1 h.
    row = row_of(view(usage={"cpu": 0.4, "gpu": 2.0}), now=HOUR)
    assert row["urgency"] == 2.0
    assert row["inv_iteration"] == pytest.approx(0.25)
    assert row["loss_ratio"] == pytest.approx(1 / 3)
    assert row["partition"] == pytest.approx(0.25)
    assert row["deadline_term"] == pytest.approx(math.log1p(1.0))  # 1 / (d - t) = 1 / 1 h
    assert row["slack"] == pytest.approx(math.tanh(0.5))  # (1 h - 0.5 h) / 1 h
    assert row["has_deadline"] == 1.0
    assert row["remaining_term"] == pytest.approx(math.log1p(2.0))  # 1 / 0.5 h
    assert row["remaining"] == pytest.approx(math.log1p(0.5))
    assert row["waiting"] == pytest.approx(math.log1p(1.0))
    assert row["gpus_log"] == pytest.approx(2 / 5)
    assert row["gpus_share"] == pytest.approx(4 / 16)
    # Eq. 2: 2 * 1/4 * 1/3 * 1/4 = 1/24; Eq. 4: 0.3 / 1 + 0.3 / 0.5 + 0.35 * 1 = 1.25;
    # Eq. 6: 0.3 / 24 + 0.7 * 1.25 = 0.8875
    assert row["priority_ml"] == pytest.approx(math.log1p(1 / 24))
    assert row["priority_c"] == pytest.approx(math.log1p(1.25))
    assert row["priority"] == pytest.approx(math.log1p(0.8875))
    assert row["progress"] == pytest.approx(0.3)
    assert row["budget_log"] == pytest.approx(math.log10(11) / 6)
    assert row["tasks_log"] == pytest.approx(2 / 5)
    assert row["model_parallel"] == 0.0
    assert row["edges_per_task"] == 0.0
    assert row["batch_log"] == pytest.approx(8 / 12)  # log2(1 + 255)
    assert row["suspensions"] == pytest.approx(math.log1p(1))
    assert row["mover"] == 0.0
    # usage is summed over the 4 tasks: cpu 0.4 / 4; gpu 2.0 / 4 = 0.5
    assert row["demand_cpu"] == pytest.approx(0.1)
    assert row["demand_gpu"] == pytest.approx(0.5)
    assert row["demand_memory"] == 0.0
    assert row["demand_bandwidth"] == 0.0


def test_job_row_edge_cases() -> None:
    # No deadline: no deadline term, full slack; no estimate: no remaining terms; a mover's
    # waiting time is 0; a passed deadline is floored at 60 s (log1p(60)).
    row = row_of(view(deadline_s=None, remaining_s=None), now=HOUR, moving=True)
    assert (row["deadline_term"], row["slack"], row["has_deadline"]) == (0.0, 1.0, 0.0)
    assert (row["remaining_term"], row["remaining"]) == (0.0, 0.0)
    assert row["waiting"] == 0.0
    assert row["mover"] == 1.0
    late = row_of(view(deadline_s=HOUR / 2), now=HOUR)
    assert late["deadline_term"] == pytest.approx(math.log1p(HOUR / 60))
    assert late["slack"] < 0


def test_model_parallel_aggregates() -> None:
    # 4 partitions in a chain 0 -> 1 -> 2 -> 3, sizes 0.4, 0.3, 0.2, 0.1: the largest share is
    # 0.4, three edges over four tasks; the job's priority is its largest task priority.
    spec = MlfsSpec(
        urgency=1.0, partitions=(0.4, 0.3, 0.2, 0.1), dependencies=((0, 1), (1, 2), (2, 3))
    )
    v = view(mlfs=spec)
    row = row_of(v, now=HOUR)
    assert row["model_parallel"] == 1.0
    assert row["partition"] == pytest.approx(0.4)
    assert row["edges_per_task"] == pytest.approx(3 / 4)
    tasks = task_priorities(job_features(v, HOUR, True), HOUR, CONFIG)
    assert len(tasks) == 4
    best = max(p.total for p in tasks.values())
    assert row["priority"] == pytest.approx(math.log1p(best))
    assert job_priorities(tasks)["j"].total == best


def pool(nodes: list[NodeView]) -> HostPool:
    return HostPool(nodes, ("gpu", "cpu", "memory", "bandwidth"), CONFIG)


def test_context_row_by_hand() -> None:
    # Two 4-GPU nodes: a has 1 free GPU and cpu 0.95 (overloaded), b has 4 free, unmeasured
    # (every type counts busy GPUs / GPUs = 0).
    a = NodeView(
        "a",
        (0, 1, 2, 3),
        (3,),
        {"gpu": 0.6, "cpu": 0.95, "memory": 0.2, "bandwidth": 0.1},
        {3: 0.0},
    )
    b = NodeView("b", (0, 1, 2, 3), (0, 1, 2, 3))
    ctx = dict(zip(CONTEXT_FEATURES, context_row(pool([a, b]), 8, 3), strict=True))
    assert ctx["free_gpus"] == pytest.approx(5 / 8)
    assert ctx["util_gpu"] == pytest.approx(0.3)
    assert ctx["util_cpu"] == pytest.approx(0.475)
    assert ctx["util_memory"] == pytest.approx(0.1)
    assert ctx["util_bandwidth"] == pytest.approx(0.05)
    assert ctx["util_max"] == pytest.approx(0.95)
    assert ctx["overloaded_share"] == pytest.approx(0.5)
    assert ctx["candidates_log"] == pytest.approx(math.log1p(3) / 5)


def test_step_rows_rank_and_room() -> None:
    # Underloaded servers: only b (a is overloaded), 4 free GPUs. Jobs of 2, 4 and 8 GPUs.
    a = NodeView("a", (0, 1, 2, 3), (0, 1), {"cpu": 0.95}, {})
    b = NodeView("b", (0, 1, 2, 3), (0, 1, 2, 3))
    jobs = [Candidate(view("x", gpus=2)), Candidate(view("y", gpus=4)), Candidate(view("z", 8))]
    rows = step_rows(jobs, np.array([0.5, 2.0, 1.0]), pool([a, b]))
    assert rows.shape == (3, len(STEP_FEATURES))
    assert rows[:, 0].tolist() == [1.0, 0.0, 0.5]  # rank by P, highest first, over n - 1
    assert rows[:, 1].tolist() == [0.5, 1.0, 1.0]  # 2, 4, 8 tasks of 4 free slots, capped
    assert rows[:, 2].tolist() == [1.0, 1.0, 0.0]  # one server holds them whole


def test_mover_room_excludes_its_sources() -> None:
    b = NodeView("b", (0, 1, 2, 3), (0, 1, 2, 3))
    c = NodeView("c", (0, 1), (0,))
    running = view("m", gpus=2, placement=(TaskPlacement(0, "b", (0,)),))
    mover = Candidate(running, moving=True, sources=frozenset({"b"}), ranks=(0,))
    rows = step_rows([mover], np.array([1.0]), pool([b, c]))
    assert rows[0, 1:].tolist() == [1.0, 1.0]  # one task takes c's one free GPU
    assert mover.tasks == 1


def test_candidate_matrix_layout() -> None:
    job = np.ones((2, len(JOB_FEATURES)), dtype=np.float32)
    step = np.zeros((2, len(STEP_FEATURES)), dtype=np.float32)
    context = [float(i) for i in range(len(CONTEXT_FEATURES))]
    m = candidate_matrix(job, step, context)
    assert m.shape == (2, len(CANDIDATE_FEATURES)) and m.dtype == np.float32
    assert m[1, -len(CONTEXT_FEATURES) :].tolist() == context


def test_rows_are_finite_on_a_snapshot() -> None:
    snap = ClusterSnapshot.of(
        HOUR, {"a": 4}, queued=[view("p", losses=()), view("q", remaining_s=0.0, iteration=0)]
    )
    for v in snap.queued:
        assert all(math.isfinite(x) for x in row_of(v, snap.now).values())


def test_row_book_keeps_clock_free_columns_and_redoes_them_on_new_inputs() -> None:
    """RowBook gives job_row's row to the bit; the kept part is recomputed when the job's
    own inputs (here its iteration and losses) change, and the clock columns every time."""
    from controller.policy.mlfs.book import PriorityBook
    from controller.policy.mlfs.rl.features import RowBook

    rows, book = RowBook(), PriorityBook(CONFIG)

    def both(v: JobView, now: float) -> tuple[list[float], list[float]]:
        rows.start()
        got = book.priorities([v], [], now)
        kept = rows.row(Candidate(v), got.first(v.id), got.best(v.id), now, 16, CONFIG)
        return kept, list(row_of(v, now).values())

    first = view()
    kept, fresh = both(first, HOUR)
    assert kept == fresh
    kept, fresh = both(first, 2 * HOUR)  # an hour later: waited 2 h
    assert kept == fresh
    assert kept[JOB_FEATURES.index("waiting")] == pytest.approx(math.log1p(2.0))
    # Two more iterations and a new loss: I = 6, ratio (0.5 - 0.3) / (2.0 - 0.3) = 2 / 17
    later = view(iteration=5, losses=(2.0, 0.5, 0.3))
    kept, fresh = both(later, 2 * HOUR)
    assert kept == fresh
    assert kept[JOB_FEATURES.index("inv_iteration")] == pytest.approx(1 / 6)
    assert kept[JOB_FEATURES.index("loss_ratio")] == pytest.approx(2 / 17)


def test_row_book_rows_match_job_row_to_the_bit_over_cycles() -> None:
    """RowBook.rows (all clock columns at once, kept columns by object identity) gives
    job_row's float32 rows exactly: deadlines passed, near and absent, unknown and zero
    estimates, a model-parallel job, views kept between cycles and views replaced."""
    from controller.policy.mlfs.book import PriorityBook
    from controller.policy.mlfs.rl.features import RowBook

    parallel = MlfsSpec(urgency=3.0, partitions=(0.5, 0.3, 0.2), dependencies=((0, 1), (1, 2)))
    views = [
        view("a"),
        view("b", deadline_s=None, remaining_s=None),
        view("c", deadline_s=HOUR / 3, remaining_s=0.0, queued_since=600.0),
        view("d", gpus=3, mlfs=parallel, remaining_s=7 * HOUR),
    ]
    rows, book = RowBook(), PriorityBook(CONFIG)
    for cycle, now in enumerate((HOUR, 1.5 * HOUR, 4 * HOUR, 4 * HOUR + 60.0)):
        if cycle == 2:  # a new view object with new inputs, and one with the same inputs
            views[0] = view("a", iteration=5, losses=(2.0, 0.5, 0.3))
            views[1] = view("b", deadline_s=None, remaining_s=None)
        rows.start()
        got = book.priorities(views, [], now)
        candidates = [Candidate(v) for v in views]
        fast = rows.rows(candidates, got, now, 16, CONFIG)
        slow = np.asarray(
            [job_row(c, got.best(c.view.id), now, 16, CONFIG) for c in candidates],
            dtype=np.float32,
        )
        assert fast.dtype == np.float32
        assert fast.tobytes() == slow.tobytes()


def test_step_kinds_match_step_rows() -> None:
    from controller.policy.mlfs.rl.features import StepKinds

    """A cycle's kinds, offered in part and out of order, give step_rows' rows for the same
    candidates (step_rows finds the kinds among the offered alone)."""
    a = NodeView("a", (0, 1, 2, 3), (0, 1), {"cpu": 0.95}, {})
    b = NodeView("b", (0, 1, 2, 3), (0, 1, 2, 3))
    running = view("m", gpus=2, placement=(TaskPlacement(0, "b", (0,)),))
    mover = Candidate(running, moving=True, sources=frozenset({"b"}), ranks=(0,))
    jobs = [Candidate(view("x", gpus=2)), mover, Candidate(view("z", gpus=8))]
    totals = np.array([0.5, 2.0, 1.0])
    kinds = StepKinds(jobs)
    p = pool([a, b])
    assert kinds.rows([0, 1, 2], totals, p).tobytes() == step_rows(jobs, totals, p).tobytes()
    assert (
        kinds.rows([2, 0], totals[[2, 0]], p).tobytes()
        == step_rows([jobs[2], jobs[0]], totals[[2, 0]], p).tobytes()
    )


def test_numpy_transcendentals_give_the_c_librarys_float32_values() -> None:
    """The job rows' log1p and tanh come from NumPy's loops; as the float32 the rows are made
    of, each value is Python's ``math`` value, over many magnitudes."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.random(20_000) * scale for scale in (1e-6, 1e-2, 1.0, 50.0, 1e6)])
    logged = _log1p_all(x.reshape(-1, 1))[:, 0]
    assert np.array_equal(
        logged.astype(np.float32), np.array([math.log1p(v) for v in x], dtype=np.float32)
    )
    signed = (rng.random(50_000) - 0.5) * 8.0
    tanh = _as_libm(np.tanh, math.tanh, signed)
    assert np.array_equal(
        tanh.astype(np.float32), np.array([math.tanh(v) for v in signed], dtype=np.float32)
    )


def test_values_near_a_float32_boundary_are_the_c_librarys_own() -> None:
    """A fast function one float64 ulp above the exact one, at points halfway between two
    float32 values: rounding its result would go up where the exact value rounds to even, so
    those points take the exact function's value (here the identity)."""
    low = np.array([1.0, 1.5, 3.0, 1000.0], dtype=np.float32)
    high = np.nextafter(low, np.float32(np.inf))
    halfway = (low.astype(np.float64) + high.astype(np.float64)) / 2.0  # exact in float64
    one_up = lambda v: np.nextafter(v, np.inf)  # noqa: E731
    assert not np.array_equal(one_up(halfway).astype(np.float32), halfway.astype(np.float32))
    out = _as_libm(one_up, float, halfway)
    assert np.array_equal(out, halfway)  # every point was near a boundary: the identity's
    assert np.array_equal(out.astype(np.float32), low)  # ties to even: 1.0, 1.5, ... stay
