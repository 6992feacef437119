"""MLF-H's Euclidean host choice (MLFS §3.3.2) and migration choice (§3.3.3), checked against
hand-computed distances. Resource types: (gpu, cpu, memory, bandwidth); h_r = 0.9."""

from __future__ import annotations

import math

import pytest

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import (
    Server,
    TaskLoad,
    choose_host,
    choose_migrations,
    fitting_gpu,
    is_overloaded,
    lowest_priority,
    overloaded_gpus,
    place,
    remove,
    traffic_share,
)

A = Server("a", (0.5, 0.4, 0.3, 0.2), {0: 0.6, 1: 0.4})
B = Server("b", (0.2, 0.6, 0.5, 0.1), {0: 0.3, 1: 0.1})
C = Server("c", (0.3, 0.85, 0.2, 0.3), {0: 0.2, 1: 0.5})
D = Server("d", (0.95, 0.1, 0.0, 0.0), {0: 0.95})  # overloaded on gpu: not a candidate
PEERS = {("peer", 0): "a", ("peer", 1): "b", ("peer", 2): "c"}


def queued(gpu: float) -> TaskLoad:
    traffic = {("peer", 0): 20.0, ("peer", 1): 20.0, ("peer", 2): 60.0}
    return TaskLoad("new", 0, demand=(0.25, 0.1, 0.1, 0.05), gpu=gpu, traffic=traffic)


def test_host_is_the_closest_server_to_the_ideal_that_does_not_overload() -> None:
    # Traffic shares: a 20/100 = 0.2, b 0.2, c 0.6. d is overloaded, so it is left out of
    # the ideal (else its memory 0.0 would be the minimum).
    # Ideal U_V = (min gpu, cpu, memory, bandwidth over a, b, c; max share; q = 0)
    #           = (0.2, 0.4, 0.2, 0.1, 0.6, 0)
    # a: (0.3, 0, 0.1, 0.1, -0.4, 0) -> 0.09 + 0.01 + 0.01 + 0.16 = 0.27   -> 0.5196
    # b: (0, 0.2, 0.3, 0, -0.4, 0)   -> 0.04 + 0.09 + 0.16 = 0.29          -> 0.5385
    # c: (0.1, 0.45, 0, 0.2, 0, 0)   -> 0.01 + 0.2025 + 0.04 = 0.2525      -> 0.5025
    # c is closest but its cpu would reach 0.85 + 0.1 = 0.95 > 0.9: rejected. a wins; its
    # least-loaded GPU is 1 (0.4 + 0.4 = 0.8).
    choice = choose_host(queued(gpu=0.4), [D, C, B, A], placement=PEERS)
    assert choice is not None
    assert (choice.server_id, choice.gpu_index) == ("a", 1)
    assert choice.distance == pytest.approx(math.sqrt(0.27))
    # A task needing 0.6 of a GPU would take a's GPU 1 to 1.0 > 0.9: b (GPU 1, 0.1 + 0.6).
    choice = choose_host(queued(gpu=0.6), [D, C, B, A], placement=PEERS)
    assert choice is not None
    assert (choice.server_id, choice.gpu_index) == ("b", 1)
    assert choice.distance == pytest.approx(math.sqrt(0.29))


def test_no_host_when_nothing_fits() -> None:
    assert choose_host(queued(gpu=0.4), [C, D], placement=PEERS) is None  # c overloads, d is
    assert choose_host(queued(gpu=0.4), [D]) is None
    assert choose_host(queued(gpu=0.4), []) is None
    assert choose_host(queued(gpu=0.4), [Server("cpu-only", (0.0, 0.0, 0.0, 0.0), {})]) is None


