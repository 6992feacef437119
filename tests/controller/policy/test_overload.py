"""Agents' migration requests answered by MLFS' rules for every policy (controller/policy/
overload.py). Resource types (gpu, cpu, memory, bandwidth), h_r = 0.9; every host choice is
worked out by hand in the comments (MLFS §3.3.2: the ideal virtual host is the least
utilisation per type over the underloaded servers with free GPUs, traffic share 0, q 0)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy import available_policies, make_policy
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, NodeView, Renew
from controller.policy.base import Suspend as SuspendOrder
from controller.policy.fifo import FifoPolicy
from controller.policy.overload import (
    NO_HOST,
    AnswersOverloadRequests,
    answer_requests,
    overload_moves,
    requested,
)
from mlsched.model import IterationStop, JobSpec, JobState

NOW = 1000.0
TYPES = ("gpu", "cpu", "memory", "bandwidth")
BASELINES = ("fifo", "fifo-lease", "srtf", "tiresias", "edf", "themis", "chronus", "unisched")


def running(job_id: str, node: str, gpu: int, usage: dict, asked: bool = False, **kw) -> JobView:
    fields: dict = dict(
        id=job_id,
        user="u",
        spec=JobSpec(job_id, ("train",), 1, IterationStop(1000)),
        state=JobState.RUNNING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1,
        suspensions=0,
        lease_expires_at=NOW + 200.0,
        placement=(TaskPlacement(0, node, (gpu,)),),
        running_since=10.0,
        training_since=20.0,
        attained_gpu_s=900.0,
        estimated_remaining_s=3600.0,
        migration_requested=asked,
        resource_usage=usage,
    )
    fields.update(kw)
    return JobView(**fields)


def node(node_id: str, free: tuple[int, ...], util: tuple[float, ...]) -> NodeView:
    return NodeView(node_id, (0, 1), free, dict(zip(TYPES, util, strict=True)), {})


# node-a: memory 0.95 > h_r. "mover" (asked for by the agent) holds 0.6 of it, "stayer" 0.35.
MOVER = running("mover", "node-a", 0, {"gpu": 0.25, "cpu": 0.05, "memory": 0.6}, asked=True)
STAYER = running("stayer", "node-a", 1, {"gpu": 0.25, "cpu": 0.15, "memory": 0.35})


def snapshot(b_util=(0.0, 0.5, 0.2, 0.0), c_util=(0.0, 0.1, 0.1, 0.0), **kw) -> ClusterSnapshot:
    fields: dict = dict(
        now=NOW,
        nodes=(
            node("node-a", (), (0.5, 0.2, 0.95, 0.0)),
            node("node-b", (0, 1), b_util),
            node("node-c", (0, 1), c_util),
        ),
        queued=(),
        active=(MOVER, STAYER),
    )
    fields.update(kw)
    return ClusterSnapshot(**fields)


def test_the_requested_task_goes_to_the_euclidean_host_with_its_lease_left():
    # U_V over node-b, node-c = (0, 0.1, 0.1, 0 | traffic 0, q 0). Mover's demand (0.25, 0.05,
    # 0.6, 0) fits both (memory 0.8 and 0.7 <= 0.9). node-c is the ideal itself (distance 0),
    # node-b is sqrt(0.4^2 + 0.1^2) = 0.41 away: node-c, its GPU 0 (ties by index).
    moves = overload_moves(snapshot())
    assert moves.suspend == ()
    (move,) = moves.migrate
    assert move.job_id == "mover"
    assert move.placement == (TaskPlacement(0, "node-c", (0,)),)
    assert move.lease_s == pytest.approx(200.0)  # what is left of its lease
    assert "overloaded node-a" in move.reason


def test_gpus_the_policy_launches_on_are_not_offered_and_a_renewal_gives_the_lease():
    # the policy starts a job on both of node-c's GPUs: node-b is the only host left
    launch = Launch("new", (TaskPlacement(0, "node-c", (0,)), TaskPlacement(1, "node-c", (1,))), 60)
    decision = Decision(launch=(launch,), renew=(Renew("mover", 300.0), Renew("stayer", 300.0)))
    answered = answer_requests(snapshot(), decision)
    (move,) = answered.migrate
    assert move.placement == (TaskPlacement(0, "node-b", (0,)),) and move.lease_s == 300.0
    assert answered.launch == (launch,)
    assert answered.renew == (Renew("stayer", 300.0),)  # the moved job is not also renewed


def test_no_host_within_h_r_sends_the_job_back_to_the_queue():
    # memory 0.5 + 0.6 = 1.1 > 0.9 on both candidates
    moves = overload_moves(snapshot(b_util=(0, 0, 0.5, 0), c_util=(0, 0, 0.5, 0)))
    assert moves.migrate == () and moves.suspend == (SuspendOrder("mover", NO_HOST),)


def test_without_a_request_nothing_moves_even_on_an_overloaded_server():
    calm = snapshot(active=(running("mover", "node-a", 0, MOVER.resource_usage), STAYER))
    decision = Decision(renew=(Renew("stayer", 300.0),))
    assert requested(calm) == []
    assert answer_requests(calm, decision) is decision


def test_a_job_the_policy_suspends_is_left_to_it():
    decision = Decision(suspend=(SuspendOrder("mover", "the policy's own"),))
    assert requested(snapshot(), decision) == []
    assert answer_requests(snapshot(), decision) is decision


def test_a_job_whose_expired_lease_the_policy_does_not_renew_is_left_to_it():
    expired = replace(MOVER, lease_expires_at=NOW)  # the controller suspends it
    snap = snapshot(active=(expired, STAYER))
    decision = Decision(renew=(Renew("stayer", 300.0),))
    assert requested(snap, decision) == []
    assert answer_requests(snap, decision) is decision


def test_a_requested_job_on_a_server_that_looks_fine_moves_whole():
    # the agent measured more recently than the snapshot: node-a reads 0.5 here
    snap = snapshot()
    cool = node("node-a", (), (0.5, 0.2, 0.5, 0.0))
    (move,) = overload_moves(replace(snap, nodes=(cool, *snap.nodes[1:]))).migrate
    assert move.job_id == "mover" and move.placement == (TaskPlacement(0, "node-c", (0,)),)


def test_pure_same_answer_twice_and_the_snapshot_untouched():
    snap = snapshot()
    before = repr(snap)
    assert overload_moves(snap) == overload_moves(snap)
    assert repr(snap) == before


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_answers_a_request_by_the_mlfs_rules(name):
    policy = make_policy(name)
    assert isinstance(policy, AnswersOverloadRequests)
    decision = policy.decide(snapshot())
    moved = [m for m in decision.migrate if m.job_id == "mover"]
    assert [m.placement for m in moved] == [(TaskPlacement(0, "node-c", (0,)),)], decision
    assert "mover" not in {r.job_id for r in decision.renew}
    assert math.isfinite(moved[0].lease_s) and moved[0].lease_s > 0


def test_policies_that_answer_requests_themselves_are_not_wrapped_and_kinds_are_kept():
    assert not isinstance(make_policy("mlf-h"), AnswersOverloadRequests)
    fifo = make_policy("fifo")
    assert isinstance(fifo, FifoPolicy) and fifo.name == "fifo" and not fifo.time_slicing
    assert set(BASELINES) <= set(available_policies())
