"""Job duration (UniSched §III-B, Eq. 1) and the iteration count a job needs."""

from __future__ import annotations

from collections.abc import Sequence

from controller.estimator.curves import predict_target_iteration
from mlsched.model import IterationStop, StoppingCriterion


def duration_s(t_sr: float, iterations: float, t_iter: float) -> float:
    """Eq. 1: T_dur = T_sr + N_iter * T_iter."""
    return t_sr + iterations * t_iter


def predicted_iterations(
    stopping: StoppingCriterion,
    history: Sequence[tuple[int, float]],
    use_learning_curves: bool = True,
) -> int:
    """N_iter: the user's budget for iteration-based jobs; for performance-based ones the
    learning-curve prediction of the iteration reaching the target (§III-B2), capped by the
    maximum, or the maximum when ``use_learning_curves`` is off (the Chronus behaviour)."""
    if isinstance(stopping, IterationStop):
        return stopping.iterations
    if not use_learning_curves:
        return stopping.max_iterations
    prediction = predict_target_iteration(
        history, stopping.target, stopping.goal, stopping.max_iterations
    )
    return prediction.iteration
