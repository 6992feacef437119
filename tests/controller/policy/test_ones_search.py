"""ONES' search operators (§3.2.2) and score (Eq. 8) on hand-built genomes: each GPU holds
(job, that worker's batch) or None."""

from __future__ import annotations

import numpy as np
import pytest

from controller.policy.ones_search import (
    Gene,
    batches,
    counts,
    crossover,
    fit,
    mutate,
    refresh,
    reorder,
    select,
    switching,
    utilisation,
)


def _gene(job, cap, rates=None, samples=100.0, penalty=1.0, new=False, **bounds):
    """A job whose throughput depends on its GPU count only (``rates[g - 1]``, default 10 g),
    or ``rates`` itself when callable (g, b) -> samples/s; ``bounds``: its batch bounds."""
    table = tuple(rates or [10.0 * g for g in range(1, cap + 1)]) if not callable(rates) else ()
    rate = rates if callable(rates) else (lambda g, b: table[g - 1])
    return Gene(job, cap, rate, samples, penalty, new, **bounds)


BATCHED = {"local": 32, "low_local": 16, "high_local": 64, "low": 1, "high": 64}


def test_reorder_packs_each_job_in_order_of_first_occurrence_keeping_batches():
    genome = (("b", 8), None, ("a", 4), ("b", 16), None, ("a", 2))
    assert reorder(genome) == (("b", 8), ("b", 16), ("a", 4), ("a", 2), None, None)
    assert counts(genome) == {"b": 2, "a": 2} and batches(genome) == {"b": 24, "a": 6}


def test_uniform_crossover_gives_each_worker_of_the_parents_to_one_child_each():
    a = (("x", 8), ("x", 16), ("y", 4), None)
    b = (("z", 2), ("z", 2), ("z", 4), ("z", 4))
    flips = np.random.default_rng(3).random(4) < 0.5  # the coins crossover will throw
    first, second = crossover(a, b, np.random.default_rng(3))
    assert first == tuple(q if f else p for p, q, f in zip(a, b, flips, strict=True))
    assert second == tuple(p if f else q for p, q, f in zip(a, b, flips, strict=True))
    assert all({f, s} == {p, q} for f, s, p, q in zip(first, second, a, b, strict=True))
    assert crossover(a, a, np.random.default_rng(0)) == (a, a)


def test_mutation_preempts_or_rebatches_whole_jobs_at_its_rate():
    genome = (("x", 8), ("x", 16), ("y", 5), None)
    assert mutate(genome, 0.0, np.random.default_rng(0)) == genome
    assert mutate(genome, 1.0, np.random.default_rng(0)) == (None,) * 4
    # rate 0.5: per job (x, y) a drop draw, a re-batch draw and a coin (double below 0.5)
    rng = np.random.default_rng(5)
    drop, move, double = rng.random(2), rng.random(2), rng.random(2) < 0.5
    expected = []
    for slot in genome:
        k = None if slot is None else "xy".index(slot[0])
        if slot is None or drop[k] < 0.5:
            expected.append(None)
        elif move[k] < 0.5:
            expected.append((slot[0], max(1, int(slot[1] * (2.0 if double[k] else 0.5)))))
        else:
            expected.append(slot)
    assert mutate(genome, 0.5, np.random.default_rng(5)) == tuple(expected)
    # a kept job re-batched doubles or halves every worker (y: 5 -> 10 or 2)
    rebatched = {mutate((("y", 5),), 0.5, np.random.default_rng(s)) for s in range(40)} - {
        (("y", 5),),
        (None,),
    }
    assert rebatched == {(("y", 10),), (("y", 2),)}


def test_fit_bounds_each_worker_then_the_global_batch():
    gene = _gene("a", 4, local=32, low_local=16, high_local=64, low=50, high=100)
    assert fit([8, 70], gene) == [16, 64]  # workers clamped; 80 within [50, 100]
    assert fit([64, 64], gene) == [50, 50]  # 128 over 100: 100 spread evenly
    assert fit([16, 16, 16], gene) == [17, 17, 16]  # 48 under 50: 50 = 17 + 17 + 16
    assert fit([5, 7], _gene("b", 2)) == [0, 0]  # not the scheduler's batch


def test_refresh_drops_ended_jobs_and_trims_to_the_cap():
    genes = {"a": _gene("a", 2)}
    # "gone" ended; a holds 3 but may hold 2; nothing else wants GPUs
    genome = (("a", 0), ("gone", 0), ("a", 0), ("a", 0))
    out = refresh(genome, genes, {"a": 100.0}, np.random.default_rng(0))
    assert out == (("a", 0), ("a", 0), None, None)


