"""Rendering for the CLI: dictionaries for --json, aligned tables and descriptions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mlsched import render
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
    ResumeRecord,
    SpeedSample,
    StopOption,
    TargetMetricStop,
    Task,
    TaskState,
)


def make_job(job_id: str = "j-1", **changes) -> Job:
    spec = JobSpec("mlp", ("python", "mlp.py"), 2, IterationStop(100))
    job = Job(job_id, "alice", spec, JobState.PENDING, submit_time=1000.0, queued_since=1000.0)
    return replace(job, **changes)


# --- jct -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("submit", "end", "expected"),
    [
        (1000.0, None, None),
        (1000.0, 1000.0, 0.0),
        (100.25, 1000.5, 900.25),
        (10.0, 72.3456, 62.346),
        (0.0001, 1.00049, 1.0),
    ],
)
def test_jct_is_submission_to_end_rounded_to_milliseconds(submit, end, expected):
    job = make_job(submit_time=submit, end_time=end)
    assert render.jct_s(job) == expected
    assert render.job_dict(job)["jct_s"] == expected


# --- dictionaries ----------------------------------------------------------------------------


def test_job_dict_has_every_field():
    spec = JobSpec(
        "slo-job",
        ("torchrun", "t.py"),
        4,
        TargetMetricStop("accuracy", 0.9, MetricGoal.MAXIMIZE, 500),
        JobClass.SOFT_SLO,
        (Deadline(600.0, 100.0), Deadline(900.0, 40.0)),
        gpus_per_process=2,
    )
    job = Job(
        id="j-9",
        user="bob",
        spec=spec,
        state=JobState.COMPLETED,
        submit_time=100.0,
        queued_since=150.0,
        first_start_time=110.0,
        end_time=460.5,
        attempt=2,
        suspensions=1,
        failures=0,
        node_history=["n1", "n2"],
        metrics={"accuracy": 0.91},
        iteration=480,
        checkpoint_step=400,
        restored_step=200,
        lease_expires_at=None,
        message="reached its stopping criterion",
        resumes=[ResumeRecord(150.0, 200, ("n1",), 151.0, 200, ("n2",))],
        speed_samples=[SpeedSample(2, 1, 0.25, 0.125, 10), SpeedSample(4, 1, 0.1875, 0.0, 3)],
        metric_history=[(100, 0.5), (480, 0.91)],
        sr_overheads_s=[3.0, 5.0],
        estimate=JobEstimate("slo", 500, 0.1875, 3.75, 100.0, "cells 0/0/1/0", 455.0),
    )
    tasks = [
        Task("j-9", 0, 2, "n2", (0, 1), TaskState.COMPLETED, 0, "done"),
        Task("j-9", 1, 2, "n2", (2, 3), TaskState.COMPLETED, None, ""),
    ]
    assert render.job_dict(job, tasks) == {
        "id": "j-9",
        "name": "slo-job",
        "user": "bob",
        "state": "COMPLETED",
        "class": "soft-slo",
        "gpus": 4,
        "command": ["torchrun", "t.py"],
        "stop": {"metric": "accuracy", "target": 0.9, "goal": "max", "max_iterations": 500},
        "mlfs": {
            "urgency": 1.0,
            "partitions": [],
            "dependencies": [],
            "stop_option": "iterations",
            "system_may_switch": False,
            "required_accuracy": None,
        },
        "deadlines": [{"after_s": 600.0, "reward": 100.0}, {"after_s": 900.0, "reward": 40.0}],
        "submit_time": 100.0,
        "first_start_time": 110.0,
        "end_time": 460.5,
        "jct_s": 360.5,
        "attempts": 2,
        "suspensions": 1,
        "failures": 0,
        "nodes": ["n1", "n2"],
        "iteration": 480,
        "metrics": {"accuracy": 0.91},
        "checkpoint_step": 400,
        "restored_step": 200,
        "lease_expires_at": None,
        "message": "reached its stopping criterion",
        "stop_reason": None,  # rank 0's message quotes no trainer reason
        "resumptions": [
            {
                "suspended_at": 150.0,
                "checkpoint_step": 200,
                "from_nodes": ["n1"],
                "resumed_at": 151.0,
                "restored_step": 200,
                "to_nodes": ["n2"],
            }
        ],
        "estimate": {
            "phase": "slo",
            "iterations": 500,
            "iteration_time_s": 0.1875,
            "remaining_s": 3.75,
            "reward": 100.0,
            "allocation": "cells 0/0/1/0",
            "time": 455.0,
        },
        "speed_samples": [
            {
                "gpus": 2,
                "nodes": 1,
                "iteration_time_s": 0.25,
                "compute_time_s": 0.125,
                "count": 10,
            },
            {"gpus": 4, "nodes": 1, "iteration_time_s": 0.1875, "compute_time_s": 0.0, "count": 3},
        ],
        "sr_overheads_s": [3.0, 5.0],
        "sr_overhead_mean_s": 4.0,
        "tasks": [
            {
                "rank": 0,
                "node": "n2",
                "gpus": [0, 1],
                "state": "COMPLETED",
                "attempt": 2,
                "exit_code": 0,
                "message": "done",
            },
            {
                "rank": 1,
                "node": "n2",
                "gpus": [2, 3],
                "state": "COMPLETED",
                "attempt": 2,
                "exit_code": None,
                "message": "",
            },
        ],
    }


def test_job_dict_copies_mutable_fields():
    job = make_job(metrics={"loss": 1.0}, node_history=["n1"])
    d = render.job_dict(job)
    d["metrics"]["loss"] = 5.0
    d["nodes"].append("x")
    assert job.metrics == {"loss": 1.0} and job.node_history == ["n1"]
    assert d["tasks"] == [] and d["resumptions"] == []
    assert (d["estimate"], d["speed_samples"], d["sr_overheads_s"]) == (None, [], [])
    assert d["sr_overhead_mean_s"] is None


def test_node_dict():
    metrics = NodeMetrics(
        1.0, 12.5, 2 << 30, 8 << 30, 3.0, 4.0, (GpuMetrics(1, 70.0, 5, 10, True),)
    )
    node = Node(
        "n1",
        "10.0.0.1",
        "h1",
        (GpuInfo(0, "virtual", True), GpuInfo(1, "virtual", True)),
        8,
        16 << 30,
        True,
        99.0,
        metrics,
    )
    assert render.node_dict(node, [1]) == {
        "id": "n1",
        "address": "10.0.0.1",
        "hostname": "h1",
        "alive": True,
        "last_seen": 99.0,
        "gpus": [
            {
                "index": 0,
                "name": "virtual",
                "virtual": True,
                "memory_total_bytes": 0,
                "busy": False,
            },
            {"index": 1, "name": "virtual", "virtual": True, "memory_total_bytes": 0, "busy": True},
        ],
        "cpu_count": 8,
        "memory_total_bytes": 16 << 30,
        "metrics": {
            "cpu_percent": 12.5,
            "memory_used_bytes": 2 << 30,
            "net_rx_bytes_per_s": 3.0,
            "net_tx_bytes_per_s": 4.0,
            "gpus": [
                {"index": 1, "utilization_percent": 70.0, "memory_used_bytes": 5, "virtual": True}
            ],
        },
    }
    assert render.node_dict(replace(node, metrics=None), [])["metrics"] is None


def test_event_dict():
    event = Event(5, 12.5, "job_state", "PENDING -> STARTING", "j-1", "n1")
    assert render.event_dict(event) == {
        "seq": 5,
        "time": 12.5,
        "kind": "job_state",
        "job": "j-1",
        "node": "n1",
        "message": "PENDING -> STARTING",
    }


# --- tables ----------------------------------------------------------------------------------


def test_table_pads_columns_to_the_widest_cell_and_strips_line_ends():
    text = render.table(["ID", "NAME", "N"], [["j-1", "a", 1], ["j-22", None, 333]])
    assert text.split("\n") == [
        "ID    NAME  N",
        "j-1   a     1",
        "j-22        333",
    ]


def test_table_without_rows_is_the_header():
    assert render.table(["A", "BB"], []) == "A  BB"


def test_table_rejects_rows_of_the_wrong_length():
    with pytest.raises(ValueError):
        render.table(["A", "B"], [["1", "2", "3"]])


def test_jobs_table():
    running = make_job(
        "j-aaaa",
        state=JobState.RUNNING,
        iteration=150,
        metrics={"accuracy": 0.81234},
        suspensions=1,
    )
    running_tasks = [
        Task("j-aaaa", 0, 2, "n2", (0,), TaskState.RUNNING),
        Task("j-aaaa", 1, 2, "n1", (0,), TaskState.SUSPENDING),
    ]
    done = make_job(
        "j-bb",
        user="bob",
        spec=JobSpec("resnet-50", ("r",), 4, IterationStop(1)),
        state=JobState.COMPLETED,
        end_time=1062.4,
    )
    done_tasks = [Task("j-bb", 0, 1, "n1", (0,), TaskState.COMPLETED)]
    text = render.jobs_table([(running, running_tasks), (done, done_tasks)], now=1100.0)
    assert text.split("\n") == [
        "ID      NAME       USER   STATE      GPUS  NODES  ITER  ACC    SUSP  AGE",
        "j-aaaa  mlp        alice  RUNNING    2     n1,n2  150   0.812  1     1m40s",
        "j-bb    resnet-50  bob    COMPLETED  4     -      0            0     1m40s",
    ]


def test_jobs_table_columns_line_up():
    jobs = [
        (make_job("j-" + "x" * n, spec=JobSpec("n" * (5 - n), ("r",), n + 1, IterationStop(1))), [])
        for n in range(1, 5)
    ]
    lines = render.jobs_table(jobs, now=1000.0).split("\n")
    name_column = lines[0].index("NAME")
    assert all(line[name_column - 2 : name_column] == "  " for line in lines)
    assert {line.index("PENDING") for line in lines[1:]} == {lines[0].index("STATE")}


def test_nodes_table():
    used = (GpuMetrics(0, 80.0, 1 << 30, 80 << 30, False), GpuMetrics(1, 40.0, 0, 80 << 30, False))
    metrics = NodeMetrics(1.0, 37.4, 16 << 30, 64 << 30, 0.0, 0.0, used)
    alive = Node(
        "n1",
        "10.0.0.1",
        "h1",
        (GpuInfo(0, "H100", False), GpuInfo(1, "H100", False)),
        8,
        1,
        True,
        0.0,
        metrics,
    )
    dead = Node(
        "n2",
        "10.0.0.22",
        "h2",
        tuple(GpuInfo(i, "virtual", True) for i in range(4)),
        8,
        1,
        False,
        0.0,
        None,
    )
    assert render.nodes_table([(alive, [0]), (dead, [])]).split("\n") == [
        "NODE  ADDRESS    STATE  GPUS BUSY    GPU MODEL  GPU USE  CPU  MEM",
        "n1    10.0.0.1   alive  1/2 real     H100       60%      37%  25%",
        "n2    10.0.0.22  dead   0/4 virtual  virtual",
    ]


def test_nodes_table_without_gpus_or_memory_total():
    metrics = NodeMetrics(1.0, 5.0, 0, 0, 0.0, 0.0)
    node = Node("cpu", "a", "h", (), 1, 1, True, 0.0, metrics)
    # GPU MODEL and GPU USE are empty: 9 + 2 and 7 + 2 columns between GPUS BUSY and CPU.
    row = render.nodes_table([(node, [])]).split("\n")[1]
    assert row == "cpu   a        alive  0/0 real" + " " * (1 + 2 + 9 + 2 + 7 + 2) + "5%"


def test_nodes_table_counts_mixed_gpu_models():
    gpus = (GpuInfo(0, "A100", False), GpuInfo(1, "H100", False), GpuInfo(2, "H100", False))
    node = Node("mix", "a", "h", gpus, 8, 1, True, 0.0, None)
    assert "1xA100,2xH100" in render.nodes_table([(node, [])]).split("\n")[1]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(-3, "0s"), (59.9, "59s"), (60, "1m00s"), (3599, "59m59s"), (3600, "1h00m"),
     (86399, "23h59m"), (86400 + 5 * 3600 + 59, "1d05h")],
)  # fmt: skip
def test_ages_are_short_and_human(seconds, shown):
    assert render.age(seconds) == shown


def test_describe_shows_times_durations_and_lists_as_people_read_them():
    job = make_job(
        state=JobState.COMPLETED,
        end_time=1000.0 + 3725.0,
        metrics={"loss": 0.25, "accuracy": 0.9125},
        node_history=["n1", "n2"],
        spec=JobSpec(
            "mlp", ("python", "train.py", "--name", "a b"), 1, IterationStop(10),
            deadlines=(Deadline(7200.0, 100.0), Deadline(10800.0, 50.0)),
        ),
    )  # fmt: skip
    lines = render.describe(job, []).split("\n")
    assert "submit_time: 1970-01-01 00:16:40 UTC" in lines  # 1000 s after the epoch
    assert "end_time: 1970-01-01 01:18:45 UTC" in lines
    assert "first_start_time: -" in lines
    assert "jct_s: 3725 s (1h 02m 05s)" in lines
    assert "command: python train.py --name 'a b'" in lines
    assert "nodes: n1, n2" in lines
    assert "metrics: accuracy 0.9125, loss 0.25" in lines
    assert (
        "deadlines: 7200 s (2h 00m 00s) after submission: reward 100;"
        " 10800 s (3h 00m 00s) after submission: reward 50"
    ) in lines
    assert "stop: iterations 10" in lines
    assert not any("{" in line or "[" in line for line in lines if not line.startswith("  "))


# --- describe --------------------------------------------------------------------------------


def test_describe_lists_fields_resumptions_and_tasks():
    job = make_job(
        state=JobState.RUNNING,
        attempt=3,
        resumes=[
            ResumeRecord(1010.0, 500, ("n1",), 1011.0, 500, ("n2",)),
            ResumeRecord(1020.0, 700, ("n2", "n3"), None, None, ()),
        ],
    )
    tasks = [
        Task("j-1", 0, 3, "n2", (0, 1), TaskState.RUNNING),
        Task("j-1", 1, 3, "n2", (2,), TaskState.FAILED, 3, "boom"),
    ]
    lines = render.describe(job, tasks).split("\n")
    assert lines[0] == "id: j-1"
    assert "state: RUNNING" in lines
    assert "attempts: 3" in lines
    assert not any(line.startswith(("tasks: [", "resumptions: [")) for line in lines)
    assert not any(line.startswith(("speed_samples:", "sr_overhead")) for line in lines)
    assert lines[lines.index("estimate: none") : lines.index("resumptions:")] == [
        "estimate: none",
        "speed samples:",
        "suspend/resume overhead: not measured yet",
    ]
    assert lines[lines.index("resumptions:") :] == [
        "resumptions:",
        "  suspended on n1 at checkpoint step 500; resumed on n2 from step 500",
        "  suspended on n2,n3 at checkpoint step 700; waiting",
        "tasks:",
        "  rank 0: RUNNING on n2 GPUs [0, 1] (attempt 3)",
        "  rank 1: FAILED on n2 GPUs [2] (attempt 3) exit 3 - boom",
    ]


def test_describe_shows_the_estimate_speed_samples_and_overhead():
    job = make_job(
        state=JobState.RUNNING,
        estimate=JobEstimate(
            "best-effort", 2000, 0.0125, 1234.5, 0.002, "cells 0/1/0/0 (2 GPUs on 1 node)", 1500.0
        ),
        speed_samples=[SpeedSample(1, 1, 0.02, 0.02, 1), SpeedSample(2, 2, 0.0125, 0.0, 40)],
        sr_overheads_s=[4.0, 5.0, 9.0],
    )
    lines = render.describe(job, []).split("\n")
    assert lines[lines.index("estimate:") : lines.index("resumptions:")] == [
        "estimate:",
        "  phase: best-effort",
        "  predicted iterations: 2000",
        "  iteration time: 0.0125 s",
        "  predicted remaining: 1234 s (20m 34s)",
        "  reward: 0.002",
        "  allocation: cells 0/1/0/0 (2 GPUs on 1 node)",
        "  made at: 1500.0",
        "speed samples:",
        "  1 GPU on 1 node: 0.02 s/iteration, compute 0.02 s (1 report)",
        "  2 GPUs on 2 nodes: 0.0125 s/iteration, compute unknown (40 reports)",
        "suspend/resume overhead: 6 s (mean of 3)",
    ]


@pytest.mark.parametrize(
    ("remaining", "shown"),
    [
        (12.25, "12.25 s"),
        (60.0, "60 s (1m 00s)"),
        (3725.4, "3725 s (1h 02m 05s)"),
        (float("inf"), "unknown"),
    ],
)
def test_describe_spells_out_long_durations(remaining, shown):
    job = make_job(estimate=JobEstimate("profiling", 0, 0.0, remaining, 1.0))
    assert f"  predicted remaining: {shown}" in render.describe(job, []).split("\n")


# --- MLFS fields and the stop reason ---------------------------------------------------------

STOPPED = "completed (exit code 0); trainer: StopNow: MLF-C: required accuracy 0.8 reached (0.81)"


def test_stop_reason_is_the_rank_0_trainers_reason_of_a_completed_job():
    job = make_job(state=JobState.COMPLETED)
    tasks = [
        Task("j-1", 1, 1, "n1", (1,), TaskState.COMPLETED, 0, "completed (exit code 0)"),
        Task("j-1", 0, 1, "n1", (0,), TaskState.COMPLETED, 0, STOPPED),
    ]
    reason = "StopNow: MLF-C: required accuracy 0.8 reached (0.81)"
    assert render.stop_reason(job, tasks) == reason
    assert render.job_dict(job, tasks)["stop_reason"] == reason
    assert f"stop reason: {reason}" in render.describe(job, tasks).split("\n")


@pytest.mark.parametrize(
    ("state", "task_state", "message"),
    [
        (JobState.RUNNING, TaskState.RUNNING, ""),
        (JobState.COMPLETED, TaskState.COMPLETED, "completed (exit code 0)"),
        (JobState.COMPLETED, TaskState.COMPLETED, "completed (exit code 0); trainer: "),
        (JobState.FAILED, TaskState.FAILED, "failed: exit code 1; trainer: boom"),
    ],
)
def test_no_stop_reason(state, task_state, message):
    job = make_job(state=state)
    tasks = [Task("j-1", 0, 1, "n1", (0,), task_state, 0, message)]
    assert render.stop_reason(job, tasks) is None
    assert not any(
        line.startswith("stop reason") for line in render.describe(job, tasks).split("\n")
    )


def test_job_dict_has_the_mlfs_fields():
    mlfs = MlfsSpec(3.0, (0.75, 0.25), ((0, 1),), StopOption.OPT_STOP, True, 0.9)
    job = make_job(spec=replace(make_job().spec, mlfs=mlfs))
    assert render.job_dict(job)["mlfs"] == {
        "urgency": 3.0,
        "partitions": [0.75, 0.25],
        "dependencies": [[0, 1]],
        "stop_option": "opt-stop",
        "system_may_switch": True,
        "required_accuracy": 0.9,
    }


def test_describe_shows_the_mlfs_fields():
    mlfs = MlfsSpec(3.0, (0.75, 0.25), ((0, 1),), StopOption.OPT_STOP, True, 0.9)
    lines = render.describe(make_job(spec=replace(make_job().spec, mlfs=mlfs)), []).split("\n")
    assert lines[lines.index("mlfs:") : lines.index("mlfs:") + 6] == [
        "mlfs:",
        "  urgency: 3",
        "  stop option: (ii) OptStop, stop near the predicted best accuracy; the system may "
        "switch it under overload",
        "  required accuracy: 0.9",
        "  partitions: 0.75, 0.25",
        "  dependencies: 0->1",
    ]
    assert not any(line.startswith("mlfs: {") for line in lines)


def test_describe_shows_the_default_mlfs_fields():
    lines = render.describe(make_job(), []).split("\n")
    assert lines[lines.index("mlfs:") : lines.index("mlfs:") + 6] == [
        "mlfs:",
        "  urgency: 1",
        "  stop option: (i) run the iterations asked for; not switched by the system",
        "  required accuracy: none",
        "  partitions: none (data parallel)",
        "  dependencies: none",
    ]


def test_event_rows_line_up_whatever_the_kind():
    events = [
        Event(7, 3600.0, "job_submitted", "mlp by alice", "j-1"),
        Event(1234, 3661.0, "state_row_quarantined", "bad row", "", "n1"),
        Event(8, 0.0, "controller_started", "listening"),
    ]
    lines = [render.event_line(e) for e in events]
    assert lines[0] == (
        "     7  1970-01-01 01:00:00  job_submitted          j-1                       mlp by alice"
    )
    assert lines[1].startswith("  1234  1970-01-01 01:01:01  state_row_quarantined  n1  ")
    assert lines[2].split()[-2:] == ["-", "listening"]
    assert len({line.index(e.message) for line, e in zip(lines, events, strict=True)}) == 1
