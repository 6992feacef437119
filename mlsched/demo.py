"""``mlsched demo``: a controller and two agents on this machine running the example jobs.

The scenario (FIFO with leases, 2 nodes x 2 GPUs): two 2-GPU jobs fill both nodes and a 1-GPU
job waits. At the first lease boundary the longest-running job yields (checkpoint, exit) and
the waiting job starts; at the next boundary the other 2-GPU job yields and the suspended one
resumes from its checkpoint on the other node. Once a job has resumed on a different node, a
3-GPU DDP job arrives that can only run spanning both nodes. The demo ends when every job has
finished, with a summary per job.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from mlsched import render
from mlsched.client import Client
from mlsched.localcluster import ClusterTiming, LocalCluster
from mlsched.model import IterationStop, Job, JobSpec, MetricGoal, TargetMetricStop, Task

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NODES = ("node-a", "node-b")
DEMO_TIMEOUT_S = 170.0


def _spec(
    name: str, script: str, gpus: int, stopping: Any, gpus_per_process: int = 1, seed: int = 0
) -> JobSpec:
    return JobSpec(
        name=name,
        command=(sys.executable, str(EXAMPLES / script), "--seed", str(seed)),
        gpus=gpus,
        gpus_per_process=gpus_per_process,
        stopping=stopping,
        working_dir=str(EXAMPLES),
        env=(("OMP_NUM_THREADS", "1"),),  # both agents share this machine's cores
    )


def demo_jobs() -> tuple[list[JobSpec], JobSpec]:
    """The jobs submitted at the start, and the late spanning job."""
    first = [
        _spec("ddp-blobs", "ddp_classifier.py", 2, IterationStop(1000), seed=1),
        _spec("mlp-2gpu", "mlp_classifier.py", 2, IterationStop(1500), gpus_per_process=2, seed=2),
        _spec("mlp-1gpu", "mlp_classifier.py", 1, IterationStop(1800), seed=3),
    ]
    late = _spec(
        "ddp-span",
        "ddp_classifier.py",
        3,
        TargetMetricStop("accuracy", 0.95, MetricGoal.MAXIMIZE, 1000),
        seed=4,
    )
    return first, late


def resumed_elsewhere(job: Job) -> bool:
    return any(r.resumed_at and set(r.to_nodes) - set(r.from_nodes) for r in job.resumes)


def exact_resume(job: Job) -> bool:
    return any(
        r.restored_step is not None and r.restored_step == r.checkpoint_step > 0
        for r in job.resumes
    )


def run_demo(json_output: bool = False, keep: bool = False, lease_s: float = 10.0) -> int:
    if not (EXAMPLES / "mlp_classifier.py").exists():
        print(
            f"mlsched demo: the example scripts are missing under {EXAMPLES}; run the demo "
            "from a clone installed with `pip install -e .`",
            file=sys.stderr,
        )
        return 2
    out = sys.stderr if json_output else sys.stdout
    root = Path(tempfile.mkdtemp(prefix="mlsched-demo-"))
    cluster = LocalCluster(root, ClusterTiming(lease_s=lease_s))
    started = time.monotonic()
    try:
        cluster.start_controller()
        for node_id in NODES:
            cluster.start_agent(node_id, gpus=2)
        cluster.wait_for_nodes(set(NODES))
        print(
            f"controller {cluster.address}, agents {', '.join(NODES)} (2 GPUs each), "
            f"lease {lease_s:g} s, state in {root}",
            file=out,
        )
        with cluster.client("demo") as client:
            jobs = _drive(client, out, started)
    finally:
        cluster.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return _report(jobs, time.monotonic() - started, json_output, out)


def _drive(client: Client, out: TextIO, started: float) -> list[tuple[Job, list[Task]]]:
    first, late = demo_jobs()
    for spec in first:
        client.submit(spec)
    late_submitted = False
    previous = ""
    while True:
        jobs = client.list()
        if not late_submitted and any(resumed_elsewhere(j) for j, _ in jobs):
            client.submit(late)
            late_submitted = True
            continue
        view = render.jobs_table(jobs)
        if view != previous:
            _show(out, view, time.monotonic() - started)
            previous = view
        if late_submitted and all(j.state.terminal for j, _ in jobs):
            return jobs
        if time.monotonic() - started > DEMO_TIMEOUT_S:
            print("mlsched demo: timed out waiting for the jobs", file=out)
            return jobs
        time.sleep(1.0)  # a display refresh interval, not a wait for an event


def _show(out: TextIO, view: str, elapsed: float) -> None:
    if out.isatty():
        out.write("\x1b[2J\x1b[H")
    out.write(f"--- t={elapsed:5.1f}s ---\n{view}\n")
    out.flush()


def _report(
    jobs: list[tuple[Job, list[Task]]], elapsed: float, json_output: bool, out: TextIO
) -> int:
    all_completed = bool(jobs) and all(j.state.value == "COMPLETED" for j, _ in jobs)
    checks = {
        "all_completed": all_completed,
        "exact_resume": any(exact_resume(j) for j, _ in jobs),
        "resumed_on_other_node": any(resumed_elsewhere(j) for j, _ in jobs),
        "spanned_both_nodes": any(len({t.node_id for t in tasks}) > 1 for _, tasks in jobs),
    }
    if json_output:
        summary = {
            "elapsed_s": round(elapsed, 1),
            "checks": checks,
            "jobs": [render.job_dict(j, t) for j, t in jobs],
        }
        print(json.dumps(summary, indent=2, sort_keys=True))
    rows = []
    for job, _ in jobs:
        acc = job.metrics.get("accuracy")
        resumes = "; ".join(
            f"step {r.checkpoint_step} {','.join(r.from_nodes)} -> "
            f"{','.join(r.to_nodes) or '?'} @ {r.restored_step}"
            for r in job.resumes
        )
        rows.append(
            [
                job.id,
                job.spec.name,
                job.state.value,
                render.jct_s(job),
                job.suspensions,
                " -> ".join(job.node_history),
                "" if acc is None else f"{acc:.3f}",
                resumes or "-",
            ]
        )
    print("\nsummary", file=out)
    print(
        render.table(
            [
                "ID",
                "NAME",
                "STATE",
                "JCT_S",
                "SUSP",
                "NODES",
                "ACCURACY",
                "RESUMES (ckpt from -> to @ restored)",
            ],
            rows,
        ),
        file=out,
    )
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}", file=out)
    print(f"demo finished in {elapsed:.0f} s", file=out)
    return 0 if all(checks.values()) else 1
