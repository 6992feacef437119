"""Workload generation (UniSched §IV-B): SLO classes and deadlines, stopping criteria, density."""

from __future__ import annotations

import random
import statistics
from collections import Counter

import pytest

from mlsched.model import Deadline, JobClass
from simulator.types import TraceJob
from simulator.workload import assign_slo, assign_stopping, scale_density


def make_jobs(n: int, *, span_s: float = 1000.0) -> list[TraceJob]:
    return [
        TraceJob(
            id=f"j{i}",
            user=f"u{i % 3}",
            submit_s=span_s * i / max(1, n - 1),
            duration_s=100.0 + 10 * i,
            gpus=1 + i % 4,
            model="vgg16",
        )
        for i in range(n)
    ]


# --- assign_slo --------------------------------------------------------------------------------


def test_assign_slo_single_job_by_hand():
    job = make_jobs(1)[0]
    [strict] = assign_slo([job], random.Random(7), 1.0, 0.0)
    draws = random.Random(7)
    draws.sample(range(1), 1)  # which jobs are SLO jobs
    first = draws.uniform(1.1, 2.0) * job.duration_s
    assert strict.job_class is JobClass.STRICT_SLO
    assert strict.deadlines == (Deadline(first, 100.0),)

    [soft] = assign_slo([job], random.Random(7), 0.0, 1.0)
    assert soft.job_class is JobClass.SOFT_SLO
    assert soft.deadlines == (
        Deadline(first, 100.0),
        Deadline(first * 1.1, 80.0),
        Deadline(first * 1.2, 50.0),
        Deadline(first * 1.5, 20.0),
    )


def test_assign_slo_statistics_with_fixed_seed():
    jobs = make_jobs(2000)
    out = assign_slo(jobs, random.Random(42), strict_fraction=0.3, soft_fraction=0.5)
    assert [j.id for j in out] == [j.id for j in jobs]  # order and identity kept
    counts = Counter(j.job_class for j in out)
    assert counts == {JobClass.STRICT_SLO: 600, JobClass.SOFT_SLO: 1000, JobClass.BEST_EFFORT: 400}
    factors = []
    for job in out:
        if job.job_class is JobClass.BEST_EFFORT:
            assert job.deadlines == ()
            continue
        first = job.deadlines[0]
        assert first.reward == 100.0
        factor = first.seconds_after_submit / job.duration_s
        assert 1.1 <= factor <= 2.0
        factors.append(factor)
        if job.job_class is JobClass.STRICT_SLO:
            assert len(job.deadlines) == 1
        else:
            ratios = [d.seconds_after_submit / first.seconds_after_submit for d in job.deadlines]
            assert ratios == pytest.approx([1.0, 1.1, 1.2, 1.5])
            assert [d.reward for d in job.deadlines] == [100.0, 80.0, 50.0, 20.0]
    # Uniform on [1.1, 2]: mean 1.55, standard deviation 0.9 / sqrt(12) = 0.26.
    assert statistics.mean(factors) == pytest.approx(1.55, abs=0.02)
    assert statistics.pstdev(factors) == pytest.approx(0.9 / 12**0.5, abs=0.01)
    assert min(factors) < 1.12 and max(factors) > 1.98
    # Deterministic for a seed; the input is untouched.
    assert assign_slo(jobs, random.Random(42), 0.3, 0.5) == out
    assert assign_slo(jobs, random.Random(43), 0.3, 0.5) != out
    assert all(j.job_class is JobClass.BEST_EFFORT and not j.deadlines for j in jobs)


def test_assign_slo_overrides_existing_classes_and_rounds():
    jobs = assign_slo(make_jobs(10), random.Random(1), 1.0, 0.0)
    out = assign_slo(jobs, random.Random(1), 0.25, 0.25)  # 2.5 -> 2 (banker's rounding), 2
    assert Counter(j.job_class for j in out) == {
        JobClass.STRICT_SLO: 2,
        JobClass.SOFT_SLO: 2,
        JobClass.BEST_EFFORT: 6,
    }
    assert all(not j.deadlines for j in out if j.job_class is JobClass.BEST_EFFORT)
    assert assign_slo([], random.Random(1), 0.5, 0.5) == []


