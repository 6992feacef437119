"""``mlsched demo``: a controller and two agents on this machine running the example jobs.

The demo is a story told by events, never by the clock: every job runs until the demo asks it
to finish (``mlsched stop``: a final checkpoint, then COMPLETED), and the demo does so only once
the story's checks hold. A machine of any speed therefore tells the same story; a fast one
only trains more steps per job. Each scenario (:data:`SCENARIOS`) is:

``fifo-lease`` (the default; 2 nodes x 2 GPUs): two 2-GPU jobs fill both nodes and a 1-GPU job
waits. At a lease boundary the longest-running job yields (checkpoint, exit) and the waiting
job starts; at a later one another job yields and the suspended one resumes from its checkpoint
on the other node. Then a 3-GPU DDP job arrives that can only run spanning both nodes.

``unisched`` (the controller's default policy; 2 nodes x 4 GPUs, three SLO jobs of 3, 3 and 2
GPUs): every job first runs as a profiler on at most 2 GPUs for one lease; the estimator then
predicts its iterations and iteration time (``mlsched describe``), and the joint MILP (§III-C)
chooses jobs and allocations together. Rounded up to 4-GPU cells (Chronus), the two 3-GPU jobs
fill the cluster and the third waits; the MILP gives them 2+1-GPU allocations instead, and all
three run at once.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import grpc

from mlsched import render
from mlsched.client import Client
from mlsched.localcluster import ClusterTiming, LocalCluster
from mlsched.model import (
    Deadline,
    IterationStop,
    Job,
    JobClass,
    JobSpec,
    JobState,
    ResumeRecord,
    Task,
    TaskState,
)
from mlsched.security.names import NameError_, check_name

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NODES = ("node-a", "node-b")
DEMO_TIMEOUT_S = 170.0
# The demo's jobs run until it stops them: a budget no example reaches within the demo, and the
# estimator's iteration count for the UniSched scenario.
UNTIL_STOPPED = 10_000_000
POLL_S = 0.5  # how often the demo reads the jobs' state (it waits for states, not for time)
# The jobs' step rate: paced (examples/pace.py), the training processes leave this machine's
# cores to the controller and agents whose story the demo tells. The story waits for states,
# so it holds at any rate (tests/integration/test_demo.py runs it flat out too).
STEPS_PER_SECOND = 20

JobList = list[tuple[Job, list[Task]]]
Check = Callable[[JobList], bool]


@dataclass(frozen=True)
class Scenario:
    """Jobs to submit, a condition for the late jobs, and checks that end the story."""

    policy: str
    gpus_per_node: int
    first: tuple[JobSpec, ...]
    late: tuple[JobSpec, ...] = ()
    late_when: Check = lambda jobs: True
    checks: dict[str, Check] = field(default_factory=dict)
    story: str = ""


def _spec(
    name: str,
    script: str,
    gpus: int,
    gpus_per_process: int = 1,
    seed: int = 0,
    job_class: JobClass = JobClass.BEST_EFFORT,
    deadlines: tuple[Deadline, ...] = (),
) -> JobSpec:
    return JobSpec(
        name=name,
        command=(
            sys.executable,
            str(EXAMPLES / script),
            "--seed",
            str(seed),
            "--max-steps-per-second",
            str(STEPS_PER_SECOND),
        ),
        gpus=gpus,
        gpus_per_process=gpus_per_process,
        stopping=IterationStop(UNTIL_STOPPED),
        working_dir=str(EXAMPLES),
        env=(("OMP_NUM_THREADS", "1"),),  # both agents share this machine's cores
        job_class=job_class,
        deadlines=deadlines,
    )


# --- what the checks look at ----------------------------------------------------------------


def _moved(r: ResumeRecord) -> bool:
    return bool(r.resumed_at) and bool(set(r.to_nodes) - set(r.from_nodes))


def _exact(r: ResumeRecord) -> bool:
    return r.restored_step is not None and r.restored_step == r.checkpoint_step > 0


def resumed_elsewhere(job: Job) -> bool:
    return any(_moved(r) for r in job.resumes)


def exact_resume(job: Job) -> bool:
    return any(_exact(r) for r in job.resumes)


def _exact_resume_elsewhere(job: Job) -> bool:
    return any(_moved(r) and _exact(r) for r in job.resumes)


def _running(tasks: list[Task]) -> list[Task]:
    return [t for t in tasks if t.state is TaskState.RUNNING]


def _spans(job: Job, tasks: list[Task]) -> bool:
    """Running on both nodes and trained at least one (synchronised DDP) step there."""
    nodes = {t.node_id for t in _running(tasks)}
    return job.state is JobState.RUNNING and len(nodes) > 1 and job.iteration > 0


def _named(jobs: JobList, name: str) -> list[tuple[Job, list[Task]]]:
    return [(j, t) for j, t in jobs if j.spec.name == name]


# --- the scenarios ----------------------------------------------------------------------------


def _fifo_lease() -> Scenario:
    return Scenario(
        policy="fifo-lease",
        gpus_per_node=2,
        first=(
            _spec("ddp-blobs", "ddp_classifier.py", 2, seed=1),
            _spec("mlp-2gpu", "mlp_classifier.py", 2, gpus_per_process=2, seed=2),
            _spec("mlp-1gpu", "mlp_classifier.py", 1, seed=3),
        ),
        late=(_spec("ddp-span", "ddp_classifier.py", 3, seed=4),),
        late_when=lambda jobs: any(_exact_resume_elsewhere(j) for j, _ in jobs),
        checks={
            "exact_resume": lambda jobs: any(exact_resume(j) for j, _ in jobs),
            "resumed_on_other_node": lambda jobs: any(resumed_elsewhere(j) for j, _ in jobs),
            "spanned_both_nodes": lambda jobs: any(
                _spans(j, t) for j, t in _named(jobs, "ddp-span")
            ),
        },
        story="a job yields at a lease boundary and resumes exactly on the other node; "
        "then a 3-GPU job spans both nodes",
    )


def _profiled(job: Job) -> bool:
    """UniSched §III-B: the job has a measured speed on at most 2 GPUs."""
    return any(s.gpus <= 2 for s in job.speed_samples)


def _estimated(job: Job) -> bool:
    est = job.estimate
    return est is not None and est.iterations > 0 and est.iteration_time_s > 0


def _held_gpus(tasks: list[Task]) -> int:
    return sum(len(t.gpu_indices) for t in _running(tasks))


def _all_at_full_size_together(jobs: JobList) -> bool:
    """Every job RUNNING on all the GPUs it asked for, at the same moment, after profiling."""
    return bool(jobs) and all(
        j.state is JobState.RUNNING and _held_gpus(t) == j.spec.gpus and _profiled(j)
        for j, t in jobs
    )


def _unisched() -> Scenario:
    year = 365 * 24 * 3600.0  # a deadline every estimate meets: the SLO class, not a race
    strict = {"job_class": JobClass.STRICT_SLO, "deadlines": (Deadline(year, 100.0),)}
    return Scenario(
        policy="unisched",
        gpus_per_node=4,
        first=(
            _spec("ddp-3gpu-a", "ddp_classifier.py", 3, seed=1, **strict),
            _spec("ddp-3gpu-b", "ddp_classifier.py", 3, seed=2, **strict),
            _spec("mlp-2gpu", "mlp_classifier.py", 2, gpus_per_process=2, seed=3, **strict),
        ),
        checks={
            "every_job_profiled": lambda jobs: all(_profiled(j) for j, _ in jobs),
            "every_job_estimated": lambda jobs: all(_estimated(j) for j, _ in jobs),
            "joint_allocation_runs_all_three": _all_at_full_size_together,
        },
        story="each job is profiled on at most 2 GPUs, then estimated (mlsched describe); the "
        "MILP gives the 3-GPU jobs 2+1-GPU allocations so that all three run at once, where "
        "rounding each up to a 4-GPU cell would leave one waiting",
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {"fifo-lease": _fifo_lease, "unisched": _unisched}


# --- running a scenario -----------------------------------------------------------------------


def run_demo(
    json_output: bool = False,
    keep: bool = False,
    lease_s: float = 10.0,
    policy: str = "fifo-lease",
    timeout_s: float = DEMO_TIMEOUT_S,
    scenario: Scenario | None = None,
) -> int:
    """Run one scenario (``policy`` names it, or pass ``scenario`` itself); 0 when every
    check held."""
    if not (EXAMPLES / "mlp_classifier.py").exists():
        print(
            f"mlsched demo: the example scripts are missing under {EXAMPLES}; run the demo "
            "from a clone installed with `pip install -e .`",
            file=sys.stderr,
        )
        return 2
    scenario = scenario or SCENARIOS[policy]()
    out = sys.stderr if json_output else sys.stdout
    root = Path(tempfile.mkdtemp(prefix="mlsched-demo-"))
    cluster = LocalCluster(root, ClusterTiming(lease_s=lease_s), policy=scenario.policy)
    started = time.monotonic()
    with _terminate_as_exit():
        try:
            driver, jobs = _run_cluster(cluster, scenario, lease_s, root, out, started, timeout_s)
        finally:
            cluster.stop()
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
    return _report(scenario, jobs, driver.seen, time.monotonic() - started, json_output, out)


@contextlib.contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """SIGTERM (``timeout``, a service manager) unwinds like Ctrl-C, so the demo's cluster and
    its training processes are torn down instead of left running."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_cluster(
    cluster: LocalCluster,
    scenario: Scenario,
    lease_s: float,
    root: Path,
    out: TextIO,
    started: float,
    timeout_s: float,
) -> tuple[_Driver, JobList]:
    cluster.start_controller()
    for node_id in NODES:
        cluster.start_agent(node_id, gpus=scenario.gpus_per_node)
    cluster.wait_for_nodes(set(NODES))
    user = _local_user()
    print(
        f"controller {cluster.address} (policy {scenario.policy}), agents "
        f"{', '.join(NODES)} ({scenario.gpus_per_node} GPUs each), lease {lease_s:g} s, "
        f"state in {root}\nyour credentials: MLSCHED_CREDENTIALS={root / 'users' / user}"
        f"\nstory: {scenario.story}",
        file=out,
        flush=True,
    )
    with cluster.client(user) as client:
        driver = _Driver(client, scenario, out, started, started + timeout_s)
        return driver, driver.run()


