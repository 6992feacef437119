"""SqliteStore: round trips, transactions, events, durability across reopening."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from controller.store import SqliteStore, StoredState
from controller.store.codec import spec_from_dict, spec_to_dict
from mlsched.model import (
    Deadline,
    Event,
    GpuInfo,
    GpuMetrics,
    IterationStop,
    Job,
    JobClass,
    JobEstimate,
    JobSpec,
    JobState,
    MetricGoal,
    MlfsSpec,
    Node,
    NodeMetrics,
    ResumeRecord,
    SpeedSample,
    StopOption,
    TargetMetricStop,
    Task,
    TaskState,
)


def full_spec() -> JobSpec:
    return JobSpec(
        name="resnet-50.v2",
        command=("torchrun", "train.py", "--lr", "0.1", "a b"),
        gpus=4,
        stopping=TargetMetricStop("accuracy", 0.93, MetricGoal.MAXIMIZE, 5000),
        job_class=JobClass.SOFT_SLO,
        deadlines=(Deadline(1800.0, 100.0), Deadline(2700.0, 50.5)),
        gpus_per_process=2,
        working_dir="/srv/jobs/resnet",
        env=(("NCCL_DEBUG", "INFO"), ("SEED", "7")),
        max_retries=3,
        batch_size=256,
    )


def full_job(job_id: str = "j-full", submit_time: float = 1000.25) -> Job:
    """A job with every field away from its default."""
    return Job(
        id=job_id,
        user="bob",
        spec=full_spec(),
        state=JobState.RUNNING,
        submit_time=submit_time,
        queued_since=1500.5,
        first_start_time=1010.125,
        end_time=None,
        attempt=3,
        suspensions=2,
        failures=1,
        node_history=["n2", "n1", "n3"],
        metrics={"accuracy": 0.8125, "loss": 0.4375},
        iteration=1234,
        checkpoint_step=1200,
        restored_step=800,
        lease_expires_at=1600.0,
        master_port=29731,
        attempt_started_at=1501.0,
        message="resuming attempt 3 on n3:[0, 1]",
        resumes=[
            ResumeRecord(1100.0, 400, ("n2",), 1200.0, 400, ("n1",)),
            ResumeRecord(1400.0, 800, ("n1", "n2"), 1501.0, 800, ("n3",)),
            ResumeRecord(1550.0, 1200, ("n3",)),
        ],
        speed_samples=[SpeedSample(2, 1, 0.125, 0.0625, 40), SpeedSample(4, 2, 0.09375, 0.0, 7)],
        metric_history=[(100, 0.25), (200, 0.5), (1200, 0.8125)],
        sr_overheads_s=[12.5, 9.25],
        estimate=JobEstimate("slo", 5000, 0.09375, 352.5, 100.0, "cells 0/0/2/0", 1501.5),
    )


def simple_job(job_id: str, submit_time: float, state: JobState = JobState.PENDING) -> Job:
    spec = JobSpec("mlp", ("python", "mlp.py"), 1, IterationStop(100))
    return Job(job_id, "alice", spec, state, submit_time, submit_time)


def tasks_of(job_id: str) -> list[Task]:
    return [
        Task(job_id, 0, 3, "n3", (0, 1), TaskState.RUNNING, None, "", 1200, 800),
        Task(job_id, 1, 3, "n1", (2, 3), TaskState.FAILED, 137, "killed by OOM", 1100, 800),
    ]


def node(node_id: str = "n1", metrics: NodeMetrics | None = None) -> Node:
    return Node(
        id=node_id,
        address="10.1.2.3",
        hostname="gpu-box-3",
        gpus=(GpuInfo(0, "NVIDIA H100", False, 85899345920), GpuInfo(1, "virtual", True, 0)),
        cpu_count=64,
        memory_total_bytes=512 << 30,
        alive=True,
        last_seen=1234.5,
        metrics=metrics,
    )


@pytest.fixture
def store():
    s = SqliteStore(":memory:")
    yield s
    s.close()


# --- round trips -----------------------------------------------------------------------------


def test_empty_store_loads_nothing(store):
    assert store.load() == StoredState()


def test_job_round_trip_with_every_field(store):
    job = full_job()
    store.save_job(job)
    loaded = store.load().jobs
    assert list(loaded) == ["j-full"]
    assert loaded["j-full"] == job
    assert loaded["j-full"] is not job
    assert isinstance(loaded["j-full"].resumes[0].from_nodes, tuple)
    assert isinstance(loaded["j-full"].spec.command, tuple)


def test_job_observations_and_estimate_round_trip_with_their_types(store):
    store.save_job(full_job())
    loaded = store.load().jobs["j-full"]
    assert loaded.speed_samples == full_job().speed_samples
    assert all(isinstance(x, SpeedSample) for x in loaded.speed_samples)
    assert loaded.metric_history == [(100, 0.25), (200, 0.5), (1200, 0.8125)]
    assert all(isinstance(p, tuple) for p in loaded.metric_history)
    assert loaded.sr_overheads_s == [12.5, 9.25]
    assert loaded.estimate == full_job().estimate


def test_rows_written_before_the_observation_fields_existed_still_load(tmp_path):
    path = tmp_path / "old.db"
    job = replace(full_job(), speed_samples=[], metric_history=[], sr_overheads_s=[])
    job.estimate = None
    store = SqliteStore(path)
    store.save_job(job)
    store.close()
    conn = sqlite3.connect(path)
    [(data,)] = conn.execute("SELECT data FROM jobs").fetchall()
    old = json.loads(data)
    for key in ("speed_samples", "metric_history", "sr_overheads_s", "estimate"):
        del old[key]  # as an older controller wrote it
    conn.execute("UPDATE jobs SET data = ?", (json.dumps(old),))
    conn.commit()
    conn.close()
    store = SqliteStore(path)
    try:
        assert store.load().jobs["j-full"] == job
    finally:
        store.close()


def test_job_round_trip_of_a_terminal_job_with_iteration_stop(store):
    job = replace(
        simple_job("j-done", 5.0, JobState.COMPLETED),
        end_time=99.0,
        spec=JobSpec(
            "x",
            ("run",),
            2,
            IterationStop(10**12),
            job_class=JobClass.STRICT_SLO,
            deadlines=(Deadline(60.0, 100.0),),
        ),
    )
    store.save_job(job)
    assert store.load().jobs == {"j-done": job}


def test_target_metric_minimize_round_trips(store):
    spec = replace(full_spec(), stopping=TargetMetricStop("loss", 0.05, MetricGoal.MINIMIZE, 9))
    job = replace(full_job(), spec=spec)
    store.save_job(job)
    assert store.load().jobs["j-full"].spec.stopping == TargetMetricStop(
        "loss", 0.05, MetricGoal.MINIMIZE, 9
    )


def test_saving_a_job_again_replaces_it(store):
    job = simple_job("j-1", 1.0)
    store.save_job(job)
    job.state = JobState.STARTING
    job.attempt = 1
    job.node_history.append("n1")
    store.save_job(job)
    loaded = store.load().jobs
    assert len(loaded) == 1
    assert loaded["j-1"].state is JobState.STARTING
    assert loaded["j-1"].attempt == 1
    assert loaded["j-1"].node_history == ["n1"]


def test_jobs_load_in_submit_order(store):
    for job_id, t in [("j-c", 3.0), ("j-a", 2.0), ("j-b", 2.0), ("j-d", 1.0)]:
        store.save_job(simple_job(job_id, t))
    assert list(store.load().jobs) == ["j-d", "j-a", "j-b", "j-c"]


def test_tasks_round_trip_in_rank_order(store):
    tasks = tasks_of("j-full")
    store.save_tasks("j-full", list(reversed(tasks)))
    assert store.load().tasks == {"j-full": tasks}
    loaded = store.load().tasks["j-full"]
    assert loaded[0].gpu_indices == (0, 1) and loaded[0].exit_code is None
    assert loaded[1].exit_code == 137


def test_save_tasks_replaces_the_previous_attempt(store):
    store.save_tasks("j-1", tasks_of("j-1"))
    new = [Task("j-1", 0, 4, "n2", (1,), TaskState.LAUNCHING)]
    store.save_tasks("j-1", new)
    assert store.load().tasks == {"j-1": new}


def test_save_tasks_with_empty_list_removes_them_and_leaves_other_jobs(store):
    store.save_tasks("j-1", tasks_of("j-1"))
    store.save_tasks("j-2", tasks_of("j-2"))
    store.save_tasks("j-1", [])
    assert store.load().tasks == {"j-2": tasks_of("j-2")}


def test_node_round_trip_without_metrics(store):
    metrics = NodeMetrics(
        5.0, 12.5, 1 << 30, 2 << 30, 10.0, 20.0, (GpuMetrics(0, 50.0, 1, 2, False),)
    )
    store.save_node(node("n1", metrics))
    store.save_node(node("n0"))
    loaded = store.load().nodes
    assert list(loaded) == ["n0", "n1"]  # by id
    assert loaded["n1"] == node("n1", None)  # metrics are not persisted
    assert loaded["n1"].gpus[1] == GpuInfo(1, "virtual", True, 0)


def test_saving_a_node_again_replaces_it(store):
    store.save_node(node("n1"))
    store.save_node(replace(node("n1"), alive=False, address="10.9.9.9"))
    loaded = store.load().nodes["n1"]
    assert loaded.alive is False and loaded.address == "10.9.9.9"


# --- transactions ----------------------------------------------------------------------------


def test_transaction_commits_all_saves_together(store):
    with store.transaction():
        store.save_job(simple_job("j-1", 1.0))
        store.save_tasks("j-1", tasks_of("j-1"))
        store.append_event(1.0, "job_submitted", "hello", "j-1")
    state = store.load()
    assert list(state.jobs) == ["j-1"] and len(state.tasks["j-1"]) == 2
    assert [e.kind for e in store.events_after(0)] == ["job_submitted"]


def test_exception_rolls_the_whole_transaction_back(store):
    store.save_job(simple_job("j-keep", 1.0))
    with pytest.raises(RuntimeError, match="boom"), store.transaction():
        store.save_job(simple_job("j-lost", 2.0))
        store.save_tasks("j-keep", tasks_of("j-keep"))
        store.save_node(node("n1"))
        store.append_event(2.0, "job_submitted", "lost", "j-lost")
        raise RuntimeError("boom")
    state = store.load()
    assert list(state.jobs) == ["j-keep"]
    assert state.tasks == {} and state.nodes == {}
    assert store.events_after(0) == []


def test_nested_transaction_exception_propagating_out_rolls_back_everything(store):
    with pytest.raises(KeyError), store.transaction():
        store.save_job(simple_job("j-outer", 1.0))
        with store.transaction():
            store.save_job(simple_job("j-inner", 2.0))
            raise KeyError("x")
    assert store.load().jobs == {}


def test_store_is_usable_after_a_rollback(store):
    with pytest.raises(ValueError), store.transaction():
        store.save_job(simple_job("j-1", 1.0))
        raise ValueError
    store.save_job(simple_job("j-2", 2.0))
    with store.transaction():
        store.save_job(simple_job("j-3", 3.0))
    assert list(store.load().jobs) == ["j-2", "j-3"]


def test_events_appended_in_a_rolled_back_transaction_disappear(store):
    first = store.append_event(1.0, "a", "m")
    with pytest.raises(ValueError), store.transaction():
        store.append_event(2.0, "b", "rolled back")
        raise ValueError
    second = store.append_event(3.0, "c", "m")
    assert second.seq > first.seq
    assert [e.kind for e in store.events_after(0)] == ["a", "c"]


# --- events ----------------------------------------------------------------------------------


def test_append_event_returns_the_event_with_increasing_seq(store):
    e1 = store.append_event(10.0, "job_submitted", "m1", job_id="j-1")
    e2 = store.append_event(11.0, "node_registered", "m2", node_id="n1")
    e3 = store.append_event(12.0, "job_state", "m3", job_id="j-2", node_id="n1")
    assert e1 == Event(e1.seq, 10.0, "job_submitted", "m1", "j-1", "")
    assert e2 == Event(e2.seq, 11.0, "node_registered", "m2", "", "n1")
    assert e1.seq < e2.seq < e3.seq
    assert e1.seq >= 1


def test_events_after_filters_by_seq_and_job(store):
    e = [
        store.append_event(1.0, "k", "a", job_id="j-1"),
        store.append_event(2.0, "k", "b", job_id="j-2"),
        store.append_event(3.0, "k", "c", node_id="n1"),
        store.append_event(4.0, "k", "d", job_id="j-1", node_id="n1"),
    ]
    assert store.events_after(0) == e
    assert store.events_after(e[1].seq) == e[2:]
    assert store.events_after(0, job_id="j-1") == [e[0], e[3]]
    assert store.events_after(e[0].seq, job_id="j-1") == [e[3]]
    assert store.events_after(e[3].seq) == []
    assert store.events_after(0, job_id="nope") == []


def test_events_after_respects_the_limit_oldest_first(store):
    events = [store.append_event(float(i), "k", str(i)) for i in range(5)]
    assert store.events_after(0, limit=2) == events[:2]
    assert store.events_after(events[1].seq, limit=2) == events[2:4]


def test_iter_events_pages_through_everything(store):
    events = [store.append_event(float(i), "k", str(i), job_id=f"j-{i % 2}") for i in range(2500)]
    assert list(store.iter_events()) == events
    assert list(store.iter_events(after=events[2399].seq)) == events[2400:]
    assert [e.message for e in store.iter_events(job_id="j-1")][:3] == ["1", "3", "5"]
    assert len(list(store.iter_events(job_id="j-1"))) == 1250


# --- durability across reopening -------------------------------------------------------------


def test_reopening_the_same_file_sees_everything(tmp_path):
    path = tmp_path / "controller.db"
    first = SqliteStore(path)
    job = full_job()
    first.save_job(job)
    first.save_tasks(job.id, tasks_of(job.id))
    first.save_node(node("n1"))
    events = [first.append_event(1.0, "a", "x", job.id), first.append_event(2.0, "b", "y")]
    first.close()

    second = SqliteStore(str(path))
    state = second.load()
    assert state.jobs == {job.id: job}
    assert state.tasks == {job.id: tasks_of(job.id)}
    assert state.nodes == {"n1": node("n1")}
    assert second.events_after(0) == events
    later = second.append_event(3.0, "c", "z")
    assert later.seq > events[-1].seq
    second.close()


def test_a_second_connection_sees_committed_data_without_close(tmp_path):
    # A controller killed without closing its store: what was saved is there.
    path = tmp_path / "controller.db"
    crashed = SqliteStore(path)
    crashed.save_job(simple_job("j-1", 1.0))
    crashed.append_event(1.0, "job_submitted", "m", "j-1")
    restarted = SqliteStore(path)
    assert list(restarted.load().jobs) == ["j-1"]
    assert [e.kind for e in restarted.events_after(0)] == ["job_submitted"]
    crashed.close()
    restarted.close()


def test_rolled_back_data_is_not_seen_after_reopening(tmp_path):
    path = tmp_path / "controller.db"
    first = SqliteStore(path)
    first.save_job(simple_job("j-1", 1.0))
    with pytest.raises(RuntimeError), first.transaction():
        first.save_job(simple_job("j-2", 2.0))
        raise RuntimeError
    first.close()
    second = SqliteStore(path)
    assert list(second.load().jobs) == ["j-1"]
    second.close()


def test_event_numbers_are_never_reused_after_reopening(tmp_path):
    path = tmp_path / "controller.db"
    first = SqliteStore(path)
    last = [first.append_event(float(i), "k", "m") for i in range(3)][-1]
    first.close()
    # Even if the newest events were deleted by hand, new ones get new numbers.
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM events WHERE seq = ?", (last.seq,))
    conn.commit()
    conn.close()
    second = SqliteStore(path)
    assert second.append_event(9.0, "k", "m").seq > last.seq
    second.close()


def test_mlfs_spec_round_trips_and_old_rows_get_the_default(store):
    mlfs = MlfsSpec(
        urgency=7.5,
        partitions=(0.5, 0.25, 0.25),
        dependencies=((0, 1), (0, 2)),
        stop_option=StopOption.REQUIRED,
        system_may_switch=True,
        required_accuracy=0.8,
    )
    job = full_job()
    job.spec = replace(job.spec, gpus=3, mlfs=mlfs)
    store.save_job(job)
    loaded = store.load().jobs["j-full"].spec.mlfs
    assert loaded == mlfs
    assert isinstance(loaded.dependencies[0], tuple)
    old = spec_to_dict(job.spec)
    del old["mlfs"]
    assert spec_from_dict(old).mlfs == MlfsSpec()


# --- corrupt rows (issue 11 #7) --------------------------------------------------------------


def _corrupt(path, sql: str, *args) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql, args)
    conn.commit()
    conn.close()


def test_unreadable_rows_are_quarantined_and_the_rest_loads(tmp_path):
    path = tmp_path / "c.db"
    store = SqliteStore(path)
    for job_id, t in (("j-good", 1.0), ("j-bad", 2.0), ("j-badtask", 3.0)):
        store.save_job(simple_job(job_id, t, JobState.RUNNING))
        store.save_tasks(job_id, tasks_of(job_id))
    store.save_node(node("n1"))
    store.save_node(node("n2"))
    store.close()
    _corrupt(path, "UPDATE jobs SET data = '{not json' WHERE id = 'j-bad'")
    _corrupt(path, "UPDATE tasks SET data = '{}' WHERE job_id = 'j-badtask' AND rank = 1")
    _corrupt(path, "UPDATE nodes SET data = '[1, 2]' WHERE id = 'n2'")
    store = SqliteStore(path)
    try:
        loaded = store.load()
        assert list(loaded.jobs) == ["j-good", "j-badtask"]
        assert loaded.tasks["j-good"] == tasks_of("j-good")
        assert loaded.tasks["j-badtask"] == tasks_of("j-badtask")[:1]
        assert list(loaded.nodes) == ["n1"]
        rows = {(q.source, q.key): q for q in loaded.quarantined}
        assert set(rows) == {
            ("jobs", "j-bad"),
            ("tasks", "j-bad/0"),
            ("tasks", "j-bad/1"),
            ("tasks", "j-badtask/1"),
            ("nodes", "n2"),
        }
        assert rows[("jobs", "j-bad")].error.startswith("JSONDecodeError")
        assert rows[("tasks", "j-bad/0")].error == "its job is quarantined"
        assert rows[("nodes", "n2")].node_id == "n2"
        # moved aside, not lost: the raw data is kept; a second load is clean
        assert store.load().quarantined == []
    finally:
        store.close()
    conn = sqlite3.connect(path)
    kept = dict(conn.execute("SELECT key, data FROM quarantine").fetchall())
    conn.close()
    assert kept["j-bad"] == "{not json" and kept["n2"] == "[1, 2]"


def test_commits_are_durable_across_power_loss_synchronous_full(tmp_path):
    """Issue 11 #8: WAL with synchronous=NORMAL may lose acknowledged commits on power loss."""
    store = SqliteStore(tmp_path / "d.db")
    try:
        [(journal,)] = store._conn.execute("PRAGMA journal_mode").fetchall()
        [(synchronous,)] = store._conn.execute("PRAGMA synchronous").fetchall()
    finally:
        store.close()
    assert (journal, synchronous) == ("wal", 2)  # 2 = FULL
