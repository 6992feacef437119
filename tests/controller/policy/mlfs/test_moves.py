"""The overload and placement rules MLF-H and MLF-RL share (MLFS §3.3.2-3.3.3), called
directly. Resource types (gpu, cpu, memory, bandwidth); h_r = 0.9."""

from __future__ import annotations

from controller.placement import TaskPlacement
from controller.policy.base import JobView, NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.moves import (
    Mover,
    find_movers,
    hot_servers,
    place_mover,
    place_queued,
    queued_demand,
    task_priority,
    unload_movers,
)
from mlsched.model import IterationStop, JobSpec, JobState

TYPES = ("gpu", "cpu", "memory", "bandwidth")
CONFIG = MlfsConfig()
HOT = (0.3, 0.95, 0.2, 0.2)  # cpu above h_r
COOL = (0.1, 0.1, 0.1, 0.1)


def node(node_id: str, free: tuple[int, ...], util: tuple[float, ...] = ()) -> NodeView:
    return NodeView(node_id, tuple(range(8)), free, dict(zip(TYPES, util, strict=False)), {})


def job(
    job_id: str,
    placement: tuple[tuple[str, int], ...] = (),
    usage: dict[str, float] | None = None,
    asked: bool = False,
    gpus: int = 0,
) -> JobView:
    """A running job with one GPU per task at ``placement`` ((node, gpu) per rank), or a queued
    one of ``gpus`` GPUs when ``placement`` is empty."""
    count = len(placement) or gpus
    return JobView(
        id=job_id,
        user="u",
        spec=JobSpec("j", ("train",), count, IterationStop(100)),
        state=JobState.RUNNING if placement else JobState.PENDING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1 if placement else 0,
        suspensions=0,
        placement=tuple(TaskPlacement(r, n, (g,)) for r, (n, g) in enumerate(placement)),
        migration_requested=asked,
        resource_usage=usage or {},
    )


def pool(*nodes: NodeView) -> HostPool:
    return HostPool(nodes, TYPES, CONFIG)


def test_hot_servers_are_the_measured_overloaded_ones_running_active_jobs() -> None:
    hosts = pool(node("n0", (), HOT), node("n1", (), HOT), node("n2", ()), node("n3", (), COOL))
    active = [job("a", (("n0", 0),)), job("b", (("n2", 0),)), job("c", (("n3", 0),))]
    # n1 is hot but runs nothing of ours; n2 is unmeasured (never overloaded); n3 is cool.
    assert hot_servers(hosts, active, CONFIG.h_r) == {"n0"}


def test_without_a_request_the_euclidean_choice_moves() -> None:
    # cpu is hot: U_o = (min gpu 0.1, max cpu 0.6, min mem 0.1, min bw 0.1, traffic 0).
    # big (0.1, 0.6, 0.1, 0.1) is at 0, small (0.1, 0.35, 0.1, 0.1) at 0.25: big moves.
    rest = {"gpu": 0.1, "memory": 0.1, "bandwidth": 0.1}
    big = job("big", (("n0", 0),), {"cpu": 0.6, **rest})
    small = job("small", (("n0", 1),), {"cpu": 0.35, **rest})
    hosts = pool(node("n0", (), HOT), node("n1", (0, 1), COOL))
    movers = find_movers({"n0"}, [small, big], hosts, {}, CONFIG, TYPES)
    assert movers == {"big": Mover(big, frozenset({"n0"}), (0,))}


def test_an_agents_request_overrides_the_euclidean_choice() -> None:
    rest = {"gpu": 0.1, "memory": 0.1, "bandwidth": 0.1}
    big = job("big", (("n0", 0),), {"cpu": 0.6, **rest})
    small = job("small", (("n0", 1),), {"cpu": 0.35, **rest}, asked=True)
    hosts = pool(node("n0", (), HOT), node("n1", (0, 1), COOL))
    movers = find_movers({"n0"}, [small, big], hosts, {}, CONFIG, TYPES)
    assert list(movers) == ["small"]


def test_a_request_from_a_server_that_looks_fine_moves_the_whole_job() -> None:
    spanning = job("w", (("n0", 0), ("n1", 3)), {"cpu": 0.2}, asked=True)
    hosts = pool(node("n0", (), COOL), node("n1", (), COOL), node("n2", tuple(range(8)), COOL))
    movers = find_movers(set(), [spanning], hosts, {}, CONFIG, TYPES)
    assert movers == {"w": Mover(spanning, frozenset({"n0", "n1"}), (0, 1))}


def test_an_oversized_job_is_placed_by_gpus_alone_and_never_moves() -> None:
    # Two tasks at cpu 0.5 each: an idle server takes floor(0.9 / 0.5) = 1; one server.
    heavy = job("h", (("n0", 0), ("n0", 1)), {"cpu": 1.0}, asked=True)
    hosts = pool(node("n0", (2, 3), HOT))
    assert find_movers({"n0"}, [heavy], hosts, {}, CONFIG, TYPES) == {}
    queued = job("q", usage={"cpu": 1.0}, gpus=2)
    assert queued_demand(queued, hosts, TYPES) == (0.0, 0.0, 0.0, 0.0)
    light = job("l", usage={"cpu": 0.2}, gpus=2)
    assert queued_demand(light, hosts, TYPES) == (0.0, 0.1, 0.0, 0.0)


def test_place_queued_is_all_or_nothing() -> None:
    hosts = pool(node("n0", (5,), COOL))
    assert place_queued(job("two", gpus=2), (0.0,) * 4, hosts, {}) is None
    assert place_queued(job("one", gpus=1), (0.0,) * 4, hosts, {}) == (
        TaskPlacement(0, "n0", (5,)),
    )
    assert hosts.room(1) == 0  # taken from the pool


def test_a_mover_leaves_its_source_and_its_other_tasks_stay() -> None:
    w = job("w", (("n0", 0), ("n1", 3)), {"cpu": 0.2})
    hosts = pool(node("n0", (2,), HOT), node("n1", (4, 5), COOL))
    mover = Mover(w, frozenset({"n0"}), (0,))
    unload_movers(hosts, [mover], TYPES)
    assert place_mover(mover, hosts, {}, TYPES) == (
        TaskPlacement(0, "n1", (4,)),
        TaskPlacement(1, "n1", (3,)),
    )
    # nowhere else to go: n0, the source, is excluded
    alone = pool(node("n0", (2,), HOT))
    assert place_mover(mover, alone, {}, TYPES) is None


def test_a_data_parallel_job_is_keyed_by_its_task_0() -> None:
    priorities = {("a", 0): 2.0, ("b", 0): 1.0, ("b", 1): 3.0}
    assert task_priority(priorities, "a", 4) == 2.0
    assert task_priority(priorities, "b", 1) == 3.0
    assert task_priority(priorities, "c", 0) == 0.0