def _local_user() -> str:
    """This machine's user name when it can be certified, else ``demo``."""
    try:
        return check_name(getpass.getuser())
    except (NameError_, KeyError, OSError):
        return "demo"


class _Driver:
    """Submits the jobs and reacts to the controller's events until every job has ended."""

    def __init__(
        self, client: Client, scenario: Scenario, out: TextIO, started: float, deadline: float
    ) -> None:
        self.client = client
        self.scenario = scenario
        self.out = out
        self.started = started
        self.deadline = deadline
        self.seen: dict[str, bool] = dict.fromkeys(scenario.checks, False)
        self.late_submitted = not scenario.late
        self.stopping = False
        self.stop_asked: set[str] = set()
        self.jobs: JobList = []
        self._shown = ""

    def run(self) -> JobList:
        for spec in self.scenario.first:
            self.client.submit(spec)
        while True:
            self.jobs = self.client.list()
            self._react()
            if self.stopping and all(j.state.terminal for j, _ in self.jobs):
                return self.jobs
            if time.monotonic() > self.deadline:
                print("mlsched demo: timed out waiting for the story's states", file=self.out)
                return self.jobs
            # Progress, estimates and placements are states, not events: read them again.
            time.sleep(POLL_S)

    def _react(self) -> None:
        for name, check in self.scenario.checks.items():
            self.seen[name] = self.seen[name] or check(self.jobs)
        if not self.late_submitted and self.scenario.late_when(self.jobs):
            for spec in self.scenario.late:
                self.client.submit(spec)
            self.late_submitted = True
            self.jobs = self.client.list()
        self._show()
        if self.late_submitted and all(self.seen.values()):
            if not self.stopping:
                print("story complete: asking every job to finish (mlsched stop)", file=self.out)
            self.stopping = True
        if self.stopping:
            self._stop_all()

    def _stop_all(self) -> None:
        for job, _ in self.jobs:
            if job.state.terminal or job.id in self.stop_asked:
                continue
            try:
                self.client.stop(job.id, "the demo's story is complete")
                self.stop_asked.add(job.id)
            except grpc.RpcError as exc:  # e.g. queued before its first checkpoint: later
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise

    def _show(self) -> None:
        view = render.jobs_table(self.jobs)
        if view == self._shown:
            return
        self._shown = view
        if self.out.isatty():
            self.out.write("\x1b[2J\x1b[H")
        self.out.write(f"--- t={time.monotonic() - self.started:5.1f}s ---\n{view}\n")
        self.out.flush()


