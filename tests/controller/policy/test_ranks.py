"""The priorities policies give the node agents (controller/policy/ranks.py): the
policy-neutral queue order for the baselines, Eq. 6 for the MLFS policies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, NodeView, Suspend
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.ranks import leaving, queue_priorities, with_queue_priorities
from mlsched.model import IterationStop, JobSpec, JobState

NOW = 1000.0
TYPES = ("gpu", "cpu", "memory", "bandwidth")


def job(job_id: str, since: float, node: str | None = None, gpu: int = 0, **kw) -> JobView:
    fields: dict = dict(
        id=job_id,
        user="u",
        spec=JobSpec(job_id, ("train",), 1, IterationStop(1000)),
        state=JobState.RUNNING if node else JobState.PENDING,
        submit_time=since,
        queued_since=since,
        attempt=1 if node else 0,
        suspensions=0,
    )
    if node:
        fields.update(
            lease_expires_at=NOW + 100.0,
            placement=(TaskPlacement(0, node, (gpu,)),),
            running_since=since + 5.0,
            training_since=since + 6.0,
        )
    fields.update(kw)
    return JobView(**fields)


def cluster(active, queued, util=(0.2, 0.2, 0.2, 0.0)) -> ClusterSnapshot:
    """n1 (GPUs 0-2, measured ``util``) holds the active jobs; n2 (one GPU) is idle."""
    held = {p.gpu_indices[0] for v in active for p in v.placement}
    free = tuple(g for g in (0, 1, 2) if g not in held)
    nodes = (
        NodeView("n1", (0, 1, 2), free, dict(zip(TYPES, util, strict=True)), {}),
        NodeView("n2", (0,), (0,), dict.fromkeys(TYPES, 0.0), {}),
    )
    return ClusterSnapshot(NOW, nodes, tuple(queued), tuple(active))


def test_fifo_tells_the_agents_the_queue_order_at_launch():
    # a joined the queue at 10, b at 20 (both running); c (30) and d (40) are launched on the
    # free GPUs: -30 > -40, earlier first. The running jobs got theirs at their own launch.
    snap = cluster(
        [job("a", 10.0, "n1", 0), job("b", 20.0, "n1", 1)], [job("c", 30.0), job("d", 40.0)]
    )
    decision = make_policy("fifo").decide(snap)
    assert sorted(item.job_id for item in decision.launch) == ["c", "d"]
    assert decision.priorities == {"c": -30.0, "d": -40.0}
    # nothing launched: nothing to tell
    assert make_policy("fifo").decide(cluster([job("a", 10.0, "n1", 0)], [])).priorities == {}


def test_jobs_leaving_their_gpus_and_a_policys_own_priorities_winning():
    snap = cluster([job("a", 10.0, "n1", 0), job("b", 20.0, "n1", 1)], [])
    leaving_b = Decision(suspend=(Suspend("b", "test"),))
    assert leaving(snap, leaving_b) == {"b"}
    own = Decision(priorities={"b": 7.0})
    assert with_queue_priorities(snap, own) is own


@pytest.mark.parametrize("name", ["srtf", "tiresias", "unisched"])
def test_every_baseline_gets_the_neutral_rule(name):
    snap = cluster([job("a", 10.0, "n1", 0)], [job("q", 50.0)])
    decision = make_policy(name).decide(snap)
    assert decision.priorities == {
        v: -50.0 for v in ("q",) if v in {x.job_id for x in decision.launch}
    }
    assert queue_priorities(snap, replace(decision, launch=(Launch("q", (), 1.0),))) == {"q": -50.0}


def test_mlf_h_sends_eq6_for_jobs_on_an_overloaded_server_only():
    # n1's memory at 0.95 > h_r: both running jobs are involved (a, the closer to the ideal
    # virtual task, moves to n2); their values are the policy's own Eq. 6 job priorities
    # (MLFS §3.3.1). The lower urgency of "a" gives it the lower one.
    a = job("a", 10.0, "n1", 0, resource_usage={"memory": 0.5})
    a = replace(a, spec=replace(a.spec, mlfs=replace(a.spec.mlfs, urgency=0.2)))
    b = job("b", 20.0, "n1", 1, resource_usage={"memory": 0.45})
    hot = cluster([a, b], [], util=(0.6, 0.2, 0.95, 0.0))
    policy = MlfhPolicy()
    expected = policy.job_priorities(hot)
    decision = policy.decide(hot)
    assert [m.job_id for m in decision.migrate] == ["a"]
    assert set(decision.priorities) == {"a", "b"}
    assert decision.priorities == pytest.approx({k: expected[k] for k in ("a", "b")})
    assert decision.priorities["a"] < decision.priorities["b"]
    # a calm server and nothing to launch: nothing involved, nothing to tell
    calm = cluster([a, b], [], util=(0.6, 0.2, 0.5, 0.0))
    assert MlfhPolicy().decide(calm).priorities == {}


def test_mlf_rl_sends_the_same_eq6_values():
    a = job("a", 10.0, "n1", 0, resource_usage={"memory": 0.5})
    b = job("b", 20.0, "n1", 1, resource_usage={"memory": 0.45})
    hot = cluster([a, b], [job("c", 30.0)], util=(0.6, 0.2, 0.95, 0.0))
    expected = MlfhPolicy().job_priorities(hot)
    decision = make_policy("mlfs").decide(hot)
    assert decision.priorities
    for job_id, value in decision.priorities.items():
        assert value == pytest.approx(expected[job_id])
