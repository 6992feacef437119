"""The controller's metrics and event log lines on a controller core (manual clock, simulated
agents): every expected value below is counted by hand from the story each test tells."""

from __future__ import annotations

import json
import logging
import re
import threading
from pathlib import Path

from controller.event_follower import EventFollower, log_event, log_renewals, transition
from controller.http_metrics import ControllerMetrics
from controller.placement import TaskPlacement
from controller.policy.base import Decision, Launch, Renew, Suspend
from mlsched.logsetup import JsonFormatter
from mlsched.model import Event, GpuMetrics, JobState, NodeMetrics, TaskState
from nodeagent.http_metrics import AgentMetrics

from .test_scheduler import StubPolicy

ROOT = Path(__file__).resolve().parents[2]


def feed(c, metrics: ControllerMetrics, after: int) -> int:
    """Hand every event after ``after`` to the metrics, as the follower thread does."""
    for event in c.store.events_after(after):
        metrics.observe_event(event)
        after = event.seq
    return after


def sample(metrics: ControllerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_job_s_life_moves_the_counters_and_gauges(cluster):
    c = cluster
    metrics = ControllerMetrics(c.state)
    c.scheduler.on_cycle = metrics.observe_cycle
    c.add_node("n1", 2)
    seen = feed(c, metrics, 0)
    a = c.submit(gpus=1, name="a")
    c.advance(7.0, heartbeat=True)  # a waits 7 s in the queue
    c.cycle()
    c.report_all(a.id, TaskState.RUNNING)
    seen = feed(c, metrics, seen)

    assert sample(metrics, "mlsched_job_queue_wait_seconds_count", job_class="best-effort") == 1
    assert sample(metrics, "mlsched_job_queue_wait_seconds_sum", job_class="best-effort") == 7.0
    assert sample(metrics, "mlsched_job_launches_total", kind="start") == 1
    assert sample(metrics, "mlsched_jobs", state="running", job_class="best-effort") == 1
    assert sample(metrics, "mlsched_jobs", state="pending", job_class="best-effort") == 0
    assert sample(metrics, "mlsched_node_gpus", node_id="n1", use="busy") == 1
    assert sample(metrics, "mlsched_node_gpus", node_id="n1", use="free") == 1
    assert sample(metrics, "mlsched_scheduler_decisions_total", kind="launch") == 1
    assert sample(metrics, "mlsched_scheduler_cycle_seconds_count") == 1
    assert sample(metrics, "mlsched_events_total", kind="job_submitted") == 1
    assert sample(metrics, "mlsched_node_up", node_id="n1") == 1

    c.jobs.cancel("alice", a.id)
    c.report_all(a.id, TaskState.KILLED)
    feed(c, metrics, seen)
    assert a.state is JobState.CANCELLED
    assert sample(metrics, "mlsched_job_ends_total", state="cancelled") == 1
    assert sample(metrics, "mlsched_jobs", state="cancelled", job_class="best-effort") == 1
    assert sample(metrics, "mlsched_node_gpus", node_id="n1", use="busy") == 0


def test_renewals_suspensions_and_a_resume_after_its_wait(make_cluster):
    policy = StubPolicy()
    c = make_cluster(policy=policy)
    metrics = ControllerMetrics(c.state)
    c.scheduler.on_cycle = metrics.observe_cycle
    c.add_node("n1", 1)
    a = c.submit(gpus=1, name="a")
    launch = Decision(launch=(Launch(a.id, (TaskPlacement(0, "n1", (0,)),), 100.0),))
    policy.decision = launch
    c.cycle()
    c.report_all(a.id, TaskState.RUNNING)
    policy.decision = Decision(renew=(Renew(a.id, 100.0),))
    c.cycle()
    c.cycle()  # two renewals
    policy.decision = Decision(suspend=(Suspend(a.id, "make room"),))
    c.cycle()
    c.report_all(a.id, TaskState.SUSPENDED, checkpoint_step=10)
    assert a.state is JobState.SUSPENDED
    c.advance(30.0, heartbeat=True)  # a waits 30 s suspended
    policy.decision = launch
    c.cycle()
    feed(c, metrics, 0)

    assert sample(metrics, "mlsched_lease_renewals_total") == 2
    assert sample(metrics, "mlsched_scheduler_decisions_total", kind="renew") == 2
    assert sample(metrics, "mlsched_scheduler_decisions_total", kind="suspend") == 1
    assert sample(metrics, "mlsched_scheduler_decisions_total", kind="launch") == 2
    assert sample(metrics, "mlsched_job_suspensions_total") == 1
    assert sample(metrics, "mlsched_job_launches_total", kind="start") == 1
    assert sample(metrics, "mlsched_job_launches_total", kind="resume") == 1
    # Waits: 0 s before the first launch (same clock reading), 30 s before the resume.
    assert sample(metrics, "mlsched_job_queue_wait_seconds_count", job_class="best-effort") == 2
    assert sample(metrics, "mlsched_job_queue_wait_seconds_sum", job_class="best-effort") == 30.0
    assert sample(metrics, "mlsched_scheduler_cycle_seconds_count") == 5


def test_transition_reads_what_set_job_state_writes(cluster):
    c = cluster
    c.add_node("n1", 1)
    a = c.submit(gpus=1)
    c.cycle()
    moves = [transition(e) for e in c.store.events_after(0, a.id)]
    assert moves == [None, (JobState.PENDING, JobState.STARTING)]  # job_submitted, then launch
    assert transition(Event(1, 0.0, "job_state", "garbled")) is None


def test_event_lines_carry_job_and_node_ids(cluster, caplog):
    c = cluster
    c.add_node("n1", 1)
    a = c.submit(gpus=1)
    c.cycle()
    with caplog.at_level(logging.INFO, logger="mlsched.events"):
        for event in c.store.events_after(0):
            log_event(event)
    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    launch = next(x for x in lines if x["message"].startswith("job_state: PENDING -> STARTING"))
    assert launch["job_id"] == a.id and launch["event"] == "job_state"
    registered = next(x for x in lines if x["event"] == "node_registered")
    assert registered["node_id"] == "n1" and "job_id" not in registered


def test_the_follower_delivers_each_new_event_once_in_order(cluster):
    c = cluster
    got: list[int] = []
    both = threading.Event()

    def sink(event: Event) -> None:
        got.append(event.seq)
        if len(got) == 2:
            both.set()

    with c.state.lock:
        c.state.emit("before", "not delivered: it precedes the follower")
    follower = EventFollower(c.state, [_failing_sink, sink])  # one sink's bug spares the next
    follower.start()
    with c.state.lock:
        first = c.state.emit("one", "1")
        second = c.state.emit("two", "2")
    assert both.wait(timeout=60)
    follower.stop()
    assert got == [first.seq, second.seq]


def _failing_sink(event: Event) -> None:
    raise RuntimeError("a sink's bug")


def _families(registry) -> set[str]:
    return {family.name for family in registry.collect()}


def test_the_grafana_dashboard_uses_only_metrics_the_daemons_export(cluster):
    """Every mlsched_* name in deploy/grafana/ is a metric family of the controller or agent."""
    c = cluster
    c.add_node("n1", 1)
    agent = AgentMetrics("n1")
    agent.view.node = _metrics_sample()  # the agent's GPU gauges need a sample
    exported = _families(ControllerMetrics(c.state).registry) | _families(agent.registry)
    text = (
        Path(__file__).resolve().parents[2] / "deploy/grafana/mlsched-dashboard.json"
    ).read_text()
    exprs = [t["expr"] for p in json.loads(text)["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(total|bucket|sum|count)$", "", name)
        for expr in exprs
        for name in re.findall(r"\bmlsched_\w+", expr)
    }
    assert len(used) >= 15
    assert used - exported == set()


def _metrics_sample() -> NodeMetrics:
    """A node's metrics report as an agent samples it (one GPU)."""
    return NodeMetrics(
        time=1.0,
        cpu_percent=50.0,
        memory_used_bytes=1 << 30,
        memory_total_bytes=4 << 30,
        net_rx_bytes_per_s=0.0,
        net_tx_bytes_per_s=0.0,
        gpus=(GpuMetrics(0, 30.0, 1 << 20, 1 << 24, True),),
    )


def test_renewals_are_logged_with_their_job(caplog):
    with caplog.at_level(logging.INFO, logger="mlsched.events"):
        log_renewals(Decision(renew=(Renew("j-1", 100.0), Renew("j-2", 50.0))))
    assert [(r.job_id, r.event, r.getMessage()) for r in caplog.records] == [
        ("j-1", "lease_renewed", "lease_renewed: for 100 s"),
        ("j-2", "lease_renewed", "lease_renewed: for 50 s"),
    ]
