"""ONES' search operators (§3.2.2) and score (Eq. 8) on hand-built genomes."""

from __future__ import annotations

import numpy as np
import pytest

from controller.policy.ones_search import (
    Gene,
    counts,
    crossover,
    mutate,
    refresh,
    reorder,
    select,
    switching,
    utilisation,
)


def _gene(job, cap, rates=None, samples=100.0, penalty=1.0, new=False):
    return Gene(
        job, cap, tuple(rates or [10.0 * g for g in range(1, cap + 1)]), samples, penalty, new
    )


def test_reorder_packs_each_job_in_order_of_first_occurrence():
    assert reorder(("b", None, "a", "b", None, "a")) == ("b", "b", "a", "a", None, None)


def test_uniform_crossover_gives_each_gpu_of_the_parents_to_one_child_each():
    a, b = ("x", "x", "y", None), ("z", "z", "z", "z")
    flips = np.random.default_rng(3).random(4) < 0.5  # the coins crossover will throw
    first, second = crossover(a, b, np.random.default_rng(3))
    assert first == tuple(q if f else p for p, q, f in zip(a, b, flips, strict=True))
    assert second == tuple(p if f else q for p, q, f in zip(a, b, flips, strict=True))
    assert all({f, s} == {p, q} for f, s, p, q in zip(first, second, a, b, strict=True))
    assert crossover(a, a, np.random.default_rng(0)) == (a, a)


def test_mutation_preempts_whole_jobs_at_its_rate():
    genome = ("x", "x", "y", None)
    assert mutate(genome, 0.0, np.random.default_rng(0)) == genome
    assert mutate(genome, 1.0, np.random.default_rng(0)) == (None,) * 4
    # rate 0.5: x and y each dropped on their own draw
    u = np.random.default_rng(5).random(2)
    expected = tuple(None if j and u[["x", "y"].index(j)] < 0.5 else j for j in genome)
    assert mutate(genome, 0.5, np.random.default_rng(5)) == expected


def test_refresh_drops_ended_jobs_and_trims_to_the_cap():
    genes = {"a": _gene("a", 2)}
    # "gone" ended; a holds 3 but may hold 2; nothing else wants GPUs
    out = refresh(("a", "gone", "a", "a"), genes, {"a": 100.0}, np.random.default_rng(0))
    assert out == ("a", "a", None, None)


def test_refresh_gives_a_new_job_a_gpu_from_the_largest_holder_when_none_is_free():
    genes = {"a": _gene("a", 3), "b": _gene("b", 1), "n": _gene("n", 1, new=True)}
    out = refresh(
        ("a", "a", "a", "b"), genes, dict.fromkeys(genes, 100.0), np.random.default_rng(0)
    )
    assert counts(out) == {"a": 2, "b": 1, "n": 1}


def test_refresh_fills_idle_gpus_up_to_the_caps():
    genes = {"a": _gene("a", 2), "b": _gene("b", 1)}
    out = refresh((None,) * 4, genes, {"a": 100.0, "b": 50.0}, np.random.default_rng(0))
    assert counts(out) == {"a": 2, "b": 1} and out.count(None) == 1


def test_refresh_draws_idle_gpus_by_gain():
    # one idle GPU; a's next GPU adds 10 samples/s over 1000 samples, b's 10 over 10:
    # gains 0.01 and 1, so b gets it with probability 1 / 1.01
    genes = {"a": _gene("a", 2), "b": _gene("b", 1)}
    remaining = {"a": 1000.0, "b": 10.0}
    wins = sum(
        counts(refresh(("a", None), genes, remaining, np.random.default_rng(s))).get("b", 0)
        for s in range(200)
    )
    assert wins > 190


def test_utilisation_is_eq_8_by_hand():
    genes = [_gene("a", 2, [10.0, 15.0]), _gene("b", 1, [5.0], penalty=2.0)]
    draws = np.array([[100.0, 200.0], [50.0, 50.0]])
    scores = utilisation([("a", "a", "b", None), ("a", None, None, None)], genes, draws)
    # a on 2 GPUs: 2 / 15 GPU-s per sample; b on 1: 1 / 5, doubled by its penalty
    assert scores[0] == pytest.approx([2 / 15 * 100 + 0.4 * 50, 2 / 15 * 200 + 0.4 * 50])
    assert scores[1] == pytest.approx([1 / 10 * 100, 1 / 10 * 200])


def test_selection_takes_each_draws_best_in_turn():
    scores = np.array([[3.0, 1.0], [1.0, 2.0], [2.0, 3.0]])
    assert select(scores, 2) == [1, 0]
    assert select(scores, 3) == [1, 0, 2]


def test_switching_prices_a_changed_gpu_count_at_a_pause_per_gpu():
    held, pause = {"a": 2}, {"a": 25.0}
    got = switching([("a", "a", "a"), (None, None, None), ("a", "a", None)], held, pause)
    assert list(got) == [75.0, 50.0, 0.0]
