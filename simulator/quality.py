"""SLAQ's quality metrics (SLAQ §6.1; issue 14 #4) for jobs with a measured loss curve.

A job's normalised loss reduction at time t is ``(L_0 - L(t)) / (L_0 - L_end)``, clipped to
[0, 1]: ``L(t)`` its curve's loss at the progress made by t, ``L_end`` the loss it ends at.
``quality_avg``: the mean over the jobs present (submitted, not finished) of that, averaged
over ``GRID`` instants from the first submission to the makespan (instants without a job are
left out). ``delay_90_s`` / ``delay_95_s``: time from submission until a job reaches 90 % /
95 % of its final reduction, ``{avg, median}`` over the jobs that did. Jobs whose curve ends no
lower than it starts are left out; ``null`` when no job has a curve.
"""

from __future__ import annotations

import numpy as np

from simulator.types import JobRecord, SimResult

GRID = 2000
DELAY_SAMPLES = 400  # per job, from submission to end


def _reduction(record: JobRecord):
    profile = record.job.elastic
    if profile is None or not record.progress or record.job.duration_s <= 0:
        return None
    xs = np.array([f for f, _ in profile.loss])
    ys = np.array([v for _, v in profile.loss])
    drop = ys[0] - ys[-1]
    if drop <= 0:
        return None
    times = np.array([t for t, _ in record.progress])
    done = np.array([d for _, d in record.progress]) / record.job.duration_s
    order = np.argsort(times, kind="stable")
    times, done = times[order], done[order]

    def at(t: np.ndarray) -> np.ndarray:
        fraction = np.interp(t, times, done, left=0.0, right=done[-1])
        return np.clip((ys[0] - np.interp(fraction, xs, ys)) / drop, 0.0, 1.0)

    return at


def normalised_loss_series(result: SimResult) -> tuple[np.ndarray, np.ndarray] | None:
    """SLAQ's Fig. 7a line for one policy: the mean normalised loss (1 minus the normalised
    reduction) of the jobs present, at ``GRID`` instants from the first submission to the
    makespan; instants without a job are left out. None when no job has a loss curve."""
    curves = [(r, f) for r in result.records if (f := _reduction(r)) is not None]
    if not curves:
        return None
    grid, mean_reduction = _mean_reduction(curves, result.makespan_s)
    return grid, 1.0 - mean_reduction


def _mean_reduction(curves, makespan_s: float) -> tuple[np.ndarray, np.ndarray]:
    start = min(r.job.submit_s for r, _ in curves)
    grid = np.linspace(start, max(makespan_s, start), GRID)
    total, count = np.zeros(GRID), np.zeros(GRID)
    for record, at in curves:
        end = record.end_s if record.end_s is not None else np.inf
        present = (grid >= record.job.submit_s) & (grid < end)
        total += np.where(present, at(grid), 0.0)
        count += present
    shown = count > 0
    return grid[shown], total[shown] / count[shown]


def quality_metrics(result: SimResult) -> dict:
    curves = [(r, f) for r in result.records if (f := _reduction(r)) is not None]
    if not curves:
        return {"quality_avg": None, "delay_90_s": None, "delay_95_s": None, **_resizes(result)}
    _, mean_reduction = _mean_reduction(curves, result.makespan_s)
    quality = float(np.mean(mean_reduction)) if mean_reduction.size else None
    return {
        "quality_avg": quality,
        "delay_90_s": _delays(curves, 0.9),
        "delay_95_s": _delays(curves, 0.95),
        **_resizes(result),
    }


def _resizes(result: SimResult) -> dict:
    jobs = len(result.records)
    return {
        "resizes_per_job": sum(r.resizes for r in result.records) / jobs if jobs else None,
        "refused_resizes": result.refused_resizes,
    }


def _delays(curves, share: float) -> dict | None:
    delays = []
    for record, at in curves:
        end = record.end_s if record.end_s is not None else record.progress[-1][0]
        times = np.linspace(record.job.submit_s, end, DELAY_SAMPLES)
        reached = np.nonzero(at(times) >= share - 1e-9)[0]
        if reached.size:
            delays.append(float(times[reached[0]] - record.job.submit_s))
    if not delays:
        return None
    return {"avg": float(np.mean(delays)), "median": float(np.median(delays))}
