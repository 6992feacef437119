"""SR-aware estimator (UniSched §III-B3, Eq. 3): expected suspend/resume overhead."""

from __future__ import annotations

from math import comb


def _no_terms(n: int, m: int) -> bool:
    """Validate lease counts; True when the job runs no term (no suspension possible)."""
    if n < 0 or m < 0:
        raise ValueError(f"lease counts must be non-negative, got n={n}, m={m}")
    if n > m:
        raise ValueError(f"a job cannot run {n} lease terms within {m}")
    return n == 0


def expected_suspensions_slo(n: int, m: int) -> float:
    """Expected suspend/resume count of an SLO job running ``n`` of ``m`` lease terms.

    Eq. 3 without ``t_sr``: the n terms are a uniformly random n-subset of the m; with k + 1
    runs of consecutive terms there are k suspensions, and C(n-1, k) C(m-n+1, k+1) of the
    C(m, n) subsets have k + 1 runs.
    """
    if _no_terms(n, m):
        return 0.0
    total = comb(m, n)
    # UniSched Eq. 3: sum_k k * C(n-1, k) * C(m-n+1, k+1) / C(m, n)
    return (
        sum(k * comb(n - 1, k) * comb(m - n + 1, k + 1) for k in range(min(n - 1, m - n) + 1))
        / total
    )


def expected_suspensions_closed_form(n: int, m: int) -> float:
    """Eq. 3's sum in closed form: by linearity of expectation a random n-of-m subset has
    ``n (m - n + 1) / m`` runs (term 1 chosen, or term i chosen and i - 1 not), so
    ``n (m - n + 1) / m - 1`` suspensions. O(1) instead of O(min(n, m - n)) big binomials."""
    if _no_terms(n, m):
        return 0.0
    return n * (m - n + 1) / m - 1


def sr_overhead_slo(n: int, m: int, t_sr: float) -> float:
    """T_sr of an SLO job (Eq. 3): ``t_sr`` times the expected suspension count."""
    return t_sr * expected_suspensions_closed_form(n, m)


def sr_overhead_best_effort(n: int, t_sr: float) -> float:
    """T_sr of a best-effort job needing ``n`` lease terms: ``n / 2 * t_sr`` (§III-B3)."""
    if n < 0:
        raise ValueError(f"lease count must be non-negative, got {n}")
    return n / 2 * t_sr