def test_host_ties_go_to_the_smaller_server_id_and_degradation_counts() -> None:
    task = TaskLoad("t", 0, demand=(0.1, 0.1, 0.1, 0.1), gpu=0.1)
    twins = [Server(n, (0.2, 0.2, 0.2, 0.2), {0: 0.2, 1: 0.2}) for n in ("y", "x")]
    choice = choose_host(task, twins)
    assert choice is not None
    assert (choice.server_id, choice.gpu_index, choice.distance) == ("x", 0, 0.0)
    # Moving to x would slow the task down by 0.5: distance 0.5 > 0 for y.
    choice = choose_host(task, twins, degradation={"x": 0.5})
    assert choice is not None
    assert choice.server_id == "y"


def test_exactly_reaching_the_threshold_fits() -> None:
    server = Server("s", (0.5, 0.5, 0.5, 0.5), {0: 0.5})
    assert fitting_gpu(server, TaskLoad("t", 0, (0.4, 0.4, 0.4, 0.4), gpu=0.4), 0.9) == 0
    assert fitting_gpu(server, TaskLoad("t", 0, (0.4, 0.4, 0.4, 0.4), gpu=0.41), 0.9) is None


def test_place_and_remove_are_inverse() -> None:
    task = TaskLoad("t", 0, demand=(0.25, 0.1, 0.1, 0.05), gpu=0.4, gpu_index=1)
    placed = place(A, task, 1)
    assert placed.utilisation == pytest.approx((0.75, 0.5, 0.4, 0.25))
    assert dict(placed.gpus) == pytest.approx({0: 0.6, 1: 0.8})
    back = remove(placed, task)
    assert back.utilisation == pytest.approx(A.utilisation)
    assert dict(back.gpus) == pytest.approx(dict(A.gpus))
    assert dict(A.gpus) == {0: 0.6, 1: 0.4}  # unchanged


def four_tasks(with_traffic: bool = True) -> list[TaskLoad]:
    # (gpu, cpu, memory, bandwidth); t1 and t4 exchange half their traffic with each other.
    pair = {
        ("j", 1): {("j", 4): 50.0, ("far", 0): 50.0},
        ("j", 4): {("j", 1): 50.0, ("far", 0): 50.0},
    }
    shapes = {
        1: ((0.15, 0.06, 0.10, 0.05), 0.3, 0),
        2: ((0.15, 0.05, 0.20, 0.10), 0.2, 0),
        3: ((0.10, 0.03, 0.05, 0.05), 0.2, 1),
        4: ((0.15, 0.05, 0.10, 0.05), 0.2, 1),
    }
    return [
        TaskLoad(
            "j", i, demand, gpu, gpu_index=g, traffic=pair.get(("j", i), {}) if with_traffic else {}
        )
        for i, (demand, gpu, g) in shapes.items()
    ]


# cpu 0.97 > 0.9 (0.78 of it is load that cannot move); GPUs 0.5 and 0.4 are fine.
HOT = Server("hot", (0.6, 0.97, 0.5, 0.3), {0: 0.5, 1: 0.4})


def test_migration_removes_the_closest_tasks_until_relieved() -> None:
    # Round 1, only cpu overloaded: U_o = (min gpu 0.10, max cpu 0.06, min memory 0.05,
    # min bandwidth 0.05, traffic 0). Squared distances:
    #   t1 (0.05, 0, 0.05, 0, 0.5)         -> 0.0025 + 0.0025 + 0.25 = 0.255
    #   t2 (0.05, -0.01, 0.15, 0.05, 0)    -> 0.0025 + 0.0001 + 0.0225 + 0.0025 = 0.0276
    #   t3 (0, -0.03, 0, 0, 0)             -> 0.0009
    #   t4 (0.05, -0.01, 0.05, 0, 0.5)     -> 0.2551
    # t3 leaves: cpu 0.97 - 0.03 = 0.94, still overloaded.
    # Round 2 over t1, t2, t4: U_o = (0.15, 0.06, 0.10, 0.05, 0).
    #   t1 (0, 0, 0, 0, 0.5)               -> 0.25  (half its traffic goes to t4, still here)
    #   t2 (0, -0.01, 0.10, 0.05, 0)       -> 0.0001 + 0.01 + 0.0025 = 0.0126
    #   t4 (0, -0.01, 0, 0, 0.5)           -> 0.2501
    # t2 leaves: cpu 0.94 - 0.05 = 0.89 <= 0.9. Done.
    assert is_overloaded(HOT, 0.9)
    chosen = choose_migrations(HOT, four_tasks())
    assert [t.key for t in chosen] == [("j", 3), ("j", 2)]


