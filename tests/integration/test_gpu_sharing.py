"""GPU sharing live (``--gpu-slices``, docs/overload.md "GPU sharing"): node-a offers its one
virtual GPU as 2 slots, so two 1-GPU jobs share it; once the shared GPU is over h_r its agent
asks to move the lower-priority one (MLFS §3.3.3's p_s rule), and node-b takes it.

The jobs are shell scripts, not trainers: node-a counts 0.1 core as its whole CPU
(``--cpu-capacity``), so that a busy loop takes the shared GPU's load (the summed CPU shares of
its tasks) over h_r however loaded this two-core machine is, and importing torch would do as
much at every start. Here starting costs a few milliseconds of CPU, waiting (``sleep`` 0.5 s at
a time) about as little, and nothing is near h_r until the test creates the ``go`` file. Then:

- ``heavy``, submitted first (the higher priority under FIFO: the queue order,
  ``controller/policy/ranks.py``), runs three busy loops: its share is all of node-a's CPU,
  1.0 (capped), so GPU 0 and the CPU are at 1.0, over h_r;
- ``light``, submitted second, spends about 4 ms of CPU every 0.1 s: at most about 0.05 core,
  a share of 0.5 at most; at least 0.1 (0.01 core) unless a cycle of it took 0.45 s.

Both resource types and GPU 0 are hot, so the ideal virtual task is the largest user, ``heavy``
(1.0, 1.0), which distance alone would name. While a shared GPU is overloaded only the
lowest-priority p_s of its tasks are candidates: the agent names ``light``. Taking its share
(0.1 to 0.5) off leaves node-a at 0.9 or less, so it asks for nothing more; the share fits
the idle node-b, so FIFO (through ``controller/policy/overload.py``) migrates it, and its
resumed attempt ends at once. node-b joins once both jobs run on node-a, before ``go``.

Each job sees ``go`` at its own next poll (up to 0.5 s apart), so node-a asks at its third
overloaded sample in a row (``--overload-samples 3``, a sample every 0.5 s): by then both have
run through the whole sample, and ``light`` is not caught with a share near 0 (taking that off
would leave GPU 0 over h_r, and the rule would name ``heavy`` too).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from polling import wait_until

from mlsched.localcluster import ClusterTiming
from mlsched.model import IterationStop, JobSpec, JobState

pytestmark = pytest.mark.integration

CPU_CAPACITY = 0.1  # cores: one busy loop is all of it
TIMING = ClusterTiming(  # test_overload.py's: the heartbeat timeout at the self-fencing delay
    lease_s=600.0,
    cycle_s=0.3,
    heartbeat_interval_s=0.5,
    heartbeat_timeout_s=30.0,
    suspend_grace_s=15.0,
)

JOB = r"""#!/bin/sh
# $1: the go file; $2: the job's name. Once the go file exists, heavy runs three busy loops,
# light spends about 4 ms of CPU every 0.1 s. A resumed attempt (moved) ends at once.
[ "$MLSCHED_RESUME" = 1 ] && exit 0
while [ ! -e "$1" ]; do sleep 0.5; done
if [ "$2" = heavy ]; then
    for loop in 1 2 3; do (while :; do :; done) & done
    while :; do sleep 0.5; done
fi
while :; do
    i=0
    while [ "$i" -lt 5000 ]; do i=$((i + 1)); done
    sleep 0.1
done
"""


def job_spec(script: Path, go: Path, name: str) -> JobSpec:
    return JobSpec(
        name=name,
        command=("/bin/sh", str(script), str(go), name),
        gpus=1,
        stopping=IterationStop(1_000),
        working_dir=str(script.parent),
        suspend_grace_s=1.0,  # no trainer to checkpoint: SIGTERM soon
    )


def agent_log(cluster, node_id: str) -> str:
    log = cluster.root / f"{node_id}.log"
    return log.read_text(errors="replace") if log.exists() else ""


def test_the_agent_moves_the_lower_priority_task_off_a_shared_gpu(
    make_cluster, wait_job, ended, tmp_path
):
    script = tmp_path / "job.sh"
    script.write_text(JOB)
    go = tmp_path / "go"
    cluster = make_cluster(TIMING, nodes={}, policy="fifo")
    overload_flags = ["--overload-samples", "3", "--migration-cooldown", "600"]
    cluster.start_agent(
        "node-a",
        gpus=1,
        extra=["--gpu-slices", "2", "--cpu-capacity", str(CPU_CAPACITY), *overload_flags],
    )
    cluster.wait_for_nodes({"node-a"})
    with cluster.client("alice") as client:
        node_a = next(n for n, _ in client.nodes() if n.id == "node-a")
        assert [g.index for g in node_a.gpus] == [0, 1]  # 2 slots of one GPU
        heavy = client.submit(job_spec(script, go, "heavy"))
        light = client.submit(job_spec(script, go, "light"))
        for job in (heavy, light):
            wait_job(cluster, client, job.id, lambda j: j.state is JobState.RUNNING)
        slots = {j.id: client.get(j.id)[1][0] for j in (heavy, light)}
        assert {t.node_id for t in slots.values()} == {"node-a"}
        assert sorted(i for t in slots.values() for i in t.gpu_indices) == [0, 1]
        # the priorities FIFO sent have reached the agent (the p_s rule ranks by them)
        wait_until(
            lambda: all(
                f"task {j.id}/0/1 priority" in agent_log(cluster, "node-a") for j in (heavy, light)
            ),
            timeout=30.0,
        )
        cluster.start_agent("node-b", gpus=1, extra=overload_flags)
        cluster.wait_for_nodes({"node-b"})

        go.touch()  # heavy burns, light ticks: the shared GPU 0 goes over h_r
        requested = cluster.wait_for_event(lambda e: e.kind == "migration_requested", 60.0)
        done = wait_job(cluster, client, light.id, ended, timeout_s=60)
        heavy_now, heavy_tasks = client.get(heavy.id)
        events = list(client.events(after_seq=0))
        client.cancel(heavy.id)

    log = agent_log(cluster, "node-a")
    assert "has no priority from the controller" not in log
    # the agent named the lower-priority task on the overloaded shared GPU, and only it
    assert (requested.job_id, requested.node_id) == (light.id, "node-a"), requested.message
    assert "GPU 0" in requested.message and "p_s" in requested.message, requested.message
    assert {e.job_id for e in events if e.kind == "migration_requested"} == {light.id}
    # node-b took it: suspended on node-a, resumed and completed on node-b
    assert done.state is JobState.COMPLETED, done.message
    [resume] = done.resumes
    assert resume.from_nodes == ("node-a",) and resume.to_nodes == ("node-b",)
    assert done.node_history == ["node-a", "node-b"]
    ordered = [e for e in events if e.kind == "migration_ordered" and e.job_id == light.id]
    assert len(ordered) == 1 and "overloaded node-a" in ordered[0].message, ordered
    # heavy, the CPU's user, stayed
    assert heavy_now.state is JobState.RUNNING
    assert [t.node_id for t in heavy_tasks] == ["node-a"]
