"""Fixtures that run a real controller and real agents as local processes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mlsched.client import Client
from mlsched.localcluster import ClusterTiming, LocalCluster
from mlsched.model import IterationStop, Job, JobSpec, StoppingCriterion

# pytest runs with --import-mode=importlib, which leaves sys.path alone: make the helper module
# next to this file (elastic_kit.py) importable by the tests here.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

DEFAULT_STOP = IterationStop(600)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

FAST = ClusterTiming(
    lease_s=600.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=4.0,
    suspend_grace_s=15.0,
)


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., LocalCluster]]:
    clusters: list[LocalCluster] = []

    def make(
        timing: ClusterTiming = FAST,
        nodes: dict[str, int] | None = None,
        policy: str = "fifo-lease",
        agent_flags: list[str] | None = None,
        controller_extra: tuple[str, ...] = (),
    ) -> LocalCluster:
        root = tmp_path / f"cluster{len(clusters)}"
        cluster = LocalCluster(root, timing, policy, controller_extra=controller_extra)
        clusters.append(cluster)
        cluster.start_controller()
        nodes = {"node-a": 1, "node-b": 1} if nodes is None else nodes
        for node_id, gpus in nodes.items():
            cluster.start_agent(node_id, gpus=gpus, extra=agent_flags)
        if nodes:
            cluster.wait_for_nodes(set(nodes))
        return cluster

    yield make
    for cluster in clusters:
        cluster.stop()


@pytest.fixture
def example_spec() -> Callable[..., JobSpec]:
    return _example_spec


@pytest.fixture
def wait_job() -> Callable[..., Job]:
    return _wait_job


@pytest.fixture
def ended() -> Callable[[Job], bool]:
    return lambda job: job.state.terminal


def _example_spec(
    name: str,
    script: str = "mlp_classifier.py",
    gpus: int = 1,
    stopping: StoppingCriterion = DEFAULT_STOP,
    *args: str,
    gpus_per_process: int = 1,
) -> JobSpec:
    return JobSpec(
        name=name,
        command=(sys.executable, str(EXAMPLES / script), *args),
        gpus=gpus,
        gpus_per_process=gpus_per_process,
        stopping=stopping,
        working_dir=str(EXAMPLES),
        env=(("OMP_NUM_THREADS", "1"),),  # every agent here shares the same two cores
    )


def _wait_job(
    cluster: LocalCluster,
    client: Client,
    job_id: str,
    predicate: Callable[[Job], bool],
    timeout_s: float = 120.0,
) -> Job:
    """Block until the job satisfies ``predicate``, re-checking on each of its events."""
    job, _ = client.get(job_id)
    if predicate(job):
        return job
    state: dict[str, Job] = {}

    def check(event: object) -> bool:
        state["job"] = client.get(job_id)[0]
        return predicate(state["job"])

    try:
        cluster.wait_for_event(lambda e: e.job_id == job_id and check(e), timeout_s)
    except TimeoutError:
        job, tasks = client.get(job_id)
        raise AssertionError(f"job {job_id} never satisfied the condition: {job} {tasks}") from None
    return state["job"]
