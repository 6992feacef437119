"""Protobuf <-> domain conversions: round trips, defaults and wire errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsched import serde
from mlsched.model import (
    Deadline,
    Event,
    GpuInfo,
    GpuMetrics,
    IterationStop,
    Job,
    JobClass,
    JobEstimate,
    JobSpec,
    JobState,
    MetricGoal,
    MlfsSpec,
    Node,
    NodeMetrics,
    Progress,
    ResumeRecord,
    SpeedSample,
    StopOption,
    TargetMetricStop,
    Task,
    TaskMetrics,
    TaskState,
)
from mlsched.serde import WireError
from mlsched.v1 import common_pb2 as pb

# --- enums -----------------------------------------------------------------------------------

JOB_STATE_NUMBERS = {
    JobState.PENDING: 1,
    JobState.STARTING: 2,
    JobState.RUNNING: 3,
    JobState.SUSPENDING: 4,
    JobState.SUSPENDED: 5,
    JobState.COMPLETED: 6,
    JobState.FAILED: 7,
    JobState.CANCELLING: 8,
    JobState.CANCELLED: 9,
}
TASK_STATE_NUMBERS = {
    TaskState.LAUNCHING: 1,
    TaskState.RUNNING: 2,
    TaskState.SUSPENDING: 3,
    TaskState.SUSPENDED: 4,
    TaskState.COMPLETED: 5,
    TaskState.FAILED: 6,
    TaskState.KILLED: 7,
    TaskState.LOST: 8,
}


@pytest.mark.parametrize(("state", "number"), JOB_STATE_NUMBERS.items())
def test_job_state_numbers(state, number):
    assert serde.job_state_to_proto(state) == number
    assert serde.job_state_from_proto(number) is state


@pytest.mark.parametrize(("state", "number"), TASK_STATE_NUMBERS.items())
def test_task_state_numbers(state, number):
    assert serde.task_state_to_proto(state) == number
    assert serde.task_state_from_proto(number) is state


def test_every_state_has_a_number():
    assert set(JOB_STATE_NUMBERS) == set(JobState)
    assert set(TASK_STATE_NUMBERS) == set(TaskState)


@pytest.mark.parametrize("number", [0, 10, 99, -1])
def test_unknown_job_state_is_a_wire_error(number):
    with pytest.raises(WireError, match=f"unknown job state {number}"):
        serde.job_state_from_proto(number)


@pytest.mark.parametrize("number", [0, 9, 42])
def test_unknown_task_state_is_a_wire_error(number):
    with pytest.raises(WireError, match=f"unknown task state {number}"):
        serde.task_state_from_proto(number)


def test_wire_error_is_a_value_error():
    assert issubclass(WireError, ValueError)


# --- job specs -------------------------------------------------------------------------------


def soft_spec() -> JobSpec:
    return JobSpec(
        name="resnet",
        command=("torchrun", "train.py", "--lr", "0.1"),
        gpus=4,
        stopping=TargetMetricStop("loss", 0.25, MetricGoal.MINIMIZE, 800),
        job_class=JobClass.SOFT_SLO,
        deadlines=(Deadline(600.0, 100.0), Deadline(1200.5, 25.0)),
        gpus_per_process=2,
        working_dir="/srv/resnet",
        env=(("A", "1"), ("NCCL_DEBUG", "INFO")),
        max_retries=3,
        batch_size=512,
    )


@pytest.mark.parametrize(
    "spec",
    [
        soft_spec(),
        JobSpec("mlp", ("python", "mlp.py"), 1, IterationStop(3000)),
        JobSpec(
            "slo",
            ("run",),
            2,
            TargetMetricStop("accuracy", 0.9, MetricGoal.MAXIMIZE, 10),
            JobClass.STRICT_SLO,
            (Deadline(1800.0, 100.0),),
        ),
    ],
    ids=["soft", "best-effort", "strict"],
)
def test_spec_round_trip(spec):
    assert serde.spec_from_proto(serde.spec_to_proto(spec)) == spec


def test_spec_to_proto_fields():
    msg = serde.spec_to_proto(soft_spec())
    assert msg.name == "resnet"
    assert list(msg.command) == ["torchrun", "train.py", "--lr", "0.1"]
    assert dict(msg.env) == {"A": "1", "NCCL_DEBUG": "INFO"}
    assert (msg.gpus, msg.gpus_per_process, msg.max_retries, msg.batch_size) == (4, 2, 3, 512)
    assert msg.job_class == pb.JOB_CLASS_SOFT_SLO == 3
    assert [(d.seconds_after_submit, d.reward) for d in msg.deadlines] == [
        (600.0, 100.0),
        (1200.5, 25.0),
    ]
    assert msg.stopping.WhichOneof("criterion") == "target_metric"
    assert msg.stopping.target_metric.goal == pb.METRIC_GOAL_MINIMIZE
    assert msg.stopping.target_metric.max_iterations == 800


def test_iteration_stop_on_the_wire():
    msg = serde.stopping_to_proto(IterationStop(123))
    assert msg.WhichOneof("criterion") == "iterations"
    assert msg.iterations.iterations == 123


def test_spec_env_comes_back_sorted():
    spec = replace(soft_spec(), env=(("Z", "1"), ("B", "2")))
    assert serde.spec_from_proto(serde.spec_to_proto(spec)).env == (("B", "2"), ("Z", "1"))


def test_spec_wire_defaults():
    msg = pb.JobSpec(
        name="x",
        command=["run"],
        gpus=2,
        stopping=pb.StoppingCriterion(iterations=pb.IterationCriterion(iterations=5)),
    )
    spec = serde.spec_from_proto(msg)
    # An old client leaves gpus_per_process and job_class at 0: one process per GPU,
    # best effort.
    assert spec == JobSpec("x", ("run",), 2, IterationStop(5))
    assert spec.gpus_per_process == 1
    assert spec.job_class is JobClass.BEST_EFFORT


# --- MLFS fields ----------------------------------------------------------------------------

MLFS = MlfsSpec(
    urgency=8.0,
    partitions=(0.5, 0.25, 0.25),
    dependencies=((0, 1), (0, 2)),
    stop_option=StopOption.OPT_STOP,
    system_may_switch=True,
    required_accuracy=0.85,
)


@pytest.mark.parametrize(
    "mlfs",
    [
        MLFS,
        MlfsSpec(),
        MlfsSpec(stop_option=StopOption.REQUIRED, required_accuracy=0.0),
        MlfsSpec(urgency=10.0, system_may_switch=True),
    ],
    ids=["every-field", "defaults", "required-zero", "switch-only"],
)
def test_mlfs_round_trip(mlfs):
    spec = replace(soft_spec(), mlfs=mlfs)
    assert serde.spec_from_proto(serde.spec_to_proto(spec)) == spec
    assert serde.mlfs_from_proto(serde.mlfs_to_proto(mlfs)) == mlfs


def test_mlfs_on_the_wire():
    msg = serde.spec_to_proto(replace(soft_spec(), mlfs=MLFS)).mlfs
    assert msg.urgency == 8.0
    assert list(msg.partitions) == [0.5, 0.25, 0.25]
    assert [(d.parent, d.child) for d in msg.dependencies] == [(0, 1), (0, 2)]
    assert msg.stop_option == pb.STOP_OPTION_OPT_STOP == 2
    assert msg.system_may_switch is True
    assert msg.HasField("required_accuracy") and msg.required_accuracy == 0.85
    assert pb.STOP_OPTION_ITERATIONS == 1 and pb.STOP_OPTION_REQUIRED_ACCURACY == 3


def test_default_mlfs_is_left_off_the_wire():
    msg = serde.spec_to_proto(soft_spec())
    assert not msg.HasField("mlfs")
    assert not serde.mlfs_to_proto(MlfsSpec()).HasField("required_accuracy")


def test_mlfs_wire_zeros_are_the_defaults():
    # An old client sends no mlfs; a new one may leave every field at its zero value.
    assert serde.spec_from_proto(serde.spec_to_proto(soft_spec())).mlfs == MlfsSpec()
    assert serde.mlfs_from_proto(pb.MlfsSpec()) == MlfsSpec()
    assert serde.mlfs_from_proto(pb.MlfsSpec()).urgency == 1.0
    unspecified = pb.MlfsSpec(stop_option=pb.STOP_OPTION_UNSPECIFIED)
    assert serde.mlfs_from_proto(unspecified).stop_option is StopOption.ITERATIONS


def test_unknown_stop_option_is_a_wire_error():
    with pytest.raises(WireError, match=r"mlfs\.stop_option: unknown value 9"):
        serde.mlfs_from_proto(pb.MlfsSpec(stop_option=9))


def test_job_round_trip_keeps_the_mlfs_spec():
    job = Job("j-1", "alice", replace(soft_spec(), mlfs=MLFS), JobState.PENDING, 1.0, 1.0)
    back, _ = serde.job_from_proto(serde.job_to_proto(job, []))
    assert back.spec.mlfs == MLFS


def test_spec_without_stopping_is_a_wire_error():
    msg = pb.JobSpec(name="x", command=["run"], gpus=1)
    with pytest.raises(WireError, match="stopping criterion is required"):
        serde.spec_from_proto(msg)


def test_target_metric_without_goal_is_a_wire_error():
    msg = pb.StoppingCriterion(
        target_metric=pb.TargetMetricCriterion(metric="acc", target=0.5, max_iterations=3)
    )
    with pytest.raises(WireError, match="goal must be MAXIMIZE or MINIMIZE"):
        serde.stopping_from_proto(msg)


def test_target_metric_with_unknown_goal_is_a_wire_error():
    msg = pb.StoppingCriterion(
        target_metric=pb.TargetMetricCriterion(metric="acc", target=0.5, goal=7, max_iterations=3)
    )
    with pytest.raises(WireError):
        serde.stopping_from_proto(msg)


def test_job_with_unknown_state_is_a_wire_error():
    msg = serde.job_to_proto(job_with_everything(), [])
    msg.state = 42
    with pytest.raises(WireError, match="unknown job state 42"):
        serde.job_from_proto(msg)


def test_job_with_a_task_in_an_unknown_state_is_a_wire_error():
    msg = serde.job_to_proto(job_with_everything(), tasks())
    msg.tasks[1].state = 0
    with pytest.raises(WireError, match="unknown task state 0"):
        serde.job_from_proto(msg)


# --- jobs ------------------------------------------------------------------------------------


def job_with_everything() -> Job:
    return Job(
        id="j-1234abcd",
        user="carol",
        spec=soft_spec(),
        state=JobState.RUNNING,
        submit_time=1000.5,
        queued_since=1300.0,
        first_start_time=1001.25,
        end_time=None,
        attempt=3,
        suspensions=2,
        failures=1,
        node_history=["n1", "n2"],
        metrics={"accuracy": 0.75, "loss": 0.5},
        iteration=4200,
        checkpoint_step=4000,
        restored_step=3000,
        lease_expires_at=1400.0,
        master_port=29555,
        attempt_started_at=1301.0,
        message="resuming attempt 3 on n2:[0, 1]",
        resumes=[
            ResumeRecord(1100.0, 0, ("n1",), 1105.0, 0, ("n2",)),
            ResumeRecord(1200.0, 3000, ("n2",), 1301.0, 3000, ("n1", "n2")),
            ResumeRecord(1350.0, 4000, ("n1", "n2")),
        ],
        speed_samples=[SpeedSample(1, 1, 0.25, 0.25, 12), SpeedSample(4, 2, 0.125, 0.0625, 30)],
        metric_history=[(1000, 0.5), (4000, 0.75)],
        sr_overheads_s=[8.5, 11.0],
        estimate=JobEstimate("slo", 6000, 0.125, 250.5, 100.0, "cells 0/0/2/0", 1300.0),
    )


def tasks() -> list[Task]:
    return [
        Task("j-1234abcd", 0, 3, "n1", (0, 1), TaskState.RUNNING, None, "", 4000, 3000),
        Task("j-1234abcd", 1, 3, "n2", (2, 3), TaskState.FAILED, 139, "segfault", 3900, 3000),
    ]


def test_job_round_trip_keeps_what_the_wire_carries():
    job = job_with_everything()
    decoded, decoded_tasks = serde.job_from_proto(serde.job_to_proto(job, tasks()))
    # Not on the wire: queue time (the client sees the submit time), port, attempt start,
    # the metric history (the estimator's input, up to 256 points).
    assert decoded == replace(
        job, queued_since=1000.5, master_port=0, attempt_started_at=None, metric_history=[]
    )
    assert decoded.estimate == job.estimate
    assert decoded.speed_samples == job.speed_samples
    assert decoded.sr_overheads_s == [8.5, 11.0]
    assert decoded.resumes[1].to_nodes == ("n1", "n2")
    # Tasks lose their per-attempt steps; an unknown exit code reads as 0.
    assert decoded_tasks == [
        Task("j-1234abcd", 0, 3, "n1", (0, 1), TaskState.RUNNING, 0, "", 0, None),
        Task("j-1234abcd", 1, 3, "n2", (2, 3), TaskState.FAILED, 139, "segfault", 0, None),
    ]


def test_job_unset_optional_fields_are_zero_on_the_wire_and_none_back():
    job = replace(
        job_with_everything(),
        state=JobState.PENDING,
        first_start_time=None,
        lease_expires_at=None,
        resumes=[ResumeRecord(1100.0, 50, ("n1",))],
        speed_samples=[],
        sr_overheads_s=[],
        estimate=None,
    )
    msg = serde.job_to_proto(job, [])
    assert not msg.HasField("estimate")
    assert (list(msg.speed_samples), list(msg.sr_overheads_s)) == ([], [])
    assert (msg.first_start_time, msg.end_time, msg.lease_expires_at) == (0.0, 0.0, 0.0)
    assert (msg.resumptions[0].resumed_at, msg.resumptions[0].restored_step) == (0.0, -1)
    decoded, decoded_tasks = serde.job_from_proto(msg)
    assert decoded.first_start_time is None
    assert decoded.end_time is None
    assert decoded.lease_expires_at is None
    assert decoded.resumes == [ResumeRecord(1100.0, 50, ("n1",), None, None, ())]
    assert (decoded.estimate, decoded.speed_samples, decoded.sr_overheads_s) == (None, [], [])
    assert decoded_tasks == []


def test_estimate_and_speed_samples_on_the_wire():
    msg = serde.job_to_proto(job_with_everything(), [])
    e = msg.estimate
    assert (e.phase, e.iterations, e.iteration_time_s, e.remaining_s) == ("slo", 6000, 0.125, 250.5)
    assert (e.reward, e.allocation, e.time) == (100.0, "cells 0/0/2/0", 1300.0)
    assert [
        (x.gpus, x.nodes, x.iteration_time_s, x.compute_time_s, x.count) for x in msg.speed_samples
    ] == [(1, 1, 0.25, 0.25, 12), (4, 2, 0.125, 0.0625, 30)]
    assert list(msg.sr_overheads_s) == [8.5, 11.0]
    estimate = JobEstimate("profiling", 0, 0.0, 300.0, 1.0)
    assert serde.estimate_from_proto(serde.estimate_to_proto(estimate)) == estimate
    sample = SpeedSample(2, 1, 0.5)
    assert serde.speed_sample_from_proto(serde.speed_sample_to_proto(sample)) == sample


def test_job_to_proto_fields():
    job = replace(job_with_everything(), state=JobState.COMPLETED, end_time=2000.0)
    msg = serde.job_to_proto(job, tasks())
    assert msg.state == pb.JOB_STATE_COMPLETED
    assert msg.end_time == 2000.0
    assert list(msg.node_history) == ["n1", "n2"]
    assert dict(msg.metrics) == {"accuracy": 0.75, "loss": 0.5}
    assert [(t.rank, t.exit_code, list(t.gpu_indices)) for t in msg.tasks] == [
        (0, 0, [0, 1]),
        (1, 139, [2, 3]),
    ]
    assert msg.tasks[1].state == pb.TASK_STATE_FAILED
    assert msg.failures == 1


# --- nodes, metrics, progress, events ---------------------------------------------------------


def node_metrics() -> NodeMetrics:
    return NodeMetrics(
        time=5000.0,
        cpu_percent=37.5,
        memory_used_bytes=3 << 30,
        memory_total_bytes=64 << 30,
        net_rx_bytes_per_s=1024.0,
        net_tx_bytes_per_s=2048.0,
        gpus=(GpuMetrics(0, 99.0, 1 << 30, 80 << 30, False), GpuMetrics(1, 0.0, 0, 0, True)),
    )


def a_node(metrics: NodeMetrics | None) -> Node:
    return Node(
        id="n1",
        address="10.0.0.7",
        hostname="gpu7",
        gpus=(GpuInfo(0, "NVIDIA H100", False, 80 << 30), GpuInfo(1, "virtual", True, 0)),
        cpu_count=96,
        memory_total_bytes=1 << 40,
        alive=True,
        last_seen=4999.5,
        metrics=metrics,
    )


def test_node_round_trip_with_metrics_and_busy_gpus():
    node = a_node(node_metrics())
    msg = serde.node_to_proto(node, [1])
    assert msg.HasField("metrics")
    assert serde.node_from_proto(msg) == (node, [1])


def test_node_round_trip_without_metrics():
    node = a_node(None)
    msg = serde.node_to_proto(node, [])
    assert not msg.HasField("metrics")
    assert serde.node_from_proto(msg) == (node, [])


def test_gpu_info_and_node_metrics_round_trip():
    gpu = GpuInfo(3, "A100", False, 40 << 30)
    assert serde.gpu_info_from_proto(serde.gpu_info_to_proto(gpu)) == gpu
    assert serde.node_metrics_from_proto(serde.node_metrics_to_proto(node_metrics())) == (
        node_metrics()
    )


def test_task_metrics_from_proto():
    msg = pb.TaskMetrics(
        job_id="j-1",
        rank=2,
        attempt=3,
        cpu_percent=150.0,
        memory_rss_bytes=1 << 30,
        gpu_memory_bytes=2 << 30,
        net_bytes_per_s=10.0,
    )
    assert serde.task_metrics_from_proto(msg) == TaskMetrics(
        "j-1", 2, 3, 150.0, 1 << 30, 2 << 30, 10.0
    )


def test_progress_from_proto():
    msg = pb.Progress(
        iteration=1200,
        loss=0.125,
        metrics={"accuracy": 0.875, "top5": 0.99},
        iteration_time_s=0.05,
        batch_size=256,
        time=7000.5,
        compute_time_s=0.03125,
    )
    assert serde.progress_from_proto(msg) == Progress(
        1200, 0.125, {"accuracy": 0.875, "top5": 0.99}, 0.05, 256, 7000.5, 0.03125
    )


def test_progress_from_an_empty_message():
    assert serde.progress_from_proto(pb.Progress()) == Progress(0, 0.0, {}, 0.0, 0, 0.0)


@pytest.mark.parametrize(
    "event",
    [
        Event(7, 123.5, "job_state", "PENDING -> STARTING", "j-1", ""),
        Event(8, 124.0, "node_dead", "no heartbeat for 31 s", "", "n1"),
        Event(9, 125.0, "task_ended", "rank 0 on n1: LOST", "j-1", "n1"),
    ],
)
def test_event_round_trip(event):
    msg = serde.event_to_proto(event)
    assert (msg.seq, msg.job_id, msg.node_id) == (event.seq, event.job_id, event.node_id)
    assert serde.event_from_proto(msg) == event
