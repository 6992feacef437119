"""MLF-H priorities (MLFS §3.3.1, Eqs. 2-6) and MlfsConfig, checked against hand computations.

Defaults throughout: alpha 0.3, gamma 0.8, gamma_d = gamma_r = 0.3, gamma_w 0.35, time unit one
hour (3600 s), horizon floor 60 s.
"""

from __future__ import annotations

import pytest

from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.priority import (
    TaskFeatures,
    data_parallel_tasks,
    loss_ratio,
    own_computation_priority,
    own_ml_priority,
    queue_order,
    task_priorities,
)

HOUR = 3600.0


def test_model_parallel_job_with_two_children() -> None:
    # Job "mp": 3 partitions, task 0 feeds tasks 1 and 2. L = 2, I = 4, δl_3 = 0.5, Σδl = 2.0,
    # so 1/I = 0.25 and the loss ratio is 0.25. Partition shares 0.5, 0.25, 0.25.
    common = dict(urgency=2.0, iteration=4, last_loss_reduction=0.5, total_loss_reduction=2.0)
    tasks = [
        TaskFeatures(
            "mp",
            0,
            partition=0.5,
            deadline=2 * HOUR,
            remaining_s=HOUR,
            waiting_s=HOUR / 2,
            children=(1, 2),
            **common,
        ),
        TaskFeatures(
            "mp",
            1,
            partition=0.25,
            deadline=4 * HOUR,
            remaining_s=2 * HOUR,
            waiting_s=HOUR / 2,
            **common,
        ),
        TaskFeatures("mp", 2, partition=0.25, waiting_s=HOUR, **common),
    ]
    p = task_priorities(tasks, now=0.0)
    # Eq. 2: task 0: 2 * 0.25 * 0.25 * 0.5 = 0.0625; tasks 1, 2: 2 * 0.25 * 0.25 * 0.25 = 0.03125
    # Eq. 3: task 0: 0.0625 + 0.8 * (0.03125 + 0.03125) = 0.1125
    assert p["mp", 0].ml == pytest.approx(0.1125)
    assert p["mp", 1].ml == pytest.approx(0.03125)
    assert p["mp", 2].ml == pytest.approx(0.03125)
    # Eq. 4 (hours): task 0: 0.3 / 2 + 0.3 / 1 + 0.35 * 0.5 = 0.15 + 0.3 + 0.175 = 0.625
    #                task 1: 0.3 / 4 + 0.3 / 2 + 0.35 * 0.5 = 0.075 + 0.15 + 0.175 = 0.4
    #                task 2: no deadline, no estimate: 0.35 * 1 = 0.35
    # Eq. 5: task 0: 0.625 + 0.8 * (0.4 + 0.35) = 1.225
    assert p["mp", 0].computation == pytest.approx(1.225)
    assert p["mp", 1].computation == pytest.approx(0.4)
    assert p["mp", 2].computation == pytest.approx(0.35)
    # Eq. 6: task 0: 0.3 * 0.1125 + 0.7 * 1.225 = 0.03375 + 0.8575 = 0.89125
    #        task 1: 0.3 * 0.03125 + 0.7 * 0.4 = 0.009375 + 0.28 = 0.289375
    #        task 2: 0.009375 + 0.7 * 0.35 = 0.254375
    assert p["mp", 0].total == pytest.approx(0.89125)
    assert p["mp", 1].total == pytest.approx(0.289375)
    assert p["mp", 2].total == pytest.approx(0.254375)
    assert queue_order(p) == [("mp", 0), ("mp", 1), ("mp", 2)]


def test_children_count_recursively_discounted_by_depth() -> None:
    # Chain 0 -> 1 -> 2 with own P^ML = 1 * 1 * 1 * 0.5 = 0.5 each (I = 1) and P^C = 0.
    # Eq. 3 recursive: P(2) = 0.5; P(1) = 0.5 + 0.8 * 0.5 = 0.9; P(0) = 0.5 + 0.8 * 0.9 = 1.22
    # (the grandchild enters with 0.8^2 = 0.64). Eq. 6: 0.3 * P^ML.
    chain = [
        TaskFeatures("c", i, partition=0.5, children=(i + 1,) if i < 2 else ()) for i in range(3)
    ]
    p = task_priorities(chain, now=0.0)
    assert [p["c", i].ml for i in range(3)] == pytest.approx([1.22, 0.9, 0.5])
    assert [p["c", i].total for i in range(3)] == pytest.approx([0.366, 0.27, 0.15])
    assert all(p["c", i].computation == 0.0 for i in range(3))


