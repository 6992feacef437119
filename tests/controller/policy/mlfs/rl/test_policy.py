"""MLF-RL's decision cycle and policy (controller/policy/mlfs/rl/{cycle,policy}.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, Decision, JobView, NodeView, Stop
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.mlfs.rl.cycle import MlfhChooser, Step, plan
from controller.policy.mlfs.rl.features import CANDIDATE_FEATURES
from controller.policy.mlfs.rl.network import ModelError, PointerNet
from controller.policy.mlfs.rl.policy import DEFAULT_MAX_CANDIDATES, MlfRlPolicy
from controller.policy.ranks import Eq6Priorities
from mlsched.model import IterationStop, JobSpec, JobState, MlfsSpec

CONFIG = MlfsConfig()


def spec(gpus: int, urgency: float = 1.0) -> JobSpec:
    return JobSpec("j", ("python", "t.py"), gpus, IterationStop(10), mlfs=MlfsSpec(urgency))


def running(
    job_id: str,
    node: str,
    gpus: tuple[int, ...],
    cpu: float,
    expires: float = 1e9,
    asked: bool = False,
) -> JobView:
    return JobView(
        id=job_id,
        user="u",
        spec=spec(len(gpus)),
        state=JobState.RUNNING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1,
        suspensions=0,
        iteration=5,
        lease_expires_at=expires,
        placement=tuple(TaskPlacement(r, node, (g,)) for r, g in enumerate(gpus)),
        running_since=0.0,
        estimated_remaining_s=600.0,
        resource_usage={"gpu": 0.1 * len(gpus), "cpu": cpu},
        migration_requested=asked,
    )


def queued(job_id: str, gpus: int = 1, urgency: float = 1.0, since: float = 0.0) -> JobView:
    return JobView(
        id=job_id,
        user="u",
        spec=spec(gpus, urgency),
        state=JobState.PENDING,
        submit_time=since,
        queued_since=since,
        attempt=0,
        suspensions=0,
        estimated_remaining_s=1200.0,
    )


def load(**shares: float) -> dict[str, float]:
    return {r: shares.get(r, 0.0) for r in ("gpu", "cpu", "memory", "bandwidth")}


def overloaded(asked: bool = False) -> ClusterSnapshot:
    """Node a (4 GPUs) is above h_r on CPU (0.95) with three jobs; b and c are idle."""
    active = (
        running("r0", "a", (0, 1), cpu=0.5, expires=100.0, asked=asked),
        running("r1", "a", (2,), cpu=0.3),
        running("r2", "a", (3,), cpu=0.15, expires=100.0),
    )
    nodes = (
        NodeView("a", (0, 1, 2, 3), (), {"gpu": 0.4, "cpu": 0.95, "memory": 0.2, "bandwidth": 0.1}),
        NodeView(
            "b", (0, 1, 2, 3), (0, 1, 2, 3), {"gpu": 0, "cpu": 0.1, "memory": 0, "bandwidth": 0}
        ),
        NodeView("c", (0, 1), (0, 1), {"gpu": 0, "cpu": 0.3, "memory": 0, "bandwidth": 0}),
    )
    return ClusterSnapshot(
        now=100.0,
        nodes=nodes,
        queued=(queued("q0", 2, urgency=3.0), queued("q1", 1), queued("q2", 4)),
        active=active,
        default_lease_s=300.0,
    )


def same(a: Decision, b: Decision) -> None:
    """Equal orders (suspension reasons may differ)."""
    assert a.launch == b.launch
    assert a.renew == b.renew
    assert a.migrate == b.migrate
    assert a.stop == b.stop
    assert [s.job_id for s in a.suspend] == [s.job_id for s in b.suspend]


class Always:
    """A chooser that always answers ``pick(step)``."""

    def __init__(self, pick: Callable[[Step], int]) -> None:
        self.pick = pick
        self.steps: list[Step] = []

    def choose(self, step: Step) -> int:
        self.steps.append(step)
        return self.pick(step)


@pytest.fixture(scope="module")
def random_net_policy() -> MlfRlPolicy:
    torch.manual_seed(3)
    return MlfRlPolicy(network=PointerNet(hidden=16))


@pytest.mark.parametrize("seed", range(40))
def test_mlfh_chooser_reproduces_mlfh(seed: int, check_policy_properties) -> None:
    # on the shared random snapshots (tests/controller/policy/conftest.py)
    def both(snap: ClusterSnapshot) -> Decision:
        mine = plan(snap, MlfhChooser(), CONFIG)
        same(mine, MlfhPolicy().decide(snap))
        return mine

    check_policy_properties(seed, both, lambda *_: False)


@pytest.mark.parametrize("ratio", [1.0, 10.0])
@pytest.mark.parametrize("seed", range(20))
def test_mlfh_chooser_reproduces_preempting_mlfh(
    seed: int, ratio: float, check_policy_properties
) -> None:
    # the same lease-boundary preemption (controller/policy/mlfs/preempt.py) in both cycles
    def both(snap: ClusterSnapshot) -> Decision:
        mine = plan(snap, MlfhChooser(), CONFIG, preempt_ratio=ratio)
        same(mine, MlfhPolicy(preempt_ratio=ratio).decide(snap))
        return mine

    check_policy_properties(seed, both, lambda *_: True)


def test_mlf_rl_preempts_an_expired_lower_priority_job() -> None:
    # Node a's two GPUs are held by r (lease expired at 100). Eq. 6 ranks the new, urgent q
    # above r: P_q = 2.137 > P_r = 1.265 (MLF-H's own figures), so q displaces r when
    # P_r * ratio < P_q: with ratio 1.5 (1.90) it does, with 2 (2.53) it does not.
    r = running("r", "a", (0, 1), cpu=0.1, expires=100.0)
    nodes = (NodeView("a", (0, 1), (), load(gpu=0.2, cpu=0.1)),)
    snap = ClusterSnapshot(100.0, nodes, (queued("q", 2, urgency=10.0),), (r,))
    assert MlfhPolicy().job_priorities(snap) == pytest.approx({"q": 2.1368, "r": 1.265}, abs=1e-4)
    decision = MlfRlPolicy(network=PointerNet(hidden=8), preempt_ratio=1.5).decide(snap)
    assert [s.job_id for s in decision.suspend] == ["r"]
    assert "q" in decision.suspend[0].reason
    assert decision.renew == () and decision.launch == ()  # q starts once r's GPUs are back
    for kept in (
        MlfRlPolicy(network=PointerNet(hidden=8), preempt_ratio=2.0).decide(snap),
        MlfRlPolicy(network=PointerNet(hidden=8)).decide(snap),  # the default: no preemption
    ):
        assert kept.suspend == () and [x.job_id for x in kept.renew] == ["r"]
    with pytest.raises(ValueError):
        MlfRlPolicy(network=PointerNet(hidden=8), preempt_ratio=0.5)


@pytest.mark.parametrize("asked", [False, True])
def test_mlfh_chooser_reproduces_mlfh_under_overload(asked: bool) -> None:
    snap = overloaded(asked)
    mine, theirs = plan(snap, MlfhChooser(), CONFIG), MlfhPolicy().decide(snap)
    same(mine, theirs)
    assert mine.migrate, "a job moves off the overloaded server"
    moved = {m.job_id for m in mine.migrate}
    assert not moved & {r.job_id for r in mine.renew}, "a mover's lease is answered by its move"


@pytest.mark.parametrize("seed", range(25))
def test_network_decisions_are_valid(
    seed: int, random_net_policy: MlfRlPolicy, check_policy_properties
) -> None:
    # launches on free GPUs only, no GPU twice, every expired lease answered, deterministic;
    # MLF-RL preempts nobody (no Suspend on these snapshots, which have no overload)
    check_policy_properties(seed, random_net_policy.decide, lambda *_: False)


def test_network_decisions_under_overload(random_net_policy: MlfRlPolicy) -> None:
    snap = overloaded()
    decision = random_net_policy.decide(snap)
    assert decision == random_net_policy.decide(snap)
    taken = [
        (p.node_id, g) for item in decision.launch for p in item.placement for g in p.gpu_indices
    ]
    taken += [
        (p.node_id, g)
        for m in decision.migrate
        for p in m.placement
        for g in p.gpu_indices
        if p.node_id != "a"
    ]
    assert len(taken) == len(set(taken)), "no GPU given twice"
    free = {(n.id, g) for n in snap.nodes for g in n.free_gpu_indices}
    assert set(taken) <= free
    answered = [r.job_id for r in decision.renew] + [s.job_id for s in decision.suspend]
    answered += [m.job_id for m in decision.migrate]
    assert {v.id for v in snap.expired()} <= set(answered)


def test_hold_leaves_the_queue_and_sends_movers_back() -> None:
    holder = Always(lambda step: step.hold)
    decision = plan(overloaded(), holder, CONFIG)
    assert holder.steps, "the chooser was asked"
    assert decision.launch == () and decision.migrate == ()
    movers = {s.job_id for s in decision.suspend}
    assert movers and movers <= {"r0", "r1", "r2"}
    assert {r.job_id for r in decision.renew} == {"r0", "r2"} - movers


def test_steps_offer_only_fitting_candidates() -> None:
    # b (4 GPUs) and c (2 GPUs) are free: q2 (4 GPUs) fits only while b is untouched.
    def q1_then_hold(step: Step) -> int:
        ids = [c.view.id for c in step.candidates]
        return ids.index("q1") if "q1" in ids else step.hold

    chooser = Always(q1_then_hold)
    snap = overloaded()
    plan(snap, chooser, CONFIG)
    first = chooser.steps[0]
    assert first.features.shape == (len(first.candidates), 38)
    assert first.context.shape == (8,)
    ids = [c.view.id for c in first.candidates]
    assert list(first.priorities) == sorted(first.priorities, reverse=True), "MLF-H's order"
    assert {"q0", "q1", "q2"} <= set(ids)
    movers = [c for c in first.candidates if c.moving]
    assert movers and all(c.sources == {"a"} for c in movers)
    assert ids.index("q0") < ids.index("q1"), "q0's urgency 3 puts it before q1"
    # after q1 took a GPU, the step offers q2 (4 GPUs) only if 4 GPUs still fit
    second = chooser.steps[1]
    assert "q1" not in [c.view.id for c in second.candidates]


def test_bad_answer() -> None:
    with pytest.raises(ValueError, match="chooser answered"):
        plan(overloaded(), Always(lambda step: step.hold + 1), CONFIG)


def test_load_control_stops_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import controller.policy.mlfs.loadcontrol as loadcontrol

    monkeypatch.setattr(loadcontrol, "load_control", lambda snap, config: (Stop("r2", "done"),))
    decision = plan(overloaded(), MlfhChooser(), CONFIG, load_control=True)
    assert decision.stop == (Stop("r2", "done"),)
    assert "r2" not in {r.job_id for r in decision.renew}
    without = plan(overloaded(), MlfhChooser(), CONFIG)
    assert without.stop == ()


def test_registry() -> None:
    rl, mlfs = make_policy("mlf-rl"), make_policy("mlfs")
    assert isinstance(rl, MlfRlPolicy) and isinstance(mlfs, MlfRlPolicy)
    assert (rl.name, rl.load_control) == ("mlf-rl", False)
    assert (mlfs.name, mlfs.load_control) == ("mlfs", True)
    assert rl.meta["history"], "the shipped model says how it was trained"


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        MlfRlPolicy(model_path=tmp_path / "missing.pt")


def _check_given_priorities(snap: ClusterSnapshot, chooser: MlfRlPolicy | MlfhChooser) -> Decision:
    """The cycle gives each job it launches or moves the Eq. 6 priority it ranked it by; the
    agents' rule (``Eq6Priorities``), computing them itself, finds the same values exactly."""
    decision = plan(snap, chooser, CONFIG)
    moved = {x.job_id for x in (*decision.launch, *decision.migrate)}
    assert set(decision.priorities) == moved
    own = Eq6Priorities(CONFIG).of(snap, replace(decision, priorities={}))
    assert {job_id: own[job_id] for job_id in moved} == decision.priorities
    return decision


