"""place_job, without and with_released: hand-worked placements."""

from __future__ import annotations

import dataclasses

import pytest

from controller.placement import TaskPlacement, place_job, with_released, without


def tp(rank: int, node: str, *gpus: int) -> TaskPlacement:
    return TaskPlacement(rank, node, tuple(gpus))


# --- a single node ---------------------------------------------------------------------------


def test_single_node_takes_lowest_indices_one_per_task():
    assert place_job({"n1": (0, 1, 2, 3)}, 2, 1) == (tp(0, "n1", 0), tp(1, "n1", 1))


def test_single_gpu_job():
    assert place_job({"n1": (5,)}, 1, 1) == (tp(0, "n1", 5),)


def test_best_fit_prefers_the_node_with_fewest_free_gpus_that_fits():
    free = {"n1": (0, 1, 2, 3), "n2": (2, 3), "n3": (0,)}
    # n3 is too small, n2 (2 free) fits more tightly than n1 (4 free).
    assert place_job(free, 2, 1) == (tp(0, "n2", 2), tp(1, "n2", 3))


def test_best_fit_single_gpu_goes_to_the_fullest_node():
    free = {"n1": (0, 1, 2, 3), "n2": (1, 3), "n3": (2,)}
    assert place_job(free, 1, 1) == (tp(0, "n3", 2),)


def test_best_fit_ties_are_broken_by_node_id():
    free = {"b": (0, 1), "c": (0, 1), "a": (0, 1)}
    assert place_job(free, 2, 1) == (tp(0, "a", 0), tp(1, "a", 1))


def test_gpu_indices_are_sorted_even_if_the_free_tuple_is_not():
    assert place_job({"n1": (3, 1, 2)}, 2, 1) == (tp(0, "n1", 1), tp(1, "n1", 2))


def test_whole_node_exactly_full():
    assert place_job({"n1": (0, 1), "n2": (0, 1, 2)}, 3, 1) == (
        tp(0, "n2", 0),
        tp(1, "n2", 1),
        tp(2, "n2", 2),
    )


# --- gpus_per_process > 1 --------------------------------------------------------------------


def test_two_gpus_per_process_on_one_node():
    assert place_job({"n1": (0, 1, 2, 3)}, 4, 2) == (tp(0, "n1", 0, 1), tp(1, "n1", 2, 3))


def test_two_gpus_per_process_uses_whole_chunks_of_the_sorted_free_gpus():
    # Free GPUs 1, 4, 6, 7 form the chunks (1, 4) and (6, 7).
    assert place_job({"n1": (7, 1, 6, 4)}, 4, 2) == (tp(0, "n1", 1, 4), tp(1, "n1", 6, 7))


def test_two_gpus_per_process_counts_slots_not_gpus():
    # n1 has 3 free GPUs = 1 slot of 2, n2 has 4 = 2 slots; one task of 2 GPUs goes to n1.
    free = {"n1": (0, 1, 2), "n2": (1, 2, 3, 5)}
    assert place_job(free, 2, 2) == (tp(0, "n1", 0, 1),)


def test_two_gpus_per_process_spans_when_no_node_has_two_slots():
    free = {"n1": (0, 1, 2), "n2": (0, 1, 2)}
    assert place_job(free, 4, 2) == (tp(0, "n1", 0, 1), tp(1, "n2", 0, 1))


def test_two_gpus_per_process_does_not_fit_in_single_gpus():
    assert place_job({"n1": (0,), "n2": (3,)}, 2, 2) is None


def test_four_gpus_per_process_needs_one_node_with_four():
    free = {"n1": (0, 1, 2), "n2": (0, 1, 2, 3)}
    assert place_job(free, 4, 4) == (tp(0, "n2", 0, 1, 2, 3),)


def test_best_fit_with_two_gpus_per_process_picks_fewest_free_gpus():
    # Documented: the best-fitting single node is the one with the fewest free GPUs that fit.
    # n1 has 3 free, n2 has 2 free; both hold one 2-GPU process; n2 is the tighter fit and
    # placing there keeps n1's 3 GPUs together for a later 3-GPU job.
    free = {"n1": (0, 1, 2), "n2": (0, 1)}
    assert place_job(free, 2, 2) == (tp(0, "n2", 0, 1),)


