"""MLFS overload handling live (§3.3.3): node-a's agent measures an overload, asks to move the
task MLFS' Euclidean rule names, and the policy moves it to node-b, where it resumes from its
checkpoint and completes; node-a's load falls back under h_r (its agent logs that it is
relieved: at most the clear mark, 0.8). Under every policy: MLF-H and MLFS answer the request
in their own cycle, FIFO and UniSched through ``controller/policy/overload.py`` (the same
Euclidean host choice).

Memory is the overloaded resource: unlike CPU time on this shared two-core machine, resident
memory does not depend on what else runs. node-a counts 2.6 GB as its whole memory
(``--memory-capacity``) and 64 cores as its CPU (``--cpu-capacity``), node-b the machine's.
Without the large CPU capacity, ``grower`` burning a core while it fills its ballast could take
node-a's CPU over h_r before its memory, and on a CPU overload the Euclidean rule rightly names
the CPU-heaviest task, ``grower``. Two training jobs run on node-a:

- ``mover`` holds a 1.3 GB ballast from its start and trains slowly (CPU nearly idle), at full
  speed once moved; on node-a it stops one step short of its budget and waits there, so it
  ends only by moving, however long the steps before the migration take;
- ``grower`` starts small; when the test creates the ``go`` file it allocates 0.9 GB, which
  takes node-a's memory above h_r = 90% (about 3.0 of 2.6 GB).

With memory overloaded the ideal virtual task is (GPU min, CPU min, memory max, network 0):
``mover``, the largest memory user with an idle CPU, is the closest, not ``grower``, which
tipped the node over (and burnt CPU allocating). Without ``mover`` node-a is at about 50%;
``mover`` (65% of node-a's memory) fits node-b.

node-b joins only once both jobs run on node-a (MLF-H spreads jobs over idle nodes), and the
overload starts only after that, so the migration always has somewhere to go. The agent asks
at the first overloaded sample (``--overload-samples 1``): the policy would otherwise pick the
same task itself from the same numbers (hysteresis is covered by the unit tests).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from polling import wait_until

from mlsched.localcluster import ClusterTiming
from mlsched.model import Deadline, IterationStop, JobClass, JobSpec, JobState

pytestmark = pytest.mark.integration

MEMORY_CAPACITY = 2_600_000_000
CPU_CAPACITY = 64  # cores: CPU (and the virtual slots' load, taken from it) never overloads
MOVER_STEPS = 300
# conftest's FAST timing, with the heartbeat timeout at the agent's default self-fencing delay
# (30 s): a shim self-fences after that long without word from its agent, and 4 s of silence
# happened here with the two cores under load (load average 20-28): all three trainers
# suspended at once and resumed (on node-a), with no migration involved.
TIMING = ClusterTiming(
    lease_s=600.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=30.0,
    suspend_grace_s=15.0,
)

TRAINER = r'''
"""A small trainer_shim job holding a memory ballast (see tests/integration/test_overload.py)."""
import argparse
import os
import time

import torch
from torch import nn

import trainer_shim

p = argparse.ArgumentParser()
p.add_argument("--ballast-mb", type=int, default=0)
p.add_argument("--go-file", default="", help="allocate the ballast once this file exists")
p.add_argument("--step-s", type=float, default=0.1)
p.add_argument("--home", default="", help="the trainer-address file of the first node's agent")
p.add_argument("--resumed-step-s", type=float, default=None, help="pace away from --home")
p.add_argument("--checkpoint-every", type=int, default=0, help="on --home")
p.add_argument(
    "--hold-at", type=int, default=0, help="on --home, train no further than this step"
)
args = p.parse_args()
ballast = None
# On the node it started on (whatever the attempt: a self-fenced task may resume there) the
# job keeps its pace, its hold and its checkpoints; a move to another node ends them (away,
# the steps cost little and the budget is reached soon, however loaded the machine).
away = os.path.realpath(os.environ["MLSCHED_AGENT_ADDR_FILE"]) != os.path.realpath(args.home)

with trainer_shim.init() as job:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = job.restore(model, optimizer=optimizer)
    pace = args.resumed_step_s if away and args.resumed_step_s else args.step_s
    while not job.should_stop():
        if ballast is None and (not args.go_file or os.path.exists(args.go_file)):
            ballast = bytearray(b"\x01") * (args.ballast_mb << 20)  # resident: every page written
        time.sleep(pace)
        if args.hold_at and not away and step >= args.hold_at:
            if job.should_suspend():  # held: only a suspension ends this attempt
                job.save_checkpoint(step, model, optimizer=optimizer)
                break
            continue
        loss = model(torch.randn(8, 4)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        job.report(step, loss=loss.item(), iteration_time=pace)
        if job.should_suspend():
            job.save_checkpoint(step, model, optimizer=optimizer)
            break
        if args.checkpoint_every and not away and step % args.checkpoint_every == 0:
            job.save_checkpoint(step, model, optimizer=optimizer)
    if job.suspend_reason is None:
        job.save_checkpoint(step, model, optimizer=optimizer)
'''


def trainer_spec(script: Path, cluster, name: str, steps: int, *args: str) -> JobSpec:
    """A job of ``TRAINER`` whose home (where it holds and keeps its pace) is node-a."""
    home = cluster.root / "node-a" / "trainer-address"  # the agent's MLSCHED_AGENT_ADDR_FILE
    return JobSpec(
        name=name,
        command=(sys.executable, str(script), "--home", str(home), *args),
        gpus=1,
        stopping=IterationStop(steps),
        working_dir=str(script.parent),
        env=(("OMP_NUM_THREADS", "1"),),
    )


def wait_for_request(cluster, client, timeout_s: float = 60.0):
    """The first ``migration_requested`` event; on a timeout the error carries what node-a's
    agent logged and the events so far, so a failure says where the request was lost."""
    try:
        return cluster.wait_for_event(
            lambda e: e.kind == "migration_requested", timeout_s=timeout_s
        )
    except TimeoutError as exc:
        log = cluster.root / "node-a.log"
        tail = log.read_text(errors="replace")[-4000:] if log.exists() else "(no node-a.log)"
        feed = "\n".join(f"{e.kind} {e.job_id} {e.message}" for e in client.events(after_seq=0))
        raise TimeoutError(f"{exc}\nevents:\n{feed}\nnode-a.log tail:\n{tail}") from None


def relieved(cluster, node_id: str) -> bool:
    """Whether the node's agent found its load back at or under the clear mark (< h_r)."""
    log = cluster.root / f"{node_id}.log"
    return log.exists() and f"{node_id} relieved: memory" in log.read_text(errors="replace")