def test_migration_avoids_cutting_local_traffic() -> None:
    # Without traffic, t1 matches round 2's ideal exactly (distance 0) and leaves instead.
    chosen = choose_migrations(HOT, four_tasks(with_traffic=False))
    assert [t.key for t in chosen] == [("j", 3), ("j", 1)]


def test_no_migration_from_a_server_that_is_not_overloaded() -> None:
    calm = Server("calm", (0.6, 0.5, 0.5, 0.3), {0: 0.5, 1: 0.4})
    assert choose_migrations(calm, four_tasks()) == ()


def gpu_hot_tasks() -> list[TaskLoad]:
    # GPU 0 at 0.95 carries a, b, c, d; e (the lowest priority of all) runs on GPU 1.
    shapes = {
        "a": ((0.2, 0.1, 0.1, 0.05), 0.4, 0, 5.0),
        "b": ((0.075, 0.2, 0.1, 0.05), 0.15, 0, 1.0),
        "c": ((0.15, 0.1, 0.1, 0.05), 0.3, 0, 3.0),
        "d": ((0.05, 0.1, 0.1, 0.05), 0.1, 0, 2.0),
        "e": ((0.125, 0.1, 0.1, 0.05), 0.25, 1, 0.0),
    }
    return [
        TaskLoad(n, 0, demand, gpu, gpu_index=g, priority=p)
        for n, (demand, gpu, g, p) in shapes.items()
    ]


# Every resource type is fine (gpu 0.6, cpu 0.6, ...), but GPU 0 is at 0.95.
GPU_HOT = Server("gpu-hot", (0.6, 0.6, 0.5, 0.3), {0: 0.95, 1: 0.25})


def test_hot_gpu_only_gives_up_its_lowest_priority_tasks() -> None:
    assert not is_overloaded(GPU_HOT, 0.9)
    assert overloaded_gpus(GPU_HOT, 0.9) == (0,)
    # p_s = 0.1 of the 4 tasks on GPU 0, rounded up: only b (priority 1). GPU 0 drops to 0.8.
    assert [t.job_id for t in choose_migrations(GPU_HOT, gpu_hot_tasks())] == ["b"]
    # p_s = 0.5: b and d (priorities 1, 2). The gpu type counts as overloaded:
    # U_o = (max gpu 0.075, min cpu 0.1, min memory 0.1, min bandwidth 0.05, 0)
    #   b (0, 0.1, 0, 0, 0)      -> 0.01
    #   d (-0.025, 0, 0, 0, 0)   -> 0.000625
    # d leaves; GPU 0: 0.95 - 0.1 = 0.85 <= 0.9.
    chosen = choose_migrations(GPU_HOT, gpu_hot_tasks(), MlfsConfig(p_s=0.5))
    assert [t.job_id for t in chosen] == ["d"]
    # p_s = 1: all four on GPU 0; U_o's gpu is a's 0.2 and a matches it exactly (distance 0);
    # c is 0.05 away (gpu 0.15), d 0.15, b 0.16. The plain nearest (tie=0) is a; with the
    # default near-tie band of 0.05 a and c count as equally close and c, priority 3 < a's 5,
    # leaves: GPU 0 at 0.95 - 0.3 = 0.65.
    chosen = choose_migrations(GPU_HOT, gpu_hot_tasks(), MlfsConfig(p_s=1.0), tie=0.0)
    assert [t.job_id for t in chosen] == ["a"]
    chosen = choose_migrations(GPU_HOT, gpu_hot_tasks(), MlfsConfig(p_s=1.0))
    assert [t.job_id for t in chosen] == ["c"]


