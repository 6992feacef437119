"""The controller's Prometheus metrics, in a registry of its own (docs/observability.md).

Three sources: the event log (counters: launches, suspensions, migrations, ends, queue wait),
each scheduling cycle (latencies, the policy's renewals and resizes), and the state read at
scrape time (gauges: jobs by state and class, GPUs and their use per node)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controller.event_follower import transition
from controller.policy.base import Decision
from controller.state import ControllerState
from mlsched.grpcobs import RpcMetrics
from mlsched.model import Event, JobClass, JobState

# Seconds: a cycle takes milliseconds to seconds (a MILP), a queue wait seconds to days.
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


class ControllerMetrics:
    """Everything ``/metrics`` shows for one controller."""

    def __init__(self, state: ControllerState) -> None:
        self.registry = CollectorRegistry()
        self.rpc = RpcMetrics(self.registry)
        r = self.registry
        self.cycle_seconds = Histogram(
            "mlsched_scheduler_cycle_seconds",
            "One scheduling cycle: liveness, snapshot, policy, applying its decision",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.decide_seconds = Histogram(
            "mlsched_scheduler_decide_seconds",
            "The policy's decide() alone (its solver, for MILP policies)",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "mlsched_scheduler_decisions",
            "Items of the policy's decisions by kind (launch, renew, suspend, migrate, resize,"
            " stop)",
            ["kind"],
            registry=r,
        )
        self.renewals = Counter("mlsched_lease_renewals", "Leases the policy renewed", registry=r)
        self.events = Counter("mlsched_events", "Events recorded, by kind", ["kind"], registry=r)
        self.launches = Counter(
            "mlsched_job_launches",
            "Attempts started: first starts and resumes after a suspension",
            ["kind"],
            registry=r,
        )
        self.suspensions = Counter(
            "mlsched_job_suspensions",
            "Jobs ordered to suspend (RUNNING/STARTING -> SUSPENDING)",
            registry=r,
        )
        self.migrations = Counter(
            "mlsched_job_migrations", "Migrations ordered (suspend here, resume there)", registry=r
        )
        self.overload_requests = Counter(
            "mlsched_overload_requests",
            "Agents' requests to move a task off an overloaded node (MLFS)",
            registry=r,
        )
        self.ends = Counter(
            "mlsched_job_ends", "Jobs that ended, by final state", ["state"], registry=r
        )
        self.queue_wait = Histogram(
            "mlsched_job_queue_wait_seconds",
            "Time a job waited in the queue (since submission or suspension) until launched",
            ["job_class"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self._state = state
        self._queued_since: dict[str, float] = {}  # job id -> when it entered the queue
        r.register(StateCollector(state))

    def observe_cycle(self, decision: Decision, cycle_s: float, decide_s: float) -> None:
        """``Scheduler.on_cycle``: latencies and what the policy decided."""
        self.cycle_seconds.observe(cycle_s)
        self.decide_seconds.observe(decide_s)
        for kind in ("launch", "renew", "suspend", "migrate", "resize", "stop"):
            count = len(getattr(decision, kind))
            if count:
                self.decisions.labels(kind).inc(count)
        self.renewals.inc(len(decision.renew))

    def observe_event(self, event: Event) -> None:
        """An :class:`~controller.event_follower.EventFollower` sink."""
        self.events.labels(event.kind).inc()
        if event.kind == "job_submitted":
            self._queued_since[event.job_id] = event.time
        elif event.kind == "migration_ordered":
            self.migrations.inc()
        elif event.kind == "migration_requested":
            self.overload_requests.inc()
        moved = transition(event)
        if moved is not None:
            self._transition(event, *moved)

    def _transition(self, event: Event, old: JobState, new: JobState) -> None:
        if new.queued:
            self._queued_since[event.job_id] = event.time
        elif new is JobState.STARTING:
            self.launches.labels("resume" if old is JobState.SUSPENDED else "start").inc()
            self._observe_wait(event)
        elif new is JobState.SUSPENDING:
            self.suspensions.inc()
        if new.terminal:
            self.ends.labels(new.value.lower()).inc()
            self._queued_since.pop(event.job_id, None)

    def _observe_wait(self, event: Event) -> None:
        since = self._queued_since.pop(event.job_id, None)
        with self._state.lock:
            job = self._state.job(event.job_id)
            if since is None and job is not None:  # queued before this controller started
                since = job.queued_since
            job_class = job.spec.job_class.value if job is not None else "unknown"
        if since is not None:
            self.queue_wait.labels(job_class).observe(max(0.0, event.time - since))


class StateCollector(Collector):
    """Gauges read from the state at each scrape."""

    def __init__(self, state: ControllerState) -> None:
        self._state = state

    def describe(self) -> list[Metric]:
        return []  # the names depend on the state: collected only at scrape time

    def collect(self) -> Iterator[Metric]:
        state = self._state
        jobs = GaugeMetricFamily(
            "mlsched_jobs", "Jobs by state and class", labels=["state", "job_class"]
        )
        gpus = GaugeMetricFamily(
            "mlsched_node_gpus", "GPUs per node, busy or free", labels=["node_id", "use"]
        )
        up = GaugeMetricFamily(
            "mlsched_node_up", "1 while the node's agent is alive and connected", labels=["node_id"]
        )
        util = GaugeMetricFamily(
            "mlsched_node_gpu_utilization_ratio",
            "A GPU's utilisation (0-1) in its agent's last report",
            labels=["node_id", "gpu"],
        )
        mem = GaugeMetricFamily(
            "mlsched_node_gpu_memory_used_bytes",
            "A GPU's memory in use in its agent's last report",
            labels=["node_id", "gpu"],
        )
        cpu = GaugeMetricFamily(
            "mlsched_node_cpu_utilization_ratio", "The node's CPU use (0-1)", labels=["node_id"]
        )
        ram = GaugeMetricFamily(
            "mlsched_node_memory_used_bytes", "The node's memory in use", labels=["node_id"]
        )
        with state.lock:
            counts = {(s, c): 0 for s in JobState for c in JobClass}
            for job in state.jobs.values():
                counts[job.state, job.spec.job_class] += 1
            busy = state.busy_gpus()
            nodes = list(state.nodes.values())
            connected = set(state.connected)
        for (job_state, job_class), n in counts.items():
            jobs.add_metric([job_state.value.lower(), job_class.value], n)
        for node in nodes:
            taken = len(busy.get(node.id, set()) & {g.index for g in node.gpus})
            gpus.add_metric([node.id, "busy"], taken)
            gpus.add_metric([node.id, "free"], len(node.gpus) - taken)
            up.add_metric([node.id], 1 if node.alive and node.id in connected else 0)
            if node.metrics is None:
                continue
            cpu.add_metric([node.id], node.metrics.cpu_percent / 100.0)
            ram.add_metric([node.id], node.metrics.memory_used_bytes)
            for gpu in node.metrics.gpus:
                util.add_metric([node.id, str(gpu.index)], gpu.utilization_percent / 100.0)
                mem.add_metric([node.id, str(gpu.index)], gpu.memory_used_bytes)
        yield from (jobs, gpus, up, util, mem, cpu, ram)