@pytest.mark.parametrize("policy", ["mlf-h", "mlfs", "fifo", "unisched"])
def test_overloaded_node_moves_the_euclidean_choice_to_the_other_node(
    make_cluster, wait_job, ended, tmp_path, policy
):
    script = tmp_path / "ballast_trainer.py"
    script.write_text(TRAINER)
    go = tmp_path / "go"
    cluster = make_cluster(TIMING, nodes={}, policy=policy)
    overload_flags = ["--overload-samples", "1", "--migration-cooldown", "600"]
    cluster.start_agent(
        "node-a",
        gpus=2,
        extra=[
            "--memory-capacity",
            str(MEMORY_CAPACITY),
            "--cpu-capacity",
            str(CPU_CAPACITY),
            *overload_flags,
        ],
    )
    cluster.wait_for_nodes({"node-a"})
    with cluster.client("alice") as client:
        mover = client.submit(
            trainer_spec(
                script,
                cluster,
                "mover",
                MOVER_STEPS,
                "--ballast-mb",
                "1300",
                "--step-s",
                "0.1",
                "--resumed-step-s",
                "0.005",
                "--checkpoint-every",
                "5",
                "--hold-at",
                str(MOVER_STEPS - 1),
            )
        )
        grower = client.submit(
            trainer_spec(
                script, cluster, "grower", 10_000_000, "--ballast-mb", "900", "--go-file", str(go)
            )
        )
        wait_job(cluster, client, grower.id, lambda j: j.state is JobState.RUNNING)
        # a checkpoint: mover holds its ballast and trains at its idle pace
        wait_job(cluster, client, mover.id, lambda j: j.checkpoint_step > 0)
        assert {t.node_id for j in (mover, grower) for t in client.get(j.id)[1]} == {"node-a"}
        cluster.start_agent("node-b", gpus=1, extra=overload_flags)
        cluster.wait_for_nodes({"node-b"})

        go.touch()  # grower allocates: node-a's memory goes over h_r
        requested = wait_for_request(cluster, client)
        done = wait_job(cluster, client, mover.id, ended, timeout_s=180)
        wait_until(lambda: relieved(cluster, "node-a"), timeout=60.0)
        grower_now, grower_tasks = client.get(grower.id)
        events = list(client.events(after_seq=0))
        client.cancel(grower.id)

    # node-a's agent asked for the Euclidean choice, and only for it
    assert (requested.job_id, requested.node_id) == (mover.id, "node-a"), (
        f"mover {mover.id}, grower {grower.id}: {requested.message}"
    )
    assert "memory" in requested.message and "node-a overloaded" in requested.message
    # (the agent may repeat its request while the task checkpoints; it never names another)
    assert {e.job_id for e in events if e.kind == "migration_requested"} == {mover.id}
    ordered = [e for e in events if e.kind == "migration_ordered" and e.job_id == mover.id]
    assert len(ordered) == 1 and "overloaded node-a" in ordered[0].message
    # fifo and unisched answer through controller/policy/overload.py, the MLFS policies in
    # their own cycle
    by_overload_py = "on its agent's request" in ordered[0].message
    assert by_overload_py == (policy in ("fifo", "unisched")), ordered[0].message
    # it checkpointed, resumed on node-b from that checkpoint and completed there
    assert done.state is JobState.COMPLETED, done.message
    assert done.iteration == MOVER_STEPS
    assert done.suspensions == 1
    [resume] = done.resumes
    assert resume.from_nodes == ("node-a",) and resume.to_nodes == ("node-b",)
    assert resume.checkpoint_step > 0
    assert resume.restored_step == resume.checkpoint_step
    assert done.node_history == ["node-a", "node-b"]
    # the job that tipped the node over was not the one moved
    assert not [e for e in events if e.kind == "migration_ordered" and e.job_id == grower.id]
    assert grower_now.state is JobState.RUNNING
    assert [t.node_id for t in grower_tasks] == ["node-a"]