# --- spanning nodes --------------------------------------------------------------------------


def test_spans_the_fewest_nodes_emptiest_first():
    free = {"n1": (0, 1), "n2": (0, 1, 2), "n3": (0,)}
    # No node has 4; emptiest first: n2 (3) then n1 (1 of its 2); n3 is not needed.
    assert place_job(free, 4, 1) == (
        tp(0, "n2", 0),
        tp(1, "n2", 1),
        tp(2, "n2", 2),
        tp(3, "n1", 0),
    )


def test_spanning_ties_are_broken_by_node_id():
    free = {"c": (0, 1), "a": (0, 1), "b": (0, 1)}
    assert place_job(free, 5, 1) == (
        tp(0, "a", 0),
        tp(1, "a", 1),
        tp(2, "b", 0),
        tp(3, "b", 1),
        tp(4, "c", 0),
    )


def test_spanning_skips_nodes_without_free_gpus():
    free = {"a": (), "b": (2, 3), "c": (1,)}
    assert place_job(free, 3, 1) == (tp(0, "b", 2), tp(1, "b", 3), tp(2, "c", 1))


def test_spanning_uses_every_node_when_needed():
    free = {"n1": (0, 1), "n2": (0, 1)}
    assert place_job(free, 4, 1) == (
        tp(0, "n1", 0),
        tp(1, "n1", 1),
        tp(2, "n2", 0),
        tp(3, "n2", 1),
    )


# --- not fitting -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "gpus", "per_process"),
    [
        ({"n1": (0, 1), "n2": (0,)}, 4, 1),
        ({}, 1, 1),
        ({"n1": (), "n2": ()}, 1, 1),
        ({"n1": (0, 1, 2), "n2": (0,)}, 4, 2),
    ],
)
def test_not_fitting_returns_none(free, gpus, per_process):
    assert place_job(free, gpus, per_process) is None


def test_place_job_does_not_modify_the_free_map():
    free = {"n1": (1, 0), "n2": (0,)}
    place_job(free, 3, 1)
    assert free == {"n1": (1, 0), "n2": (0,)}


def test_task_placement_is_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        tp(0, "n1", 0).rank = 1  # type: ignore[misc]


# --- without / with_released -----------------------------------------------------------------


def test_without_removes_taken_gpus_and_keeps_other_nodes():
    free = {"n1": (0, 1, 2), "n2": (0, 1), "n3": ()}
    result = without(free, (tp(0, "n1", 0, 2), tp(1, "n2", 1)))
    assert result == {"n1": (1,), "n2": (0,), "n3": ()}
    assert free == {"n1": (0, 1, 2), "n2": (0, 1), "n3": ()}


def test_without_ignores_gpus_that_were_not_free():
    assert without({"n1": (0,)}, (tp(0, "n1", 1), tp(1, "n9", 0))) == {"n1": (0,)}


def test_with_released_adds_gpus_back_sorted():
    free = {"n1": (1,), "n2": ()}
    result = with_released(free, (tp(0, "n1", 2, 0), tp(1, "n2", 1)))
    assert result == {"n1": (0, 1, 2), "n2": (1,)}
    assert free == {"n1": (1,), "n2": ()}


def test_with_released_ignores_nodes_not_in_the_map():
    # A job on a node that is no longer schedulable does not make that node appear.
    assert with_released({"n1": ()}, (tp(0, "n9", 0), tp(1, "n1", 3))) == {"n1": (3,)}


def test_with_released_does_not_duplicate_already_free_gpus():
    assert with_released({"n1": (0, 1)}, (tp(0, "n1", 1),)) == {"n1": (0, 1)}


def test_place_then_without_then_with_released_round_trips():
    free = {"n1": (0, 1, 2, 3), "n2": (0, 1)}
    placement = place_job(free, 5, 1)
    assert placement is not None
    taken = without(free, placement)
    assert taken == {"n1": (), "n2": (1,)}
    assert place_job(taken, 2, 1) is None
    assert with_released(taken, placement) == free