@pytest.mark.parametrize("seed", range(30))
def test_the_cycle_gives_the_agents_eq6_priorities(
    seed: int, check_policy_properties, random_net_policy: MlfRlPolicy
) -> None:
    check_policy_properties(
        seed, lambda snap: _check_given_priorities(snap, random_net_policy), lambda *_: False
    )


@pytest.mark.parametrize("asked", [False, True])
def test_the_cycle_gives_movers_eq6_priorities(asked: bool) -> None:
    decision = _check_given_priorities(overloaded(asked), MlfhChooser())
    assert decision.migrate, "a job moves off the overloaded server"


def _long_queue(count: int) -> ClusterSnapshot:
    """Two idle 4-GPU servers and ``count`` queued 1-GPU jobs, urgency falling with the id
    (q00 first in MLF-H's order)."""
    nodes = tuple(
        NodeView(n, (0, 1, 2, 3), (0, 1, 2, 3), {"gpu": 0, "cpu": 0.1, "memory": 0, "bandwidth": 0})
        for n in ("a", "b")
    )
    jobs = tuple(queued(f"q{i:02d}", 1, urgency=float(count - i)) for i in range(count))
    return ClusterSnapshot(now=100.0, nodes=nodes, queued=jobs, active=(), default_lease_s=300.0)


