"""Eq. 3 against brute-force enumeration of which lease terms a job runs in."""

from itertools import combinations, pairwise

import pytest

from controller.estimator.sr import (
    expected_suspensions_closed_form,
    expected_suspensions_slo,
    sr_overhead_best_effort,
    sr_overhead_slo,
)


def brute_force_suspensions(n: int, m: int) -> float:
    """Mean number of gaps between runs of consecutive terms over all n-of-m term sets."""
    total = count = 0
    for terms in combinations(range(m), n):
        runs = 1 + sum(1 for a, b in pairwise(terms) if b != a + 1)
        total += runs - 1
        count += 1
    return total / count


@pytest.mark.parametrize("m", range(1, 10))
def test_eq3_matches_enumeration(m):
    for n in range(1, m + 1):
        assert expected_suspensions_slo(n, m) == pytest.approx(brute_force_suspensions(n, m))
        assert expected_suspensions_closed_form(n, m) == pytest.approx(
            expected_suspensions_slo(n, m)
        )


def test_closed_form_matches_eq3_for_large_counts():
    for n, m in ((40, 100), (99, 100), (1, 500), (250, 500)):
        assert expected_suspensions_closed_form(n, m) == pytest.approx(
            expected_suspensions_slo(n, m)
        )


def test_hand_computed_values():
    # n = 2 of m = 3: {01, 12} have no gap, {02} one: 1/3
    assert expected_suspensions_slo(2, 3) == pytest.approx(1 / 3)
    assert sr_overhead_slo(2, 3, 30.0) == pytest.approx(10.0)
    assert expected_suspensions_slo(3, 3) == 0.0  # runs every term: never suspended
    assert expected_suspensions_slo(0, 5) == 0.0
    assert sr_overhead_best_effort(4, 10.0) == 20.0  # n/2 t_sr


def test_invalid_counts():
    with pytest.raises(ValueError, match="cannot run"):
        expected_suspensions_slo(4, 3)
    with pytest.raises(ValueError):
        sr_overhead_best_effort(-1, 1.0)