@pytest.mark.parametrize(("strict", "soft"), [(-0.1, 0.0), (0.0, 1.5), (0.6, 0.5)])
def test_assign_slo_rejects_bad_fractions(strict, soft):
    with pytest.raises(ValueError):
        assign_slo(make_jobs(3), random.Random(0), strict, soft)


# --- assign_stopping ---------------------------------------------------------------------------


def test_assign_stopping():
    jobs = make_jobs(1000)
    out = assign_stopping(jobs, random.Random(5))
    assert sum(j.performance_based for j in out) == 200  # 20 % (UniSched §IV-B)
    assert [j.id for j in out] == [j.id for j in jobs]
    assert [j.performance_based for j in assign_stopping(jobs, random.Random(5))] == [
        j.performance_based for j in out
    ]
    chosen = {i for i, j in enumerate(out) if j.performance_based}
    assert chosen == set(random.Random(5).sample(range(1000), 200))  # by hand
    assert not any(j.performance_based for j in assign_stopping(out, random.Random(5), 0.0))
    assert all(j.performance_based for j in assign_stopping(jobs, random.Random(5), 1.0))
    with pytest.raises(ValueError):
        assign_stopping(jobs, random.Random(5), 1.2)


# --- scale_density -----------------------------------------------------------------------------


def test_scale_density_down_removes_random_jobs():
    jobs = make_jobs(500)
    out = scale_density(jobs, 0.8, random.Random(3))
    assert len(out) == 400
    assert set(out) <= set(jobs)
    assert [j.submit_s for j in out] == sorted(j.submit_s for j in out)
    assert scale_density(jobs, 0.8, random.Random(3)) == out
    removed = set(random.Random(3).sample(range(500), 100))  # by hand
    assert [j.id for j in out] == [j.id for i, j in enumerate(jobs) if i not in removed]


@pytest.mark.parametrize("factor", [1.2, 1.4, 1.6])
def test_scale_density_up_injects_copies(factor):
    jobs = assign_stopping(assign_slo(make_jobs(500), random.Random(1), 0.3, 0.3), random.Random(2))
    out = scale_density(jobs, factor, random.Random(9))
    assert len(out) == round(500 * factor)
    assert len({j.id for j in out}) == len(out)
    assert [j.submit_s for j in out] == sorted(j.submit_s for j in out)
    originals = {j.id: j for j in jobs}
    copies = [j for j in out if j.id not in originals]
    assert len(copies) == len(out) - 500
    for copy in copies:
        source = originals[copy.id.split("~")[0]]
        assert 0.0 <= copy.submit_s <= 1000.0  # within the trace's span
        assert (copy.duration_s, copy.gpus, copy.job_class, copy.deadlines, copy.user) == (
            source.duration_s,
            source.gpus,
            source.job_class,
            source.deadlines,
            source.user,
        )
        assert copy.performance_based == source.performance_based
    # Roughly uniform over the span.
    assert statistics.mean(c.submit_s for c in copies) == pytest.approx(500.0, abs=60.0)
    assert scale_density(jobs, factor, random.Random(9)) == out
    assert scale_density(jobs, factor, random.Random(10)) != out


def test_scale_density_edge_cases():
    jobs = make_jobs(10)
    assert scale_density(jobs, 1.0, random.Random(0)) == jobs
    assert scale_density([], 1.5, random.Random(0)) == []
    clash = [*jobs, TraceJob("j0~0", "u", 5.0, 10.0, 1)]
    out = scale_density(clash, 2.0, random.Random(0))
    assert len({j.id for j in out}) == len(out) == 22
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="density factor"):
            scale_density(jobs, bad, random.Random(0))
