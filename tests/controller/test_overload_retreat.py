"""No overload ping-pong (controller/policy/retreat.py, controller/retreats.py): a job that an
agent's overload request sent back to the queue, for want of another host, is not resumed on
the node it left while that node's utilisation plus the job's measured load exceeds h_r = 0.9
(MLFS §3.3.2). Through the real controller core (``cluster`` fixture: store, scheduler,
snapshot) and the registry's policies; node loads as an agent reports them (``NodeLoad``)."""

from __future__ import annotations

import pytest

from controller.commands import LaunchCommand
from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, JobView, Launch, NodeView
from controller.policy.retreat import RETREAT_REASONS, keep_off
from mlsched.model import (
    IterationStop,
    JobSpec,
    JobState,
    MigrationRequest,
    NodeLoad,
    OverloadRetreat,
    TaskState,
    TaskUsage,
)

# The job's own load per task, as node-a's agent measured it while it ran there.
DEMAND = {"gpu": 0.5, "cpu": 0.68, "memory": 0.1, "bandwidth": 0.0}


def node_load(cpu: float, *tasks: TaskUsage) -> NodeLoad:
    gpu = 0.5 * len(tasks)  # one of the two GPUs per task
    return NodeLoad(
        utilization={"gpu": gpu, "cpu": cpu, "memory": 0.2, "bandwidth": 0.0},
        gpu_utilization={0: 0.9 if tasks else 0.0, 1: 0.0},
        tasks=tasks,
        cpu_cores=2.0,
        memory_bytes=8 << 30,
    )


def sent_back(c, policy: str, measured: bool = True):
    """One job running on node-a (2 GPUs), its agent asks to move it (cpu 0.98 > 0.9), the
    policy finds no other host and sends it back to the queue (MLF-RL: leaves it there); the
    job checkpoints and is SUSPENDED."""
    c.scheduler.policy = make_policy(policy)
    c.add_node("node-a", 2)
    job = c.submit(gpus=1)
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)
    assert job.state is JobState.RUNNING
    if measured:
        usage = TaskUsage(job.id, 0, 1, dict(DEMAND), 0, 0.9)
        c.events.heartbeat("node-a", load=node_load(0.98, usage))
    asked = MigrationRequest(job.id, 0, 1, {"cpu": 0.98}, {"cpu": 0.68}, "cpu 0.98 > 0.90")
    assert c.events.migration_requested("node-a", asked)
    c.cycle()
    assert job.state is JobState.SUSPENDING
    assert job.message.endswith(tuple(RETREAT_REASONS))
    c.report(job.id, 0, TaskState.SUSPENDED, checkpoint_step=40)
    assert job.state is JobState.SUSPENDED
    c.sink.clear()
    return job


def launches(c) -> list[tuple[str, str]]:
    return [(node, cmd.task.job_id) for node, cmd in c.sink.of(LaunchCommand)]


@pytest.mark.parametrize("policy", ["fifo-lease", "mlf-h", "mlfs"])
def test_a_job_sent_back_for_overload_is_not_resumed_on_the_still_hot_node(cluster, policy):
    c = cluster
    job = sent_back(c, policy)
    # the controller remembered where it left and its load there, persisted
    expected = OverloadRetreat(("node-a",), {"node-a": DEMAND}, c.clock.now())
    assert job.overload_retreat == expected
    assert c.store.load().jobs[job.id].overload_retreat == expected
    # node-a without the job: cpu 0.5; 0.5 + 0.68 = 1.18 > 0.9. Held, past any time hold too.
    for _ in range(3):
        c.advance(40.0, heartbeat=True)
        c.events.heartbeat("node-a", load=node_load(0.5))
        c.cycle()
        assert job.state is JobState.SUSPENDED and launches(c) == []
    assert c.state.busy_gpus() == {}  # no GPU claimed for it


@pytest.mark.parametrize("policy", ["fifo-lease", "mlf-h", "mlfs"])
def test_it_is_resumed_there_once_the_load_plus_its_demand_fits(cluster, policy):
    c = cluster
    job = sent_back(c, policy)
    # cpu 0.22 + 0.68 = 0.90 <= 0.9; gpu 0 + 0.5, memory 0.2 + 0.1, bandwidth 0: fits
    c.advance(5.0, heartbeat=True)
    c.events.heartbeat("node-a", load=node_load(0.22))
    c.cycle()
    assert job.state is JobState.STARTING and launches(c) == [("node-a", job.id)]
    assert job.overload_retreat is None  # a new attempt: nothing kept from it
    assert c.store.load().jobs[job.id].overload_retreat is None


@pytest.mark.parametrize("policy", ["fifo-lease", "mlf-h"])
def test_it_may_launch_on_another_node_at_once(cluster, policy):
    c = cluster
    job = sent_back(c, policy)
    c.add_node("node-b", 2)  # joins after the job was sent back; nothing measured there yet
    c.events.heartbeat("node-a", load=node_load(0.5))  # still too hot for it (1.18)
    c.cycle()
    assert launches(c) == [("node-b", job.id)]
    assert job.state is JobState.STARTING


def test_without_a_measured_load_it_is_held_off_the_node_for_the_hold_time(cluster):
    c = cluster
    job = sent_back(c, "fifo-lease", measured=False)  # the agent sent no load report
    left = c.clock.now()
    assert job.overload_retreat == OverloadRetreat(("node-a",), {}, left)
    c.advance(59.0, heartbeat=True)
    c.cycle()
    assert job.state is JobState.SUSPENDED and launches(c) == []
    c.advance(1.0, heartbeat=True)  # 60 s after it left (HOLD_S)
    c.cycle()
    assert launches(c) == [("node-a", job.id)]


# --- the filter on its own: what a held job leaves to the others ------------------------------


def queued(job_id: str, since: float, retreat: OverloadRetreat | None = None) -> JobView:
    return JobView(
        id=job_id,
        user="u",
        spec=JobSpec(job_id, ("train",), 1, IterationStop(1000)),
        state=JobState.SUSPENDED if retreat else JobState.PENDING,
        submit_time=0.0,
        queued_since=since,
        attempt=1 if retreat else 0,
        suspensions=1 if retreat else 0,
        overload_retreat=retreat,
    )


def one_gpu_node(cpu: float) -> NodeView:
    util = {"gpu": 0.0, "cpu": cpu, "memory": 0.2, "bandwidth": 0.0}
    return NodeView("node-a", (0,), (0,), util, {})


def test_the_gpu_a_held_job_would_have_taken_goes_to_the_next_job():
    # FIFO would start "back" (first in the queue) on node-a's only GPU; 0.5 + 0.68 > 0.9, so
    # it is held and FIFO decides again: "next" gets GPU 0, one launch, "back" stays queued.
    back = queued("back", 10.0, OverloadRetreat(("node-a",), {"node-a": DEMAND}, 0.0))
    snap = ClusterSnapshot(100.0, (one_gpu_node(0.5),), (back, queued("next", 20.0)), ())
    decision = make_policy("fifo").decide(snap)
    assert decision.launch == (Launch("next", (TaskPlacement(0, "node-a", (0,)),), 300.0),)
    assert set(decision.priorities) == {"next"}


def test_a_policy_that_never_launches_a_marked_job_is_decided_once():
    calls = []

    def decide(snapshot: ClusterSnapshot):
        calls.append(snapshot)
        return make_policy("fifo").decide(snapshot)

    snap = ClusterSnapshot(100.0, (one_gpu_node(0.5),), (queued("next", 20.0),), ())
    decision = keep_off(decide, snap, 0.9)
    assert len(calls) == 1 and [item.job_id for item in decision.launch] == ["next"]