def test_max_candidates_offers_the_first_in_mlfh_order() -> None:
    snap = _long_queue(12)
    every, window = Always(lambda step: step.hold - 1), Always(lambda step: step.hold - 1)
    plan(snap, every, CONFIG)
    plan(snap, window, CONFIG, max_candidates=3)
    assert len(every.steps) == len(window.steps) == 8, "8 free GPUs, one job a step"
    assert len(every.steps[0].candidates) == 12
    # the window is the first three of what the step would offer
    assert window.steps[0].candidates == every.steps[0].candidates[:3]
    rank = CANDIDATE_FEATURES.index("priority_rank")
    for cut in window.steps:
        assert len(cut.candidates) == 3
        # the rank feature is computed among them: 0, 1/2, 1
        assert list(cut.features[:, rank]) == [0.0, 0.5, 1.0]
    # the last candidate in the window is taken each time: q02, then q03, ...
    taken = [s.candidates[-1].view.id for s in window.steps]
    assert taken == [f"q{i:02d}" for i in range(2, 10)]


@pytest.mark.parametrize("seed", range(20))
def test_a_window_changes_no_mlfh_choice(seed: int, check_policy_properties) -> None:
    # MLF-H's choice is the first candidate, which every window holds
    def both(snap: ClusterSnapshot) -> Decision:
        mine = plan(snap, MlfhChooser(), CONFIG, max_candidates=1)
        same(mine, plan(snap, MlfhChooser(), CONFIG))
        return mine

    check_policy_properties(seed, both, lambda *_: False)


def test_the_policy_windows_at_its_models_training_queue() -> None:
    net = PointerNet(hidden=4)
    trained = {"config": {"episode_jobs": 300, "validation_jobs": 120}}
    assert MlfRlPolicy(network=net, meta=trained).max_candidates == 300
    assert MlfRlPolicy(network=net).max_candidates == DEFAULT_MAX_CANDIDATES == 200
    damaged = {"config": {"episode_jobs": 0, "validation_jobs": "300"}}
    assert MlfRlPolicy(network=net, meta=damaged).max_candidates == 200, "not a training queue"
    assert MlfRlPolicy(network=net, meta=trained, max_candidates=7).max_candidates == 7
    assert make_policy("mlf-rl").max_candidates == 200, "the shipped model: 200-job episodes"
    with pytest.raises(ValueError, match="max_candidates must be >= 1"):
        MlfRlPolicy(network=net, max_candidates=0)
    with pytest.raises(ValueError, match="max_candidates must be >= 1"):
        plan(_long_queue(2), MlfhChooser(), CONFIG, max_candidates=0)
