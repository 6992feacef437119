"""QueueBook (controller/policy/mlfs/rl/queue.py): a queued job's record is kept while its
view is the same object, matched by identity with NumPy (book.SameViews)."""

from __future__ import annotations

from dataclasses import replace

from controller.policy.base import JobView, NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.rl.queue import QueueBook, StaticRows
from mlsched.model import IterationStop, JobSpec, JobState

CONFIG = MlfsConfig()


def view(job_id: str, gpus: int = 2) -> JobView:
    spec = JobSpec(job_id, ("python", "t.py"), gpus, IterationStop(10))
    return JobView(
        id=job_id,
        user="u",
        spec=spec,
        state=JobState.PENDING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=0,
        suspensions=0,
        iteration=0,
        losses=(),
        estimated_remaining_s=None,
    )


def pool(gpus: int = 4) -> HostPool:
    ids = tuple(range(gpus))
    return HostPool([NodeView("a", ids, ids), NodeView("b", ids, ids)], DEFAULT_RESOURCES, CONFIG)


def test_records_kept_for_the_same_views_only() -> None:
    book = QueueBook()
    a, b, c = view("a"), view("b", 4), view("c")
    first = book.records([a, b, c], pool(), DEFAULT_RESOURCES)
    assert [r.view for r in first] == [a, b, c]
    assert [r.tasks for r in first] == [2, 4, 2]
    assert first[0].fit == first[1].fit == first[2].fit  # one GPU per task, no demand
    # b launched, c changed (a new view object), d arrived: a's record kept, the others new
    c2, d = replace(c, iteration=1), view("d")
    second = book.records([a, c2, d], pool(), DEFAULT_RESOURCES)
    assert second[0] is first[0]
    assert second[1] is not first[2] and second[1].view is c2
    assert second[2].view is d
    # only the latest cycle's records are kept: b is back, as a new record
    third = book.records([b, a], pool(), DEFAULT_RESOURCES)
    assert third[0] is not first[1] and third[0].view is b
    assert third[1] is first[0]
    # the servers' sizes changed: every record anew
    fourth = book.records([b, a], pool(8), DEFAULT_RESOURCES)
    assert fourth[0] is not third[0] and fourth[1] is not third[1]
    assert [r.view for r in fourth] == [b, a]


def test_static_rows_grow_and_compact_keeping_the_held_records_rows() -> None:
    rows = StaticRows(3)
    book = QueueBook()
    book.static = rows
    views = [view(f"j{i}") for i in range(3)]
    held = book.records(views, pool(), DEFAULT_RESOURCES)
    assert [r.slot for r in held] == [0, 1, 2]
    for r in held:
        rows.matrix[r.slot] = [r.slot, 10.0 * r.slot, -1.0]
    for _ in range(2000):  # slots handed out past the first matrix: it grows
        rows.slot()
    assert rows.used == 2003 and rows.matrix.shape[0] >= 2003
    # 2,003 slots out for 2 records (> 4 x 2 + 1,024): the next records() compacts
    kept = book.records([views[2], views[0]], pool(), DEFAULT_RESOURCES)
    assert [r.slot for r in kept] == [0, 1] and rows.used == 2
    assert rows.matrix[0].tolist() == [2.0, 20.0, -1.0]
    assert rows.matrix[1].tolist() == [0.0, 0.0, -1.0]
    assert book.records([views[1]], pool(), DEFAULT_RESOURCES)[0].slot == 2  # a new one
