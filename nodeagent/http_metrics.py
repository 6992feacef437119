"""The agent's observability: Prometheus metrics in a registry of its own, the gRPC health
service on its trainer endpoint (SERVING while registered with the controller) and the HTTP
listener for ``/metrics`` (``--http-listen``; docs/observability.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mlsched.grpcobs import Health, RpcMetrics, RpcMetricsInterceptor
from mlsched.httplisten import HttpListener, Reply
from mlsched.model import NodeMetrics

log = logging.getLogger(__name__)

HTTP_ADDRESS_FILE = "agent.http"
HEALTH_SERVICES = ("mlsched.v1.TrainerService",)


class AgentView:
    """What the scrape-time gauges read from the agent (filled in by the agent)."""

    def __init__(self) -> None:
        self.node: NodeMetrics | None = None  # the last sample
        self.task_states: Callable[[], list[str]] = list  # one state name per task
        self.registered: Callable[[], bool] = lambda: False


class AgentMetrics:
    """Counters the agent bumps, gauges read at scrape time, gRPC metrics, health."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.registry = CollectorRegistry()
        self.rpc = RpcMetrics(self.registry)
        self.interceptor = RpcMetricsInterceptor(self.rpc)
        self.commands = Counter(
            "mlsched_agent_commands",
            "Commands from the controller by kind (launch, suspend, kill, lease, trainer)",
            ["kind"],
            registry=self.registry,
        )
        self.overload_requests = Counter(
            "mlsched_agent_overload_requests",
            "Requests sent to move a task off this overloaded node (MLFS)",
            registry=self.registry,
        )
        self.view = AgentView()
        self.registry.register(_AgentCollector(node_id, self.view))
        self.health: Health | None = None
        self._listener: HttpListener | None = None

    def add_health(self, server: grpc.Server) -> None:
        """On the trainer endpoint's server, before it starts."""
        self.health = Health(server, HEALTH_SERVICES)

    def set_registered(self, registered: bool) -> None:
        if self.health is not None:
            self.health.set_ready(registered)

    def start_http(self, listen: str, state_dir: Path) -> str:
        """Serve ``/metrics`` on ``listen``; writes the URL to ``<state-dir>/agent.http``."""
        self._listener = HttpListener(listen, self.route)
        url = self._listener.start()
        (state_dir / HTTP_ADDRESS_FILE).write_text(url + "\n")
        log.info("metrics on %s/metrics", url)
        return url

    def stop(self) -> None:
        self.set_registered(False)
        if self._listener is not None:
            self._listener.stop()
            self._listener = None

    def route(self, path: str, query: Mapping[str, str]) -> Reply | None:
        if path == "/metrics":
            return Reply(generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/healthz":
            return Reply(
                b"ok\n" if self.view.registered() else b"not registered\n",
                status=200 if self.view.registered() else 503,
            )
        return None


class _AgentCollector(Collector):
    def __init__(self, node_id: str, view: AgentView) -> None:
        self._node_id = node_id
        self._view = view

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        view = self._view
        up = GaugeMetricFamily(
            "mlsched_agent_registered", "1 while registered with the controller", labels=["node_id"]
        )
        up.add_metric([self._node_id], 1 if view.registered() else 0)
        tasks = GaugeMetricFamily("mlsched_agent_tasks", "Tasks by state", labels=["state"])
        counts: dict[str, int] = {}
        for state in view.task_states():
            counts[state] = counts.get(state, 0) + 1
        for state, n in sorted(counts.items()):
            tasks.add_metric([state.lower()], n)
        yield from (up, tasks)
        node = view.node
        if node is None:
            return
        util = GaugeMetricFamily(
            "mlsched_agent_gpu_utilization_ratio", "A GPU's utilisation (0-1)", labels=["gpu"]
        )
        used = GaugeMetricFamily(
            "mlsched_agent_gpu_memory_used_bytes", "A GPU's memory in use", labels=["gpu"]
        )
        total = GaugeMetricFamily(
            "mlsched_agent_gpu_memory_total_bytes", "A GPU's memory", labels=["gpu"]
        )
        for gpu in node.gpus:
            util.add_metric([str(gpu.index)], gpu.utilization_percent / 100.0)
            used.add_metric([str(gpu.index)], gpu.memory_used_bytes)
            total.add_metric([str(gpu.index)], gpu.memory_total_bytes)
        cpu = GaugeMetricFamily("mlsched_agent_cpu_utilization_ratio", "The machine's CPU (0-1)")
        cpu.add_metric([], node.cpu_percent / 100.0)
        ram = GaugeMetricFamily("mlsched_agent_memory_used_bytes", "The machine's memory in use")
        ram.add_metric([], node.memory_used_bytes)
        disk = GaugeMetricFamily(
            "mlsched_agent_state_disk_free_bytes", "Free bytes on the agent's state disk"
        )
        disk.add_metric([], node.state_disk_free_bytes)
        yield from (util, used, total, cpu, ram, disk)