def test_a_descendant_reached_by_two_paths_counts_once_per_path() -> None:
    # Diamond 0 -> {1, 2} -> 3, own P^ML x = 0.5: P(3) = 0.5, P(1) = P(2) = 0.9,
    # P(0) = 0.5 + 0.8 * (0.9 + 0.9) = 1.94.
    children = {0: (1, 2), 1: (3,), 2: (3,), 3: ()}
    tasks = [TaskFeatures("d", i, partition=0.5, children=c) for i, c in children.items()]
    p = task_priorities(reversed(tasks), now=0.0)
    assert p["d", 0].ml == pytest.approx(1.94)
    assert p["d", 3].ml == pytest.approx(0.5)


def test_data_parallel_job_is_one_partition_per_worker() -> None:
    # 4 workers, L = 1, I = 2, δl_1 = Σδl = 1: ratio 1, so P^ML = 1 * 0.5 * 1 * 0.25 = 0.125;
    # waited 2 h: P^C = 0.35 * 2 = 0.7; P = 0.3 * 0.125 + 0.7 * 0.7 = 0.0375 + 0.49 = 0.5275.
    template = TaskFeatures(
        "dp",
        0,
        iteration=2,
        last_loss_reduction=1.0,
        total_loss_reduction=1.0,
        waiting_s=2 * HOUR,
        children=(5,),
    )
    tasks = data_parallel_tasks(template, 4)
    assert [(t.task, t.partition, t.children) for t in tasks] == [(i, 0.25, ()) for i in range(4)]
    p = task_priorities(tasks, now=10.0)
    assert all(p["dp", i].total == pytest.approx(0.5275) for i in range(4))
    with pytest.raises(ValueError, match="workers"):
        data_parallel_tasks(template, 0)


def test_several_jobs_are_ordered_together() -> None:
    a = TaskFeatures("a", 0, urgency=1.0)  # P^ML = 1, P = 0.3
    b = TaskFeatures("b", 0, urgency=3.0)  # P^ML = 3, P = 0.9
    c = TaskFeatures("c", 0, urgency=1.0)  # ties with a: key order
    assert queue_order(task_priorities([c, a, b], now=0.0)) == [("b", 0), ("a", 0), ("c", 0)]


def test_first_iteration_has_loss_ratio_one() -> None:
    f = TaskFeatures("j", 0, urgency=2.0, partition=0.5)  # I = 1, no history
    assert loss_ratio(f) == 1.0
    assert own_ml_priority(f) == pytest.approx(1.0)  # 2 * 1 * 1 * 0.5


@pytest.mark.parametrize(
    ("last", "total", "ratio"),
    [
        (0.0, 0.0, 0.0),  # no loss reduction at all
        (0.1, -0.5, 0.0),  # loss rose overall
        (-0.2, 1.0, 0.0),  # the last iteration raised the loss
        (1.5, 1.0, 1.0),  # earlier iterations raised it: clamped
        (0.25, 1.0, 0.25),
    ],
)
def test_loss_ratio_edge_cases(last: float, total: float, ratio: float) -> None:
    f = TaskFeatures("j", 0, iteration=3, last_loss_reduction=last, total_loss_reduction=total)
    assert loss_ratio(f) == pytest.approx(ratio)
    assert own_ml_priority(f) == pytest.approx(ratio / 3)


def test_passed_deadline_and_zero_remaining_time_are_floored() -> None:
    config = MlfsConfig()
    # d - t = -100 s and r = 0 s both floor at 60 s = 1/60 h: 0.3 * 60 = 18 each.
    late = TaskFeatures("j", 0, deadline=900.0, remaining_s=0.0)
    assert own_computation_priority(late, now=1000.0, config=config) == pytest.approx(36.0)
    # A deadline 30 s away is floored too, so it ranks with the passed one, never above it.
    close = TaskFeatures("j", 0, deadline=1030.0)
    assert own_computation_priority(close, now=1000.0, config=config) == pytest.approx(18.0)
    assert own_computation_priority(TaskFeatures("j", 0), 0.0, config) == 0.0