def _report(
    scenario: Scenario,
    jobs: JobList,
    seen: dict[str, bool],
    elapsed: float,
    json_output: bool,
    out: TextIO,
) -> int:
    checks = {
        "all_completed": bool(jobs) and all(j.state is JobState.COMPLETED for j, _ in jobs),
        **seen,
    }
    if json_output:
        summary = {
            "policy": scenario.policy,
            "elapsed_s": round(elapsed, 1),
            "checks": checks,
            "jobs": [render.job_dict(j, t) for j, t in jobs],
        }
        print(json.dumps(summary, indent=2, sort_keys=True))
    print("\nsummary", file=out)
    print(render.table(_SUMMARY_COLUMNS, [_summary_row(job) for job, _ in jobs]), file=out)
    for name, ok in checks.items():
        print(f"  [{'x' if ok else ' '}] {name}", file=out)
    print(f"demo finished in {elapsed:.0f} s", file=out)
    return 0 if all(checks.values()) else 1


_SUMMARY_COLUMNS = [
    "ID",
    "NAME",
    "STATE",
    "JCT_S",
    "STEPS",
    "SUSP",
    "NODES",
    "ACCURACY",
    "RESUMES (ckpt from -> to @ restored)",
]


def _resume_text(r: ResumeRecord) -> str:
    """One suspension as the summary shows it; one never resumed (the story stopped the job
    while it waited: it completed from that checkpoint) says so."""
    where = f"step {r.checkpoint_step} {','.join(r.from_nodes)}"
    if r.resumed_at is None:
        return f"{where} -> not resumed (stopped while suspended)"
    return f"{where} -> {','.join(r.to_nodes) or '?'} @ {r.restored_step}"


def _summary_row(job: Job) -> list[Any]:
    acc = job.metrics.get("accuracy")
    resumes = "; ".join(_resume_text(r) for r in job.resumes)
    return [
        job.id,
        job.spec.name,
        job.state.value,
        render.jct_s(job),
        job.iteration,
        job.suspensions,
        " -> ".join(job.node_history),
        "" if acc is None else f"{acc:.3f}",
        resumes or "-",
    ]
