"""MLF-C (MLFS §3.5): overload, the stopping options, switching under overload, the reasons."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView, NodeView, Stop
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.loadcontrol import (
    cluster_overload,
    effective_options,
    is_overloaded,
    load_control,
    node_overload,
    stop_reason,
)
from mlsched.model import (
    IterationStop,
    JobSpec,
    JobState,
    MetricGoal,
    MlfsSpec,
    StopOption,
    TargetMetricStop,
)

CONFIG = MlfsConfig()
ITER, OPT, REQ = StopOption.ITERATIONS, StopOption.OPT_STOP, StopOption.REQUIRED


def plateau(until: int = 3000) -> tuple[tuple[int, float], ...]:
    """Accuracy that rose from 0.4 and has levelled off at 0.9 (small deterministic noise)."""
    return tuple(
        (it, 0.9 - 0.5 * math.exp(-it / 300) + 0.004 * math.sin(it * 2.4))
        for it in range(20, until + 1, 20)
    )


def climbing(until: int = 2000) -> tuple[tuple[int, float], ...]:
    """Accuracy still rising steadily towards 0.9 over a 20,000-iteration budget."""
    return tuple((it, 0.9 - 0.5 * math.exp(-it / 6000)) for it in range(20, until + 1, 20))


def view(
    job_id: str = "a",
    *,
    option: StopOption = ITER,
    switch: bool = False,
    required: float | None = None,
    history: tuple[tuple[int, float], ...] = (),
    metrics: dict[str, float] | None = None,
    stopping=None,
    state: JobState = JobState.RUNNING,
    node: str = "n1",
    gpu: int = 0,
) -> JobView:
    spec = JobSpec(
        name=job_id,
        command=("python", "t.py"),
        gpus=1,
        stopping=stopping or IterationStop(20_000),
        mlfs=MlfsSpec(stop_option=option, system_may_switch=switch, required_accuracy=required),
    )
    if metrics is None:
        metrics = {"accuracy": history[-1][1]} if history else {}
    active = state.active
    return JobView(
        id=job_id,
        user="alice",
        spec=spec,
        state=state,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1 if active else 0,
        suspensions=0,
        iteration=history[-1][0] if history else 0,
        metrics=metrics,
        lease_expires_at=1e9 if active else None,
        placement=(TaskPlacement(0, node, (gpu,)),) if active else (),
        metric_history=history,
    )


def snapshot(*active: JobView, queued: tuple[JobView, ...] = (), gpus: int = 2) -> ClusterSnapshot:
    """One node ``n1`` with ``gpus`` GPUs: with the default 2 and one job, half busy (O_c 0.5)."""
    return ClusterSnapshot.of(100.0, {"n1": gpus}, active=active, queued=queued)


def queued(job_id: str = "q") -> JobView:
    return view(job_id, state=JobState.PENDING)


# --- overload --------------------------------------------------------------------------------


def test_node_overload_is_the_norm_of_its_utilisation():
    node = NodeView("n", (0, 1), (0, 1), {"gpu": 0.6, "cpu": 0.8})
    assert node_overload(node) == pytest.approx(1.0)
    full = NodeView("n", (0,), (), {"gpu": 1.0, "cpu": 1.0, "memory": 1.0, "bandwidth": 1.0})
    assert node_overload(full) == pytest.approx(2.0)  # up to sqrt(M)


def test_node_overload_without_measurements_is_the_busy_gpu_share():
    assert node_overload(NodeView("n", (0, 1, 2, 3), (1, 2, 3))) == 0.25
    assert node_overload(NodeView("n", (0, 1), ())) == 1.0
    assert node_overload(NodeView("n", (), ())) == 0.0


def test_cluster_overload_is_the_mean_over_nodes():
    snap = ClusterSnapshot(
        now=0.0,
        nodes=(
            NodeView("a", (0, 1), (0, 1), {"gpu": 0.3, "cpu": 0.4}),  # 0.5
            NodeView("b", (0, 1), ()),  # 1.0 (no measurements, both GPUs busy)
        ),
        queued=(),
        active=(),
    )
    assert cluster_overload(snap) == pytest.approx(0.75)
    assert cluster_overload(ClusterSnapshot(0.0, (), (), ())) == 0.0


@pytest.mark.parametrize(
    ("utilisation", "has_queue", "overloaded"),
    [
        (0.5, False, False),
        (0.9, False, False),  # O_c must exceed h_s
        (0.91, False, True),
        (0.1, True, True),  # a non-empty queue is overload by itself
    ],
)
def test_is_overloaded(utilisation, has_queue, overloaded):
    snap = ClusterSnapshot(
        now=0.0,
        nodes=(NodeView("n", (0,), (0,), {"gpu": utilisation}),),
        queued=(queued(),) if has_queue else (),
        active=(),
    )
    assert is_overloaded(snap, CONFIG) is overloaded


def test_h_s_is_the_threshold():
    snap = ClusterSnapshot(0.0, (NodeView("n", (0,), (0,), {"gpu": 0.5}),), (), ())
    assert not is_overloaded(snap, CONFIG)
    assert is_overloaded(snap, MlfsConfig(h_s=0.4))


# --- effective options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "switch", "required", "overloaded", "expected"),
    [
        (ITER, False, None, False, {ITER}),
        (ITER, True, None, False, {ITER}),  # no overload: the user's choice
        (ITER, False, 0.8, True, {ITER}),  # not switchable
        (ITER, True, None, True, {ITER, OPT}),  # (i) -> (ii)
        (ITER, True, 0.8, True, {ITER, OPT, REQ}),  # (i) -> (ii) or (iii)
        (OPT, False, 0.8, True, {OPT}),
        (OPT, True, None, True, {OPT}),  # nothing to switch to without a requirement
        (OPT, True, 0.8, True, {OPT, REQ}),  # (ii) -> (iii)
        (REQ, True, 0.8, True, {REQ}),
        (REQ, False, 0.8, False, {REQ}),
    ],
)
def test_effective_options(option, switch, required, overloaded, expected):
    job = view(option=option, switch=switch, required=required)
    assert effective_options(job, overloaded) == expected


# --- option (iii): the required accuracy -----------------------------------------------------


def test_required_accuracy_reached_stops_the_job():
    job = view(option=REQ, required=0.8, history=((100, 0.5), (200, 0.81)))
    assert load_control(snapshot(job), CONFIG) == (
        Stop("a", "MLF-C: required accuracy 0.8 reached (0.81)"),
    )


def test_required_accuracy_not_yet_reached():
    job = view(option=REQ, required=0.8, history=((100, 0.5), (200, 0.79)))
    assert load_control(snapshot(job), CONFIG) == ()


def test_required_accuracy_uses_the_latest_report_then_the_history():
    reported = view(option=REQ, required=0.8, metrics={"accuracy": 0.85})
    assert load_control(snapshot(reported), CONFIG)  # no history needed for (iii)
    from_history = view(option=REQ, required=0.8, history=((1, 0.9),), metrics={"loss": 0.1})
    assert load_control(snapshot(from_history), CONFIG)
    nothing = view(option=REQ, required=0.8, metrics={"accuracy": float("nan")})
    assert load_control(snapshot(nothing), CONFIG) == ()


def test_required_value_of_a_minimised_target_metric():
    stopping = TargetMetricStop("loss", 0.05, MetricGoal.MINIMIZE, 20_000)
    job = view(option=REQ, required=0.3, stopping=stopping, metrics={"loss": 0.29})
    assert load_control(snapshot(job), CONFIG) == (
        Stop("a", "MLF-C: required loss 0.3 reached (0.29)"),
    )
    higher = view(option=REQ, required=0.3, stopping=stopping, metrics={"loss": 0.31})
    assert load_control(snapshot(higher), CONFIG) == ()


# --- option (ii): OptStop --------------------------------------------------------------------


def test_opt_stop_stops_a_job_at_its_plateau():
    (stop,) = load_control(snapshot(view(option=OPT, history=plateau())), CONFIG)
    assert stop.job_id == "a"
    assert stop.reason.startswith("MLF-C: OptStop: accuracy predicted best 0.9")
    assert ", now 0.8" in stop.reason


def test_opt_stop_lets_a_climbing_job_run():
    assert load_control(snapshot(view(option=OPT, history=climbing())), CONFIG) == ()


def test_opt_stop_needs_a_history():
    job = view(option=OPT, metrics={"accuracy": 0.9})
    assert load_control(snapshot(job), CONFIG) == ()


def test_opt_stop_stops_when_the_requirement_is_out_of_reach():
    climbing_to_80 = tuple((it, 0.8 - 0.3 * math.exp(-it / 1500)) for it in range(20, 3001, 20))
    assert load_control(snapshot(view(option=OPT, history=climbing_to_80)), CONFIG) == ()
    (stop,) = load_control(
        snapshot(view(option=OPT, required=0.95, history=climbing_to_80)), CONFIG
    )
    assert stop.reason.startswith("MLF-C: OptStop: accuracy required 0.95 out of reach")


def test_a_malformed_history_gives_no_verdict():
    job = view(option=OPT, history=((200, 0.5), (100, 0.6), (300, 0.7)) * 3)
    assert load_control(snapshot(job), CONFIG) == ()


# --- option (i) and switching ----------------------------------------------------------------


def test_option_i_never_stops():
    job = view(option=ITER, required=0.5, history=plateau())
    assert load_control(snapshot(job, queued=(queued(),)), CONFIG) == ()


def test_switchable_option_i_runs_on_without_overload():
    job = view(option=ITER, switch=True, history=plateau())
    assert load_control(snapshot(job), CONFIG) == ()  # 1 of 2 GPUs busy, nothing queued


def test_switchable_option_i_is_opt_stopped_under_overload():
    job = view(option=ITER, switch=True, history=plateau())
    for snap in (snapshot(job, queued=(queued(),)), snapshot(job, gpus=1)):  # queue; O_c = 1
        (stop,) = load_control(snap, CONFIG)
        assert stop.reason.startswith(
            "MLF-C: OptStop under overload (switched from (i) iterations): accuracy predicted "
            "best 0.9"
        )


def test_switchable_option_i_with_a_requirement_stops_at_the_first_option_to_fire():
    early = ((100, 0.5), (200, 0.7), (300, 0.82))  # too short for OptStop, requirement met
    job = view(option=ITER, switch=True, required=0.8, history=early)
    assert load_control(snapshot(job, queued=(queued(),)), CONFIG) == (
        Stop(
            "a",
            "MLF-C: required accuracy 0.8 reached (0.82) under overload (switched from "
            "(i) iterations)",
        ),
    )
    assert load_control(snapshot(job), CONFIG) == ()  # no overload: option (i) holds


def test_switchable_option_ii_stops_at_the_requirement_under_overload():
    job = view(option=OPT, switch=True, required=0.5, history=climbing())  # now at 0.54
    (stop,) = load_control(snapshot(job, queued=(queued(),)), CONFIG)
    assert stop.reason == (
        "MLF-C: required accuracy 0.5 reached (0.5417) under overload (switched from (ii) OptStop)"
    )
    assert load_control(snapshot(job), CONFIG) == ()  # without overload OptStop lets it climb


# --- the whole cycle -------------------------------------------------------------------------


def test_only_active_jobs_are_stopped_in_snapshot_order():
    done = view("b", option=REQ, required=0.5, history=plateau(), gpu=1)
    running = view("a", option=REQ, required=0.5, history=plateau())
    waiting = replace(
        view("q", option=REQ, required=0.5, history=plateau(), state=JobState.SUSPENDED),
        placement=(),
    )
    stops = load_control(snapshot(done, running, queued=(waiting,)), CONFIG)
    assert [s.job_id for s in stops] == ["b", "a"]


def test_load_control_is_pure():
    jobs = (
        view("a", option=OPT, history=plateau()),
        view("b", option=ITER, switch=True, history=plateau(), gpu=1),
    )
    snap = snapshot(*jobs, queued=(queued(),))
    first = load_control(snap, CONFIG)
    assert load_control(snap, CONFIG) == first
    assert [s.job_id for s in first] == ["a", "b"]
    assert snap == snapshot(*jobs, queued=(queued(),))


def test_stop_reason_of_a_job_left_alone_is_none():
    assert stop_reason(view(), overloaded=True) is None