def test_gpu_overload_that_no_task_causes_moves_nothing_unless_the_server_is_hot() -> None:
    tasks = [t for t in gpu_hot_tasks() if t.job_id == "e"]
    assert choose_migrations(GPU_HOT, tasks) == ()
    # With cpu at 0.95 as well, the server-level rule picks among all of them.
    hot = Server("hot", (0.6, 0.95, 0.5, 0.3), {0: 0.95, 1: 0.25})
    assert [t.job_id for t in choose_migrations(hot, tasks)] == ["e"]


def test_migration_of_everything_stops_when_no_task_is_left() -> None:
    server = Server("s", (0.2, 1.0, 0.2, 0.2), {0: 0.1})
    tasks = [TaskLoad("j", i, (0.05, 0.01, 0.05, 0.05), gpu=0.05, gpu_index=0) for i in range(2)]
    assert [t.key for t in choose_migrations(server, tasks)] == [("j", 0), ("j", 1)]


@pytest.mark.parametrize(
    ("n", "share", "count"), [(4, 0.1, 1), (15, 0.1, 2), (30, 0.1, 3), (10, 1.0, 10)]
)
def test_lowest_priority_share_rounds_up_and_keeps_at_least_one(
    n: int, share: float, count: int
) -> None:
    tasks = [TaskLoad("j", i, (0.0,) * 4, gpu=0.0, priority=float(n - i)) for i in range(n)]
    picked = lowest_priority(tasks, share)
    assert len(picked) == count
    assert [t.priority for t in picked] == sorted(t.priority for t in picked)
    assert picked[0].priority == 1.0  # the lowest


def test_traffic_share_is_normalised_by_the_task_total() -> None:
    task = queued(gpu=0.1)
    assert traffic_share(task, {("peer", 2)}) == pytest.approx(0.6)
    assert traffic_share(task, set()) == 0.0
    assert traffic_share(TaskLoad("t", 0, (0.0,) * 4, gpu=0.0), {("peer", 2)}) == 0.0


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="3 values for 4 resource types"):
        choose_host(TaskLoad("t", 0, (0.1, 0.1, 0.1), gpu=0.1), [A])
    with pytest.raises(ValueError, match="server 'x' has 2 values"):
        choose_host(queued(0.1), [Server("x", (0.1, 0.1), {0: 0.0})])
    with pytest.raises(ValueError, match="not on 'hot'"):
        choose_migrations(HOT, [TaskLoad("t", 0, (0.1,) * 4, gpu=0.1, gpu_index=7)])
    with pytest.raises(ValueError, match="utilisations must be in"):
        Server("x", (1.5, 0.0, 0.0, 0.0), {})
    with pytest.raises(ValueError, match="demands must be in"):
        TaskLoad("t", 0, (-0.1, 0.0, 0.0, 0.0), gpu=0.0)
    with pytest.raises(ValueError, match="traffic"):
        TaskLoad("t", 0, (0.0,) * 4, gpu=0.0, traffic={("p", 0): -1.0})


def test_other_resource_types() -> None:
    # Two types named by the caller; no "gpu" type, so a hot GPU marks no type as hot.
    resources = ("cpu", "nic")
    server = Server("s", (0.95, 0.2), {0: 0.3})
    tasks = [
        TaskLoad("j", 0, (0.1, 0.1), gpu=0.1, gpu_index=0),
        TaskLoad("j", 1, (0.05, 0.0), gpu=0.1, gpu_index=0),
    ]
    # U_o = (max cpu 0.1, min nic 0.0, 0): j0 (0, 0.1) -> 0.1; j1 (-0.05, 0) -> 0.05: j1 first,
    # then cpu 0.90 is not above 0.9.
    assert [t.key for t in choose_migrations(server, tasks, resources=resources)] == [("j", 1)]
    target = Server("t", (0.1, 0.1), {0: 0.0})
    choice = choose_host(tasks[0], [target], resources=resources)
    assert choice is not None
    assert choice.server_id == "t"