def test_time_unit_is_configurable() -> None:
    # In minutes: 0.3 / 120 + 0.35 * 30 = 0.0025 + 10.5
    f = TaskFeatures("j", 0, deadline=2 * HOUR, waiting_s=HOUR / 2)
    config = MlfsConfig(time_unit_s=60.0)
    assert own_computation_priority(f, 0.0, config) == pytest.approx(10.5025)


def test_cycle_is_rejected_with_its_path() -> None:
    tasks = [
        TaskFeatures("j", 0, children=(1,)),
        TaskFeatures("j", 1, children=(2,)),
        TaskFeatures("j", 2, children=(0,)),
    ]
    with pytest.raises(ValueError, match=r"cycle in job 'j': 0 -> 1 -> 2 -> 0"):
        task_priorities(tasks, now=0.0)
    with pytest.raises(ValueError, match="cycle"):
        task_priorities([TaskFeatures("j", 0, children=(0,))], now=0.0)


def test_unknown_child_and_duplicate_task_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown child 7"):
        task_priorities([TaskFeatures("j", 0, children=(7,))], now=0.0)
    with pytest.raises(ValueError, match="given twice"):
        task_priorities([TaskFeatures("j", 0), TaskFeatures("j", 0)], now=0.0)
    # Children are indices within the job: job k's task 1 is not job j's.
    with pytest.raises(ValueError, match="unknown child 1"):
        task_priorities([TaskFeatures("j", 0, children=(1,)), TaskFeatures("k", 1)], now=0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("iteration", 0, "iteration"),
        ("urgency", -1.0, "urgency"),
        ("partition", 0.0, "partition"),
        ("partition", 1.5, "partition"),
        ("waiting_s", -1.0, "waiting_s"),
        ("remaining_s", -1.0, "remaining_s"),
        ("deadline", float("nan"), "deadline"),
        ("last_loss_reduction", float("inf"), "loss"),
        ("children", (1, 1), "duplicate"),
    ],
)
def test_invalid_features_are_rejected(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TaskFeatures("j", 0, **{field: value})  # type: ignore[arg-type]


def test_deep_pipeline_and_many_jobs() -> None:
    # A 5,000-stage pipeline needs no recursion; every stage sums a geometric series.
    pipeline = [TaskFeatures("p", i, children=(i + 1,)) for i in range(4999)]
    pipeline.append(TaskFeatures("p", 4999))
    # Plus 1,000 queued tasks of 250 four-partition jobs (0 -> 1 -> 3, 0 -> 2 -> 3).
    edges = {0: (1, 2), 1: (3,), 2: (3,), 3: ()}
    queued = [
        TaskFeatures(f"j{j}", i, urgency=j % 5, partition=0.25, children=c, waiting_s=j)
        for j in range(250)
        for i, c in edges.items()
    ]
    p = task_priorities(queued, now=0.0)  # its speed: benchmarks/bench_mlfh.py
    assert len(p) == 1000
    deep = task_priorities(pipeline, now=0.0)
    # Own P^ML = 1 for each stage: the head has sum of 0.8^h for h < 5000, i.e. about 5.
    assert deep["p", 0].ml == pytest.approx(5.0)


def test_config_defaults_are_the_papers() -> None:
    c = MlfsConfig()
    assert (c.alpha, c.gamma, c.gamma_d, c.gamma_r, c.gamma_w) == (0.3, 0.8, 0.3, 0.3, 0.35)
    assert (c.h_r, c.h_s, c.p_s) == (0.9, 0.9, 0.1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("alpha", -0.1),
        ("alpha", 1.1),
        ("gamma", 0.0),
        ("gamma", 1.0),
        ("gamma_d", -0.3),
        ("gamma_w", float("nan")),
        ("h_r", 0.0),
        ("h_r", 1.2),
        ("h_s", 0.0),
        ("p_s", 0.0),
        ("p_s", 1.5),
        ("time_unit_s", 0.0),
        ("min_horizon_s", -1.0),
        ("alpha", "0.3"),
        ("p_s", True),
    ],
)
def test_config_rejects_out_of_range_values(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"MlfsConfig.{field} must be"):
        MlfsConfig(**{field: value})  # type: ignore[arg-type]


def test_config_accepts_the_edges_of_its_ranges() -> None:
    MlfsConfig(alpha=0.0, gamma_d=0.0, h_r=1.0, p_s=1.0, h_s=1.8)
    MlfsConfig(alpha=1.0)