# --- priorities (issue 10 item 2): the agent names the lower-priority of two near-equal tasks

TWIN_MEMORY_CAPACITY = 5_000_000_000
EARLY_STEPS = 2_000  # "early": long, no deadline: the lowest Eq. 6 priority
LATE_STEPS = 300  # "late": short, a deadline: Eq. 6's highest; the queue's lowest


@pytest.mark.parametrize("policy", ["mlfs", "fifo"])
def test_the_agent_names_the_lower_priority_of_two_equal_tasks(
    make_cluster, wait_job, ended, tmp_path, policy
):
    """Two twins hold the same 1.6 GiB on node-a (about 2.0 of its 5.0 GB each); ``grower``
    (0.35 GB, about 1.0 once it allocates 0.6 GiB) tips its memory over h_r (measured about
    4.1 -> 4.7 GB, 81 % -> 94 %). With memory overloaded the ideal virtual task is the largest
    memory user: the twins are within a few MB of each other (well inside the 0.05 near-tie
    band of ``euclid.PRIORITY_TIE``), ``grower`` about 0.2 further away. Of the twins, the
    agent names the one with the lower priority the controller sent:

    - under ``fifo`` (the queue order, ``controller/policy/ranks.py``) ``late``, submitted
      second;
    - under ``mlfs`` (Eq. 6) ``early``: no deadline and 2,000 steps of 0.1 s, so while 1,000
      or more are left r >= 100 s (Eq. 4's r term <= 10.8) and P(early) <= 0.3 + 0.7 * 10.8
      < 7.9 (P^ML <= 1), against ``late``'s 60 s deadline, whose term (18 once floored) alone
      gives P(late) >= 0.7 * 18 = 12.6 (the agent logged 0.30 and 12.9 at the launches).

    The old stand-in (the oldest start lowest) would name ``early`` under both. The named twin
    checkpoints, resumes on node-b and completes there; node-a is relieved (about 53 %).
    """
    script = tmp_path / "ballast_trainer.py"
    script.write_text(TRAINER)
    go = tmp_path / "go"
    cluster = make_cluster(TIMING, nodes={}, policy=policy)
    overload_flags = ["--overload-samples", "1", "--migration-cooldown", "600"]
    cluster.start_agent(
        "node-a",
        gpus=3,
        extra=[
            "--memory-capacity",
            str(TWIN_MEMORY_CAPACITY),
            "--cpu-capacity",
            str(CPU_CAPACITY),
            *overload_flags,
        ],
    )
    cluster.wait_for_nodes({"node-a"})
    twin = ("--ballast-mb", "1600", "--step-s", "0.1", "--checkpoint-every", "5")
    early_spec = trainer_spec(
        script, cluster, "early", EARLY_STEPS, *twin, "--resumed-step-s", "0.001"
    )
    late_spec = trainer_spec(
        script,
        cluster,
        "late",
        LATE_STEPS,
        *twin,
        "--resumed-step-s",
        "0.005",
        "--hold-at",
        str(LATE_STEPS - 1),
    )
    late_spec = replace(late_spec, job_class=JobClass.SOFT_SLO, deadlines=(Deadline(60.0, 1.0),))
    with cluster.client("alice") as client:
        early = client.submit(early_spec)
        late = client.submit(late_spec)
        grower = client.submit(
            trainer_spec(
                script, cluster, "grower", 10_000_000, "--ballast-mb", "600", "--go-file", str(go)
            )
        )
        wait_job(cluster, client, grower.id, lambda j: j.state is JobState.RUNNING)
        for twin_job in (early, late):
            wait_job(cluster, client, twin_job.id, lambda j: j.checkpoint_step > 0)
        assert {t.node_id for j in (early, late, grower) for t in client.get(j.id)[1]} == {"node-a"}
        cluster.start_agent("node-b", gpus=1, extra=overload_flags)
        cluster.wait_for_nodes({"node-b"})

        go.touch()
        requested = wait_for_request(cluster, client)
        moved = early if policy == "mlfs" else late
        done = wait_job(cluster, client, moved.id, ended, timeout_s=240)
        wait_until(lambda: relieved(cluster, "node-a"), timeout=60.0)
        events = list(client.events(after_seq=0))
        for job in (early, late, grower):
            if job.id != moved.id and not client.get(job.id)[0].state.terminal:
                client.cancel(job.id)  # an ended one is judged by the assertions below

    agent_log = (cluster.root / "node-a.log").read_text(errors="replace")
    # the priorities reached the agent, and the twins were ranked by them
    for job in (early, late):
        assert f"task {job.id}/0/1 priority" in agent_log, agent_log[-3000:]
    assert "has no priority from the controller" not in agent_log
    names = {early.id: "early", late.id: "late", grower.id: "grower"}
    assert requested.job_id == moved.id, f"{names.get(requested.job_id)}: {requested.message}"
    assert {e.job_id for e in events if e.kind == "migration_requested"} == {moved.id}
    assert done.state is JobState.COMPLETED, done.message
    [resume] = done.resumes
    assert resume.from_nodes == ("node-a",) and resume.to_nodes == ("node-b",)
    assert resume.restored_step == resume.checkpoint_step > 0
