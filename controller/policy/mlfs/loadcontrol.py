"""MLF-C, ML feature based system load control (MLFS §3.5): which running jobs to stop early.

**Overload.** The cluster is overloaded when a job is queued or when the mean overload degree
``O_c = (1/|N|) sum_s ||U_s||`` exceeds ``h_s`` (``MlfsConfig.h_s``). ``U_s`` is a node's
measured utilisation vector (``NodeView.utilization``: shares of GPU, CPU, memory, bandwidth)
and ``||.||`` the Euclidean norm, so ``O_c`` may exceed 1. A node without measurements counts
with the share of its GPUs that are busy (a one-component vector).

**Options.** Each job picks a stopping option (``JobSpec.mlfs.stop_option``): (i) run its
iterations, (ii) OptStop, stop at (or near) the best accuracy predicted for its maximum
iteration (``controller.estimator.optstop``), (iii) stop once the required accuracy is reached.
Without overload the job's own option applies. Under overload, a job with
``system_may_switch`` is held to the cheaper options too: (i) to (ii) and, when it states a
required accuracy, (iii); (ii) to (iii) likewise. A switched job stops at whichever of its
options fires first (§3.5: "MLF-C makes changes on user selected options if the changes reduce
the number of iterations"; §4.1 runs every job with OptStop and stops it at its required
accuracy under overload).

**Metric.** The one MLF-C watches is ``mlsched.jobspec.watched_metric``: a target-metric job's
own metric and goal, else ``accuracy`` (maximised). (iii) compares the latest reported value
(``JobView.metrics``, else the last point of ``metric_history``) with the required accuracy;
(ii) needs the history. Jobs with neither are skipped.

Every active job is looked at on every call; the verdict is a pure function of the snapshot.
OptStop's fit is memoised on its inputs (the history and the job's budget), which is the only
thing kept between calls: a job whose history did not change costs a dictionary look-up.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

from controller.estimator.optstop import OptStopConfig, OptStopVerdict, opt_stop
from controller.policy.base import ClusterSnapshot, JobView, NodeView, Stop
from controller.policy.mlfs.config import MlfsConfig
from mlsched.jobspec import watched_metric
from mlsched.model import IterationStop, MetricGoal, StopOption

__all__ = [
    "cluster_overload",
    "effective_options",
    "is_overloaded",
    "load_control",
    "node_overload",
    "stop_reason",
]

OPTION_LABELS: Mapping[StopOption, str] = {
    StopOption.ITERATIONS: "(i) iterations",
    StopOption.OPT_STOP: "(ii) OptStop",
    StopOption.REQUIRED: "(iii) required accuracy",
}
_OPTSTOP_CACHE = 1024  # memoised OptStop verdicts: one live entry per job OptStop may stop


def node_overload(node: NodeView) -> float:
    """``O_s = ||U_s||``: the Euclidean norm of the node's utilisation shares; without
    measurements, the share of its GPUs that are busy."""
    if node.utilization:
        return math.sqrt(math.fsum(u * u for u in node.utilization.values()))
    if not node.gpu_indices:
        return 0.0
    return (len(node.gpu_indices) - len(node.free_gpu_indices)) / len(node.gpu_indices)


def cluster_overload(snapshot: ClusterSnapshot) -> float:
    """``O_c``: the mean of ``O_s`` over the snapshot's nodes (0 without nodes)."""
    if not snapshot.nodes:
        return 0.0
    return math.fsum(node_overload(n) for n in snapshot.nodes) / len(snapshot.nodes)


def is_overloaded(snapshot: ClusterSnapshot, config: MlfsConfig) -> bool:
    """§3.5: tasks in the queue, or ``O_c > h_s``."""
    return bool(snapshot.queued) or cluster_overload(snapshot) > config.h_s


def effective_options(view: JobView, overloaded: bool) -> frozenset[StopOption]:
    """The options that may stop the job now (module docstring)."""
    mlfs = view.spec.mlfs
    options = {mlfs.stop_option}
    if overloaded and mlfs.system_may_switch and mlfs.stop_option is not StopOption.REQUIRED:
        options.add(StopOption.OPT_STOP)
        if mlfs.required_accuracy is not None:
            options.add(StopOption.REQUIRED)
    return frozenset(options)


def _max_iterations(view: JobView) -> int:
    stop = view.spec.stopping
    return stop.iterations if isinstance(stop, IterationStop) else stop.max_iterations


def _latest(view: JobView, metric: str) -> float | None:
    value = view.metrics.get(metric)
    if value is None and view.metric_history:
        value = view.metric_history[-1][1]
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@functools.lru_cache(maxsize=_OPTSTOP_CACHE)
def _opt_stop(
    history: tuple[tuple[int, float], ...],
    goal: MetricGoal,
    max_iterations: int,
    required: float | None,
) -> OptStopVerdict:
    return opt_stop(history, goal, max_iterations, required, OptStopConfig())


def _switched(view: JobView, option: StopOption) -> str:
    chosen = view.spec.mlfs.stop_option
    if option is chosen:
        return ""
    return f" under overload (switched from {OPTION_LABELS[chosen]})"


def stop_reason(view: JobView, overloaded: bool) -> str | None:
    """Why MLF-C stops this job now; None to let it run."""
    options = effective_options(view, overloaded)
    if options == {StopOption.ITERATIONS}:
        return None
    metric, goal = watched_metric(view.spec)
    required = view.spec.mlfs.required_accuracy
    if StopOption.REQUIRED in options and required is not None:
        latest = _latest(view, metric)
        met = latest is not None and (
            latest >= required if goal is MetricGoal.MAXIMIZE else latest <= required
        )
        if met:
            return (
                f"MLF-C: required {metric} {required:.4g} reached ({latest:.4g})"
                f"{_switched(view, StopOption.REQUIRED)}"
            )
    if StopOption.OPT_STOP in options and view.metric_history:
        try:
            verdict = _opt_stop(
                tuple((int(i), float(v)) for i, v in view.metric_history),
                goal,
                _max_iterations(view),
                required,
            )
        except ValueError:  # a malformed history: no verdict rather than a failed cycle
            return None
        if verdict.stop:
            switched = _switched(view, StopOption.OPT_STOP)
            return f"MLF-C: OptStop{switched}: {metric} {verdict.reason}"
    return None


def load_control(snapshot: ClusterSnapshot, config: MlfsConfig) -> tuple[Stop, ...]:
    """MLF-C's early stops for this cycle: one :class:`Stop` per active job to end now, in
    the snapshot's order."""
    overloaded = is_overloaded(snapshot, config)
    stops = []
    for view in snapshot.active:
        reason = stop_reason(view, overloaded)
        if reason is not None:
            stops.append(Stop(view.id, reason))
    return tuple(stops)
