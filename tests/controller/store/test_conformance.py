"""The Store contract, run against every backend (SQLite and PostgreSQL; the latter skipped with
its reason where it is not installed). The contract tests written for SQLite are collected
here again with ``store`` bound to each backend in turn."""

from __future__ import annotations

import pytest

from controller.store import StoreWriteError
from tests.controller.store.test_retention import (  # noqa: F401 - collected here again
    test_archived_events_are_still_returned_in_order,
    test_archived_jobs_leave_load_and_are_found_with_their_tasks,
    test_archived_jobs_page_in_submit_order_with_filters,
)
from tests.controller.store.test_sqlite import (  # noqa: F401 - collected here again
    node,
    simple_job,
    tasks_of,
    test_append_event_returns_the_event_with_increasing_seq,
    test_empty_store_loads_nothing,
    test_events_after_filters_by_seq_and_job,
    test_events_after_respects_the_limit_oldest_first,
    test_events_appended_in_a_rolled_back_transaction_disappear,
    test_exception_rolls_the_whole_transaction_back,
    test_iter_events_pages_through_everything,
    test_job_observations_and_estimate_round_trip_with_their_types,
    test_job_round_trip_of_a_terminal_job_with_iteration_stop,
    test_job_round_trip_with_every_field,
    test_jobs_load_in_submit_order,
    test_mlfs_spec_round_trips_and_old_rows_get_the_default,
    test_nested_transaction_exception_propagating_out_rolls_back_everything,
    test_node_round_trip_without_metrics,
    test_save_tasks_replaces_the_previous_attempt,
    test_save_tasks_with_empty_list_removes_them_and_leaves_other_jobs,
    test_saving_a_job_again_replaces_it,
    test_saving_a_node_again_replaces_it,
    test_store_is_usable_after_a_rollback,
    test_target_metric_minimize_round_trips,
    test_tasks_round_trip_in_rank_order,
    test_transaction_commits_all_saves_together,
)


@pytest.fixture
def store(any_store):
    return any_store


def test_reopening_sees_everything_saved_and_nothing_rolled_back(store_opener):
    first = store_opener()
    first.save_job(simple_job("j1", 1.0))
    first.save_tasks("j1", tasks_of("j1"))
    first.save_node(node("n1"))
    first.save_submit_request("alice", "r1", "j1", 5.0)
    with pytest.raises(RuntimeError), first.transaction():
        first.save_job(simple_job("j2", 2.0))
        raise RuntimeError("rolled back")
    with first.transaction(durable=False):  # lazy: committed all the same
        first.append_event(3.0, "k", "m", job_id="j1")
    second = store_opener()  # another connection, while the first is open
    loaded = second.load()
    assert list(loaded.jobs) == ["j1"] and loaded.tasks["j1"] == tasks_of("j1")
    assert list(loaded.nodes) == ["n1"]
    assert second.submit_request_job("alice", "r1", since=5.0) == "j1"
    assert second.submit_request_job("alice", "r1", since=5.5) is None
    assert second.submit_request_job("bob", "r1", since=0.0) is None
    assert [e.message for e in second.events_after(0)] == ["m"]


def test_event_numbers_are_never_reused_after_reopening(store_opener):
    first = store_opener()
    seqs = [first.append_event(float(t), "k", "m").seq for t in range(3)]
    first.archive_events(before=10.0)  # moved away: their numbers stay taken
    first.close()
    assert store_opener().append_event(11.0, "k", "m").seq > max(seqs)


def test_forgetting_submit_requests_counts_them(store):
    for i, t in enumerate((1.0, 2.0, 3.0)):
        store.save_submit_request("alice", f"r{i}", f"j{i}", t)
    assert store.forget_submit_requests(before=3.0) == 2
    assert store.submit_request_job("alice", "r2", since=0.0) == "j2"


def test_flush_after_lazy_commits_keeps_them(store_opener):
    store = store_opener()
    for i in range(3):
        with store.transaction(durable=False):
            store.save_job(simple_job(f"j{i}", float(i)))
    store.flush()
    store.flush()  # nothing left: a no-op
    assert list(store_opener().load().jobs) == ["j0", "j1", "j2"]


def test_a_write_on_a_lost_connection_raises_store_write_error_and_keeps_nothing(store_opener):
    store = store_opener()
    store.save_job(simple_job("j1", 1.0))
    store.close()  # as a database that went away
    with pytest.raises(StoreWriteError) as caught, store.transaction():
        store.save_job(simple_job("j2", 2.0))
    assert caught.value.__cause__ is not None
    assert list(store_opener().load().jobs) == ["j1"]


def test_a_lazy_transaction_that_raises_keeps_nothing(store):
    with pytest.raises(RuntimeError), store.transaction(durable=False):
        store.save_job(simple_job("j1", 1.0))
        store.append_event(1.0, "k", "m")
        raise RuntimeError("boom")
    assert store.load().jobs == {} and store.events_after(0) == []
