"""The simulator's resize costs by mechanism (simulator/resize_cost.py), hand-computed; and
SLAQ's predicted pause by the same mechanisms (issue 14)."""

from __future__ import annotations

import dataclasses

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    JobView,
    Launch,
    NodeView,
    Renew,
    Resize,
)
from controller.policy.slaq import SlaqPolicy
from controller.policy.slaq_resize import in_place_room
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, SpeedSample
from simulator.elastic import ElasticJobModel
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.resize_cost import (
    BATCH,
    REGROUP,
    RENEW,
    SUSPEND_RESUME,
    ResizeCosts,
    mechanism,
)
from simulator.types import ElasticProfile, TraceJob

ONE = (TaskPlacement(0, "n000", (0,)),)
TWO = (*ONE, TaskPlacement(1, "n000", (1,)))
SPLIT = (*ONE, TaskPlacement(1, "n001", (0,)))


def test_the_mechanism_follows_the_placement_and_the_batch():
    measured = ResizeCosts(regroup_s=2.0)
    assert mechanism(ONE, ONE, False, measured) == RENEW
    assert mechanism(ONE, ONE, True, measured) == BATCH
    assert mechanism(ONE, TWO, False, measured) == REGROUP  # one node before and after
    assert mechanism(TWO, ONE, False, measured) == REGROUP  # a shrink on it too
    assert mechanism(ONE, SPLIT, False, measured) == SUSPEND_RESUME  # a second node
    assert mechanism(ONE, TWO, False, ResizeCosts()) == SUSPEND_RESUME  # no regroup measured
    assert mechanism(ONE, SPLIT, False, ResizeCosts(regroup_s=2.0, regroup_any=True)) == REGROUP


def test_negative_costs_are_refused():
    with pytest.raises(ValueError, match="regroup_s"):
        ResizeCosts(regroup_s=-1.0)
    with pytest.raises(ValueError, match="batch_s"):
        ResizeCosts(batch_s=-0.5)


class _Grow:
    """Launch on one GPU (leases of 100 s), move to ``target`` at the first boundary, then
    renew."""

    name = "grow"

    def __init__(self, target):
        self.target = target

    def decide(self, snapshot):
        if snapshot.queued:
            return Decision(launch=(Launch("a", ONE, 100.0),))
        if snapshot.active and snapshot.active[0].placement == ONE:
            return Decision(resize=(Resize("a", self.target, 100.0),))
        return Decision(renew=(Renew("a", 100.0),))


def _run(target, costs):
    profile = ElasticProfile(1, 2, (1.0, 2.0), ((0.0, 1.0), (1.0, 0.0)))
    job = TraceJob("a", "", 0.0, 1000.0, 1, iterations=1000, elastic=profile)
    config = SimConfig(lease_s=100.0, resize=costs)
    result = Simulation([job], _Grow(target), ClusterShape(2, 2), ElasticJobModel(), config).run()
    return result.records[0]


def test_a_grow_on_its_node_regroups_in_place_and_one_across_nodes_restarts():
    # 100 s on 1 GPU (100 of 1000 work s), then the pause, then 900 work s at speed 2 (450 s)
    record = _run(TWO, ResizeCosts(regroup_s=2.0))
    assert record.resizes == 1
    assert record.end_s == pytest.approx(100.0 + 2.0 + 450.0)
    # the same grow onto a second node: suspend 4 s + resume 20 s + 0.36 s x 2 GPUs
    record = _run(SPLIT, ResizeCosts(regroup_s=2.0))
    assert record.end_s == pytest.approx(100.0 + 4.0 + 20.0 + 2 * 5 / 14 + 450.0)
    # without a measured regroup the same-node grow restarts as well
    assert _run(TWO, ResizeCosts()).end_s == pytest.approx(record.end_s)


def _view(job_id: str, gpus: int, node: str = "n0", t_sr: float | None = None):
    """A running elastic job (1-4 GPUs) at its lease boundary on GPUs 0.. of ``node``."""
    spec = JobSpec(job_id, ("x",), 1, IterationStop(10**6), elastic=ElasticSpec(1, 4))
    return dataclasses.replace(
        _base(job_id, spec),
        state=JobState.RUNNING,
        placement=(TaskPlacement(0, node, tuple(range(gpus))),),
        sr_overhead_s=t_sr,
        lease_expires_at=0.0,
    )


def _base(job_id, spec):
    return JobView(
        job_id,
        "",
        spec,
        JobState.PENDING,
        0.0,
        0.0,
        0,
        0,
        iteration=10,
        metric_history=((0, 100.0), (10, 90.0)),
        speed_samples=(SpeedSample(1, 1, 1.0, 1.0, 1),),
    )


def test_in_place_room_is_own_plus_free_gpus_of_a_one_node_job():
    a, b = _view("a", 2, "n0"), _view("b", 1, "n1")  # b on n1's GPU 0
    split = dataclasses.replace(
        _view("c", 1, "n1"),
        placement=(TaskPlacement(0, "n1", (3,)), TaskPlacement(1, "n2", (0,))),
    )
    nodes = (
        NodeView("n0", (0, 1, 2, 3), (2, 3)),
        NodeView("n1", (0, 1, 2, 3), (2,)),
        NodeView("n2", (0, 1, 2, 3), (1, 2, 3)),
    )
    snapshot = ClusterSnapshot(now=1.0, nodes=nodes, active=(a, b, split), queued=())
    # a: its 2 + n0's 2 free; b: its 1 + n1's 1 free (GPU 1 holds another job); c spans two
    # nodes: no regroup
    assert in_place_room(snapshot) == {"a": 4, "b": 2}


def test_slaq_predicts_the_pause_of_the_mechanism_that_would_resize():
    policy = SlaqPolicy(pause_s=25.0, regroup_s=3.0)
    job = _view("a", 2, t_sr=30.0)
    policy._room = {"a": 3}
    assert policy.pause(job, 3) == 3.0  # fits its node: a regroup
    assert policy.pause(job, 1) == 3.0  # a shrink stays on it
    assert policy.pause(job, 4) == 30.0  # past the room: a restart at its measured t_sr
    assert SlaqPolicy(pause_s=25.0).pause(job, 3) == 30.0  # no regroup: a restart
    assert SlaqPolicy(pause_s=25.0).pause(_view("b", 2), 3) == 25.0  # t_sr unmeasured
    anywhere = SlaqPolicy(regroup_s=3.0, regroup_any=True)
    assert anywhere.pause(job, 4) == 3.0