def test_refresh_scales_down_by_gpus_past_the_limit_then_refits_the_batch():
    # a (cap 2, global batch at most 64): 64 + 32 passes 64, so its 2nd and 3rd workers go;
    # the idle GPU it may still use goes back to it at its last worker's batch, 64; 128 > 64
    # is then spread evenly: 32 + 32
    genes = {"a": _gene("a", 2, **BATCHED)}
    genome = (("a", 64), ("a", 32), ("a", 32), None)
    out = refresh(genome, genes, {"a": 100.0}, np.random.default_rng(0))
    assert out == (("a", 32), ("a", 32), None, None)


def test_refresh_gives_a_new_job_one_gpu_at_its_own_batch_from_the_largest_holder():
    genes = {
        "a": _gene("a", 3),
        "b": _gene("b", 1),
        "n": _gene("n", 1, new=True, **BATCHED),
    }
    genome = (("a", 0), ("a", 0), ("a", 0), ("b", 0))
    out = refresh(genome, genes, dict.fromkeys(genes, 100.0), np.random.default_rng(0))
    assert counts(out) == {"a": 2, "b": 1, "n": 1} and batches(out)["n"] == 32


def test_refresh_fills_idle_gpus_up_to_the_caps():
    genes = {"a": _gene("a", 2), "b": _gene("b", 1)}
    out = refresh((None,) * 4, genes, {"a": 100.0, "b": 50.0}, np.random.default_rng(0))
    assert counts(out) == {"a": 2, "b": 1} and out.count(None) == 1


def test_refresh_draws_idle_gpus_by_gain_at_the_batch_they_would_add():
    # one idle GPU. a (throughput = its global batch) holds one worker at 20: a second at 20
    # adds 20 samples/s over 1,000 samples left (gain 0.02); b, waiting, adds its own 10 g on
    # one GPU over 10 left (gain 1): b gets it with probability 1 / 1.02
    genes = {
        "a": _gene(
            "a", 2, lambda g, b: float(b), local=20, low_local=10, high_local=40, low=1, high=80
        ),
        "b": _gene("b", 1),
    }
    remaining = {"a": 1000.0, "b": 10.0}
    outs = [
        refresh((("a", 20), None), genes, remaining, np.random.default_rng(s)) for s in range(200)
    ]
    assert sum(counts(o).get("b", 0) for o in outs) > 190
    assert (("a", 20), ("a", 20)) in outs  # when a wins, its new worker runs at 20


def test_utilisation_is_eq_8_by_hand_at_each_jobs_batch():
    # a's throughput is its global batch; b's 5 samples/s, its penalty 2
    genes = [_gene("a", 2, lambda g, b: float(b)), _gene("b", 1, [5.0], penalty=2.0)]
    draws = np.array([[100.0, 200.0], [50.0, 50.0]])
    two = (("a", 32), ("a", 16), ("b", 0), None)
    one = (("a", 64), None, None, None)
    scores = utilisation([two, one], genes, draws)
    # two: a on 2 GPUs at 48: 2 / 48 GPU-s per sample; b on 1: 1 / 5, doubled by its penalty
    assert scores[0] == pytest.approx([2 / 48 * 100 + 0.4 * 50, 2 / 48 * 200 + 0.4 * 50])
    assert scores[1] == pytest.approx([1 / 64 * 100, 1 / 64 * 200])


def test_selection_takes_each_draws_best_in_turn():
    scores = np.array([[3.0, 1.0], [1.0, 2.0], [2.0, 3.0]])
    assert select(scores, 2) == [1, 0]
    assert select(scores, 3) == [1, 0, 2]


def test_switching_prices_a_gpu_change_at_a_pause_and_a_batch_change_in_place():
    held, pause = {"a": (2, 64)}, {"a": 25.0}
    genomes = [
        (("a", 32), ("a", 32), ("a", 32)),  # 3 GPUs: 3 x 25
        (None, None, None),  # preempted: its 2 GPUs x 25
        (("a", 32), ("a", 32), None),  # unchanged
        (("a", 32), ("a", 16), None),  # batch 48 on the same 2 GPUs: 2 x 1 s
    ]
    assert list(switching(genomes, held, pause, 1.0)) == [75.0, 50.0, 0.0, 2.0]
