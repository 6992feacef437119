"""build_snapshot: what the policy is shown of the controller state."""

from __future__ import annotations

from controller import lifecycle
from controller.placement import TaskPlacement
from controller.snapshot import build_snapshot
from mlsched.model import JobState, NodeMetrics, Progress, SpeedSample, TaskState

T0 = 1_000.0


def snap(c):
    with c.state.lock:
        return build_snapshot(c.state)


def test_snapshot_of_an_empty_controller(cluster):
    s = snap(cluster)
    assert (s.now, s.nodes, s.queued, s.active, s.busy) == (T0, (), (), (), ())
    assert s.default_lease_s == 100.0


def test_snapshot_classifies_jobs_and_computes_free_gpus(cluster):
    c = cluster
    c.add_node("n2", 2)
    c.add_node("n1", 4)
    c.add_node("gone", 2)
    c.events.disconnected("gone")

    running = c.submit(gpus=2)  # best fit: n2 (2 free) beats n1 (4 free)
    c.cycle()
    c.report_all(running.id, TaskState.RUNNING)
    c.events.progress("n2", running.id, 0, 1, Progress(9, 1.5, {"accuracy": 0.25}, 0.1, 8, T0))
    c.advance(5.0, heartbeat=True)
    suspending = c.submit(gpus=1)  # n1 GPU 0
    c.cycle()
    with c.state.lock:
        lifecycle.suspend(c.state, suspending, "test")
    c.advance(5.0, heartbeat=True)
    starting = c.submit(gpus=2)  # n1 GPUs 1, 2
    c.cycle()
    pending = c.submit(gpus=8)
    done = c.submit(gpus=1)
    c.jobs.cancel("alice", done.id)

    s = snap(c)
    assert s.now == T0 + 10.0
    assert [(n.id, n.gpu_indices, n.free_gpu_indices) for n in s.nodes] == [
        ("n1", (0, 1, 2, 3), (3,)),
        ("n2", (0, 1), ()),
    ]
    assert s.free_gpus() == {"n1": (3,), "n2": ()}
    assert [v.id for v in s.queued] == [pending.id]
    assert sorted(v.id for v in s.active) == sorted([running.id, starting.id])
    assert [v.id for v in s.busy] == [suspending.id]
    assert done.id not in {v.id for v in s.queued + s.active + s.busy}

    views = {v.id: v for v in s.queued + s.active + s.busy}
    r = views[running.id]
    assert r.state is JobState.RUNNING
    assert r.placement == (TaskPlacement(0, "n2", (0,)), TaskPlacement(1, "n2", (1,)))
    assert r.running_since == T0
    assert r.lease_expires_at == T0 + 100.0
    assert (r.iteration, dict(r.metrics)) == (9, {"accuracy": 0.25, "loss": 1.5})
    assert (r.gpus, r.job_class.value, r.user, r.attempt) == (2, "best-effort", "alice", 1)
    assert views[starting.id].running_since == T0 + 10.0
    assert views[suspending.id].placement == (TaskPlacement(0, "n1", (0,)),)
    p = views[pending.id]
    assert (p.placement, p.running_since, p.lease_expires_at) == ((), None, None)
    assert p.queued_since == p.submit_time == T0 + 10.0

    # Nothing in the state has expired yet; at T0 + 100 the first lease has.
    assert s.expired() == ()
    c.advance(90.0, heartbeat=True)
    assert [v.id for v in snap(c).expired()] == [running.id]


def test_snapshot_metrics_are_a_copy(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    view = snap(c).active[0]
    job.metrics["accuracy"] = 1.0
    assert dict(view.metrics) == {}


def test_suspended_job_is_queued_with_its_new_queue_time(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = c.submit()
    c.cycle()
    c.advance(20.0, heartbeat=True)
    c.report(job.id, 0, TaskState.SUSPENDED)
    [view] = snap(c).queued
    assert view.state is JobState.SUSPENDED
    assert (view.queued_since, view.submit_time, view.suspensions) == (T0 + 20.0, T0, 1)
    assert view.placement == ()


def test_views_carry_the_observations_for_the_estimator(cluster):
    c = cluster
    c.add_node("n1", 1)
    measured, fresh = c.submit(gpus=1), c.submit(gpus=4)
    measured.speed_samples = [SpeedSample(1, 1, 0.5, 0.25, 3), SpeedSample(2, 2, 0.375, 0.0, 1)]
    measured.metric_history = [(10, 0.5), (20, 0.75)]
    measured.sr_overheads_s = [4.0, 6.5, 3.0]
    views = {v.id: v for v in snap(c).queued}
    view = views[measured.id]
    assert view.speed_samples == (SpeedSample(1, 1, 0.5, 0.25, 3), SpeedSample(2, 2, 0.375, 0.0, 1))
    assert view.metric_history == ((10, 0.5), (20, 0.75))
    assert view.sr_overhead_s == 4.5
    blank = views[fresh.id]
    assert (blank.speed_samples, blank.metric_history, blank.sr_overhead_s) == ((), (), None)


def _report_disk(c, node_id: str, full: bool) -> None:
    metrics = NodeMetrics(T0, 0.0, 1, 2, 0.0, 0.0, (), 0 if full else 1 << 30, full)
    c.events.heartbeat(node_id, metrics)


def test_a_node_with_a_full_state_disk_shows_no_free_gpus_and_takes_no_launch(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    _report_disk(c, "n1", full=True)
    assert [(n.id, n.free_gpu_indices) for n in snap(c).nodes] == [("n1", ()), ("n2", (0, 1))]
    job = c.submit(gpus=2)
    c.cycle()
    assert [t.node_id for t in c.state.tasks[job.id]] == ["n2", "n2"]  # a task per GPU
    with c.state.lock:
        why = lifecycle.unavailable(c.state, (TaskPlacement(0, "n1", (0,)),), "other")
    assert why == "node n1's state disk is full"
    _report_disk(c, "n1", full=False)
    assert [(n.id, n.free_gpu_indices) for n in snap(c).nodes] == [("n1", (0, 1)), ("n2", ())]


def test_full_and_roomy_state_disks_are_events_once_each(cluster):
    c = cluster
    c.add_node("n1", 1)
    _report_disk(c, "n1", full=True)
    c.cycle()
    c.cycle()
    _report_disk(c, "n1", full=False)
    c.cycle()
    kinds = [e.kind for e in c.store.events_after(0) if e.kind.startswith("node_disk")]
    assert kinds == ["node_disk_full", "node_disk_ok"]
