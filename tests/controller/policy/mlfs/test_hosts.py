"""HostPool's vectorised host choice (controller/policy/mlfs/hosts.py) against the reference
rule, euclid.choose_host, on random pools: the same server, GPU and distance, every time."""

from __future__ import annotations

import random

import numpy as np
import pytest

from controller.policy.base import NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import TaskLoad, choose_host
from controller.policy.mlfs.hosts import HostPool, NodeMemo

TYPES = ("gpu", "cpu", "memory", "bandwidth")
CONFIG = MlfsConfig()


def _nodes(rng: random.Random, count: int) -> list[NodeView]:
    levels = (0.0, 0.1, 0.5, 0.85, 0.9, 0.95)  # few values: many exact ties
    nodes = []
    for i in range(count):
        free = tuple(sorted(rng.sample(range(8), rng.randint(0, 8))))
        util = {r: rng.choice(levels) for r in TYPES} if rng.random() < 0.8 else {}
        gpu_load = {g: rng.choice((0.0, 0.0, 0.5, 0.95)) for g in range(8)}
        nodes.append(NodeView(f"n{i:02d}", tuple(range(8)), free, util, gpu_load))
    return nodes


@pytest.mark.parametrize("seed", range(40))
def test_choose_is_choose_host(seed: int) -> None:
    rng = random.Random(seed)
    pool = HostPool(_nodes(rng, rng.randint(1, 30)), TYPES, CONFIG)
    servers = list(pool.servers.values())
    tasks = 6
    placement = {("p", k): rng.choice(servers).id for k in range(tasks) if rng.random() < 0.5}
    for k in range(tasks):
        traffic = {("p", j): rng.choice((1.0, 2.0)) for j in range(tasks) if j != k}
        demand = tuple(rng.choice((0.0, 0.0, 0.05, 0.3)) for _ in TYPES)
        task = TaskLoad(
            "p",
            k,
            demand,
            rng.choice((0.0, 0.0, 0.1)),
            traffic=traffic,
            move_s=rng.choice((0.0, 0.0, 30.0)),  # q (test_hosts_q.py)
            remaining_s=rng.choice((None, 30.0, 600.0)),
        )
        per_task = rng.choice((1, 1, 2))
        exclude = {rng.choice(servers).id} if rng.random() < 0.3 else set()
        open_ = [s for s in servers if len(s.gpus) >= per_task and s.id not in exclude]
        want = choose_host(task, open_, placement, None, CONFIG, TYPES)
        assert pool.choose(task, per_task, placement, exclude) == want


@pytest.mark.parametrize("seed", range(10))
def test_place_takes_choose_hosts_servers_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _nodes(rng, 20)
    pool = HostPool(nodes, TYPES, CONFIG)
    reference = HostPool(nodes, TYPES, CONFIG)
    demand = (0.0, 0.05, 0.02, 0.1)
    tasks = [
        TaskLoad("q", k, demand, 0.0, traffic={("q", j): 1.0 for j in range(5) if j != k})
        for k in range(5)
    ]
    got = pool.place(tasks, 1, {})
    placement: dict[tuple[str, int], str] = {}
    want = []
    for task in tasks:
        open_ = [s for s in reference.servers.values() if s.gpus]
        choice = choose_host(task, open_, placement, None, CONFIG, TYPES)
        if choice is None:
            want = None
            break
        gpus = reference._take(choice.server_id, demand, 1)
        placement[task.key] = choice.server_id
        want.append((task.key, choice.server_id, gpus))
    assert got == want


@pytest.mark.parametrize("seed", range(20))
def test_capacities_are_capacity_per_kind(seed: int) -> None:
    rng = random.Random(seed)
    pool = HostPool(_nodes(rng, rng.randint(0, 30)), TYPES, CONFIG)
    kinds = [
        (tuple(rng.choice((0.0, 0.0, 0.01, 0.05, 0.3, 0.95)) for _ in TYPES), rng.choice((1, 2, 3)))
        for _ in range(rng.randint(0, 12))
    ]
    demands = np.array([d for d, _ in kinds], dtype=np.float64).reshape(-1, len(TYPES))
    per_task = np.array([p for _, p in kinds], dtype=np.int64)
    got = pool.capacities(demands, per_task).tolist()
    assert got == [pool.capacity(d, p) for d, p in kinds]


def _state(pool: HostPool) -> tuple[object, ...]:
    arrays = (pool._point, pool._free, pool._usable, pool._least, pool._hot)
    return (
        pool.servers,
        list(pool.servers),
        pool.sizes,
        pool.measured,
        [a.tobytes() for a in arrays],
    )


@pytest.mark.parametrize("seed", range(5))
def test_node_memo_pool_is_a_fresh_pool(seed: int) -> None:
    """A pool built again from the same node views (in any order) starts as a pool built
    without the memo, whatever the last pool changed; a new view of one node is read."""
    rng = random.Random(seed)
    nodes = _nodes(rng, 12)
    memo = NodeMemo()
    for cycle in range(6):
        if cycle == 3:
            i = rng.randrange(len(nodes))
            n = nodes[i]
            nodes[i] = NodeView(n.id, n.gpu_indices, n.gpu_indices[:1], {"cpu": 0.95}, {})
        shuffled = rng.sample(nodes, len(nodes))
        pool = HostPool(shuffled, TYPES, CONFIG, memo)
        assert _state(pool) == _state(HostPool(nodes, TYPES, CONFIG))
        for sid in list(pool.servers)[:4]:  # the decision changes its pool
            pool.unload(sid, (0.05,) * len(TYPES))
        pool.place([TaskLoad("j", 0, (0.01,) * len(TYPES), 0.0)], 1, {})


def test_placed_peers_walks_the_smaller_mapping_in_rank_order() -> None:
    from controller.policy.mlfs.hosts import _placed_peers

    traffic = {("j", k): 1.0 for k in (0, 1, 3, 4)}  # task 2's peers
    # two peers placed (fewer than the peers): walked in the placement's (rank) order
    few = {("j", 0): "n1", ("j", 1): "n0"}
    assert _placed_peers(traffic, few) == [(("j", 0), "n1"), (("j", 1), "n0")]
    # more placed than peers (another job's task among them): walked in the traffic's order
    many = {("x", 0): "n2", ("j", 4): "n3", ("j", 0): "n1", ("j", 1): "n0", ("j", 2): "n0"}
    assert _placed_peers(traffic, many) == [
        (("j", 0), "n1"),
        (("j", 1), "n0"),
        (("j", 4), "n3"),
    ]
    assert _placed_peers(traffic, {}) == []
