"""Buddy cells: allocations, free-cell decomposition, Eq. 14 and placement."""

from controller.policy.unisched.cells import (
    CellPool,
    CellRequest,
    allocations,
    consolidation_feasible,
    free_cells,
    top_level,
)


def test_six_gpu_allocations_include_the_papers_examples():
    found = allocations(6, 4)
    assert found[0] == (0, 0, 0, 1)  # round-up first
    for example in ((0, 0, 0, 1), (0, 1, 1, 0), (6, 0, 0, 0)):  # §III-C3
        assert example in found
    assert all(a[0] + 2 * a[1] + 4 * a[2] + 8 * a[3] == 6 for a in found[1:])
    assert allocations(6, 4, roundup=True) == ((0, 0, 0, 1),)
    assert allocations(24, 4) == ((0, 0, 0, 3),)  # > 16 GPUs: whole nodes
    assert allocations(20, 4) == ((0, 0, 0, 3),)


def test_free_cells_are_maximal_aligned_blocks():
    assert top_level(8) == 3 and top_level(1) == 0
    # node b has 2..7 free: a 2-cell at 2 and a 4-cell at 4
    assert free_cells({"a": range(8), "b": [2, 3, 4, 5, 6, 7]}, 4) == [0, 1, 1, 1]
    assert free_cells({"a": [1, 2]}, 4) == [2, 0, 0, 0]  # 1-2 is not aligned


def test_eq14():
    # three free nodes; four 0/1/1/0 jobs: level 2: 4 <= 6, level 1: 8 + 4 <= 12
    assert consolidation_feasible([0, 4, 4, 0], [0, 0, 0, 3])
    # four round-ups need four 8-cells
    assert not consolidation_feasible([0, 0, 0, 4], [0, 0, 0, 3])
    assert not consolidation_feasible([0, 4, 5, 0], [0, 0, 0, 3])  # 5 4-cells > 6? no: 10+4 > 12


def test_place_all_follows_proposition_1():
    pool = CellPool.of({"a": range(8), "b": range(8), "c": range(8)}, 4)
    placed = pool.place_all([CellRequest(f"j{i}", (0, 1, 1, 0), 6) for i in range(4)])
    assert set(placed) == {"j0", "j1", "j2", "j3"}
    used = [(p.node_id, g) for tasks in placed.values() for p in tasks for g in p.gpu_indices]
    assert len(used) == len(set(used)) == 24


def test_roundup_cell_leaves_spare_gpus_unused_and_spread_uses_two_nodes():
    pool = CellPool.of({"a": range(8), "b": range(8)}, 4)
    placed = pool.place_all([CellRequest("r", (0, 0, 0, 1), 6)])
    assert [p.gpu_indices for p in placed["r"]] == [(g,) for g in range(6)]
    # the round-up reserved node a's whole 8-cell: a 2-node spread no longer fits
    assert pool.place_all([CellRequest("s", (2, 0, 0, 0), 2, spread=True)]) == {}
    fresh = CellPool.of({"a": range(8), "b": range(8)}, 4)
    spread = fresh.place_all([CellRequest("s", (2, 0, 0, 0), 2, spread=True)])
    assert len({p.node_id for p in spread["s"]}) == 2


def test_failed_request_takes_nothing():
    pool = CellPool.of({"a": range(4)}, 3)
    placed = pool.place_all([CellRequest("big", (0, 0, 2), 8), CellRequest("ok", (0, 0, 1), 4)])
    assert set(placed) == {"ok"}


def test_a_failed_request_leaves_the_pool_as_whole_as_it_found_it():
    # 10 GPUs as a 4-cell and three 2-cells on one 8-GPU node: the 4-cell and two 2-cells
    # split the node's 8-cell before the third 2-cell fails
    pool = CellPool.of({"a": range(8)}, 4)
    assert pool.place_all([CellRequest("big", (0, 3, 1, 0), 10)]) == {}
    assert pool.cells == {"a": [(3, 0)]}
    # so the whole node still takes a job of 8 (it was turned away while the halves stayed)
    placed = pool.place_all([CellRequest("eight", (0, 0, 0, 1), 8)])
    assert [p.gpu_indices for p in placed["eight"]] == [(g,) for g in range(8)]


def test_give_back_merges_only_free_buddies():
    pool = CellPool.of({"a": [0, 1, 2, 3, 6, 7]}, 4)  # GPUs 4, 5 busy
    assert sorted(pool.cells["a"]) == [(1, 6), (2, 0)]
    pool.cells["a"].remove((2, 0))
    pool.give_back("a", 0, 0)  # its buddy, GPU 1, is not free
    assert sorted(pool.cells["a"]) == [(0, 0), (1, 6)]
    pool.give_back("a", 0, 1)  # GPUs 0 and 1 merge; (1, 0) stays: GPUs 2-3 are not in the pool
    assert sorted(pool.cells["a"]) == [(1, 0), (1, 6)]
