"""MLF-H as a policy (MLFS §3.3): queue order, host choice, migrations, lease boundaries.

Every expected priority and distance is worked out by hand in the comments, with the paper's
defaults: alpha 0.3, gamma 0.8, gamma_d = gamma_r = 0.3, gamma_w = 0.35, h_r = 0.9, times in
hours in Eq. 4. Resource types: (gpu, cpu, memory, bandwidth).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from controller.placement import TaskPlacement
from controller.policy import available_policies, make_policy
from controller.policy.base import ClusterSnapshot, JobView, NodeView, Stop
from controller.policy.mlfs.jobs import (
    job_features,
    loss_reductions,
    task_demand,
    task_graph,
)
from controller.policy.mlfs.policy import MlfhPolicy
from controller.policy.mlfs.priority import TaskFeatures
from mlsched.model import Deadline, IterationStop, JobSpec, JobState, MlfsSpec

NOW = 3600.0
LEASE = 300.0
TYPES = ("gpu", "cpu", "memory", "bandwidth")


PLAIN = MlfsSpec()


def spec(gpus: int = 1, mlfs: MlfsSpec = PLAIN, deadline: float | None = None) -> JobSpec:
    deadlines = () if deadline is None else (Deadline(deadline, 100.0),)
    return JobSpec("j", ("train",), gpus, IterationStop(1000), deadlines=deadlines, mlfs=mlfs)


def queued(job_id: str, gpus: int = 1, waited: float = 0.0, **kw: object) -> JobView:
    fields: dict = dict(
        id=job_id,
        user="u",
        spec=spec(gpus),
        state=JobState.PENDING,
        submit_time=0.0,
        queued_since=NOW - waited,
        attempt=0,
        suspensions=0,
    )
    fields.update(kw)
    return JobView(**fields)


def running(
    job_id: str, node: str, gpus: tuple[int, ...], expires: float = NOW + 100, **kw: object
) -> JobView:
    fields: dict = dict(
        id=job_id,
        user="u",
        spec=spec(len(gpus)),
        state=JobState.RUNNING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=1,
        suspensions=0,
        iteration=900,
        lease_expires_at=expires,
        placement=tuple(TaskPlacement(r, node, (g,)) for r, g in enumerate(gpus)),
        running_since=0.0,
        estimated_remaining_s=36_000.0,
    )
    fields.update(kw)
    return JobView(**fields)


def node(
    node_id: str, free: tuple[int, ...], util: tuple[float, ...] = (), gpu: dict | None = None
) -> NodeView:
    return NodeView(node_id, tuple(range(8)), free, dict(zip(TYPES, util, strict=False)), gpu or {})


def snap(nodes, queue=(), active=(), busy=()) -> ClusterSnapshot:  # type: ignore[no-untyped-def]
    ordered = tuple(sorted(queue, key=lambda j: (j.queued_since, j.id)))
    return ClusterSnapshot(NOW, tuple(nodes), ordered, tuple(active), tuple(busy), LEASE)


# --- priorities and queue order -----------------------------------------------------------------

CHAIN = MlfsSpec(urgency=2.0, partitions=(0.75, 0.25), dependencies=((0, 1),))


def three_jobs() -> list[JobView]:
    """A: 1 GPU, urgency 4, new (I = 1), waited 1 h, nothing else known.
        P^ML = 4 * 1 * 1 * 1 = 4; P^C = 0.35 * 1 h = 0.35; P = 0.3*4 + 0.7*0.35 = 1.445
    B: a 2-partition chain (0.75 -> 0.25), urgency 2, new, 2 h remaining, not waited.
        leaf 1: P^ML = 2 * 0.25 = 0.5, P^C = 0.3 / 2 = 0.15
        root 0: P^ML = 2 * 0.75 + 0.8 * 0.5 = 1.9, P^C = 0.15 + 0.8 * 0.15 = 0.27
        P = 0.3 * 1.9 + 0.7 * 0.27 = 0.759 (the root; the leaf 0.255)
    C: 4 GPUs data parallel, urgency 10, 9 iterations done (I = 10), losses 2.0, 1.1, 1.0:
        ratio 0.1 / 1.0; S = 1/4; deadline 2 h after submission at 0: 1 h from now.
        P^ML = 10 * 0.1 * 0.1 * 0.25 = 0.025; P^C = 0.3 / 1 = 0.3; P = 0.0075 + 0.21 = 0.2175
    """
    a = replace(queued("a", waited=3600.0), spec=spec(1, MlfsSpec(urgency=4.0)))
    b = replace(queued("b", 2), spec=spec(2, CHAIN), estimated_remaining_s=7200.0)
    c = replace(
        queued("c", 4),
        spec=spec(4, MlfsSpec(urgency=10.0), deadline=7200.0),
        iteration=9,
        losses=(2.0, 1.1, 1.0),
    )
    return [c, b, a]


def test_job_priority_is_its_best_task_and_orders_the_queue() -> None:
    policy = MlfhPolicy()
    s = snap([node("n0", tuple(range(8)))], three_jobs())
    tasks = policy.task_priorities(s)
    assert tasks[("a", 0)] == pytest.approx(1.445)
    assert tasks[("b", 0)] == pytest.approx(0.759)
    assert tasks[("b", 1)] == pytest.approx(0.255)
    assert tasks[("c", 0)] == pytest.approx(0.2175)
    assert set(tasks) == {("a", 0), ("b", 0), ("b", 1), ("c", 0)}  # c: one task stands for all
    assert policy.job_priorities(s) == pytest.approx({"a": 1.445, "b": 0.759, "c": 0.2175})
    # All fit on the empty node: launched in priority order, a, b, c.
    decision = policy.decide(s)
    assert [item.job_id for item in decision.launch] == ["a", "b", "c"]
    assert all(item.lease_s == LEASE for item in decision.launch)


def test_a_job_that_does_not_fit_is_skipped_and_a_lower_one_backfills() -> None:
    # 4 free GPUs: a (1) and b (2) fit, c (4) does not, d (1 GPU, urgency 0.5, new, nothing
    # else known: P = 0.3 * 0.5 = 0.15, below c) backfills the last GPU.
    d = replace(queued("d"), spec=spec(1, MlfsSpec(urgency=0.5)))
    s = snap([node("n0", (0, 1, 2, 3))], [*three_jobs(), d])
    assert MlfhPolicy().job_priorities(s)["d"] == pytest.approx(0.15)
    decision = MlfhPolicy().decide(s)
    assert [item.job_id for item in decision.launch] == ["a", "b", "d"]
    gpus = [g for item in decision.launch for p in item.placement for g in p.gpu_indices]
    assert sorted(gpus) == [0, 1, 2, 3]


def test_task_graph_replicates_partitions_over_the_tasks() -> None:
    graph = MlfsSpec(partitions=(0.5, 0.3, 0.2), dependencies=((0, 1), (1, 2)))
    # 7 tasks: replicas (0 1 2) (3 4 5) and a partial one (6): partition 0 runs 3 times.
    shares, children = task_graph(7, graph)
    assert shares == pytest.approx((0.5 / 3, 0.15, 0.1, 0.5 / 3, 0.15, 0.1, 0.5 / 3))
    assert children == ((1,), (2,), (), (4,), (5,), (), ())
    assert sum(shares) == pytest.approx(1.0)
    assert task_graph(4, MlfsSpec()) == ((0.25,) * 4, ((),) * 4)
    # 5 tasks: replica (0 1 2) and a partial one (3 4) that keeps the edge 0 -> 1 as 3 -> 4
    shares, children = task_graph(5, graph)
    assert shares == pytest.approx((0.25, 0.15, 0.2, 0.25, 0.15))
    assert children == ((1,), (2,), (), (4,), ())
    # fewer tasks than partitions: the first two partitions, whole each
    shares, children = task_graph(2, graph)
    assert shares == pytest.approx((0.5, 0.3))
    assert children == ((1,), ())
    for bad in (
        MlfsSpec(partitions=(0.5, 0.5), dependencies=((0, 1), (1, 0))),  # a cycle
        MlfsSpec(partitions=(0.5, 0.5), dependencies=((0, 2),)),  # unknown partition
        MlfsSpec(partitions=(1.0, 0.0)),  # empty partition
    ):
        assert task_graph(2, bad) == ((0.5, 0.5), ((), ())), bad


def test_features_of_a_model_parallel_job_equal_validated_ones() -> None:
    view = replace(queued("m", 4, waited=60.0), spec=spec(4, CHAIN), iteration=5)
    features = job_features(view, NOW, queued=True)
    assert [f.task for f in features] == [0, 1, 2, 3]
    for f in features:  # built without __init__ after the first: same as the validated one
        assert f == TaskFeatures(**f.__dict__)
    assert features[0].children == (1,) and features[2].children == (3,)
    assert features[0].waiting_s == 60.0 and features[0].iteration == 6


def test_missing_losses_assume_equal_reductions() -> None:
    assert loss_reductions((), 4) == (1.0, 4.0)  # ratio 1 / (I - 1), I = 5
    assert loss_reductions((3.0,), 0) == (1.0, 1.0)
    assert loss_reductions((3.0, 2.0), 7) == (1.0, 1.0)  # previous = first
    assert loss_reductions((3.0, 2.5, 2.0), 7) == (0.5, 1.0)
    assert loss_reductions((3.0, math.nan, 2.0), 7) == (1.0, 7.0)


# --- host choice ---------------------------------------------------------------------------------

USAGE = {"gpu": 0.125, "cpu": 0.1, "memory": 0.05, "bandwidth": 0.05}  # one task's load


def test_tasks_go_to_the_server_closest_to_the_ideal_host() -> None:
    # n0 (0.5, 0.2, 0.2, 0.2), n1 (0.25, 0.6, 0.3, 0.1); the job's task load
    # (0.125, 0.1, 0.05, 0.05) fits both. Task 0: ideal (0.25, 0.2, 0.2, 0.1, share 0, 0)
    #   n0: 0.25^2 + 0.1^2 = 0.0725 -> 0.269; n1: 0.4^2 + 0.1^2 = 0.17 -> 0.412: n0, on its
    #   least-loaded free GPU, 3 (0.0; GPU 2 runs at 0.05).
    # Task 1: n0 is now (0.625, 0.3, 0.25, 0.25) and hosts its only peer (share 1);
    #   ideal (0.25, 0.3, 0.25, 0.1, 1, 0).
    #   n0: 0.375^2 + 0.15^2 = 0.163 -> 0.404; n1: 0.3^2 + 0.05^2 + 1 = 1.0925 -> 1.045: n0.
    nodes = [
        node("n0", (2, 3), (0.5, 0.2, 0.2, 0.2), {2: 0.05, 3: 0.0}),
        node("n1", (5, 6, 7), (0.25, 0.6, 0.3, 0.1)),
    ]
    job = replace(
        queued("j", 2, state=JobState.SUSPENDED),
        resource_usage={r: 2 * v for r, v in USAGE.items()},
    )
    assert task_demand(job, TYPES) == pytest.approx((0.125, 0.1, 0.05, 0.05))
    [launch] = MlfhPolicy().decide(snap(nodes, [job])).launch
    assert launch.placement == (TaskPlacement(0, "n0", (3,)), TaskPlacement(1, "n0", (2,)))
    # With only one free GPU on n0, task 1 must go to n1: the job spans both.
    nodes[0] = node("n0", (3,), (0.5, 0.2, 0.2, 0.2))
    [launch] = MlfhPolicy().decide(snap(nodes, [job])).launch
    assert launch.placement == (TaskPlacement(0, "n0", (3,)), TaskPlacement(1, "n1", (5,)))


def test_a_job_that_would_overload_every_server_waits() -> None:
    # cpu 0.85 + 0.1 > 0.9 on n0; n1 has no free GPU; all or nothing: nothing launched.
    nodes = [node("n0", (0, 1), (0.3, 0.85, 0.2, 0.2)), node("n1", (), (0.3, 0.2, 0.2, 0.2))]
    job = replace(queued("j"), resource_usage=USAGE)
    assert MlfhPolicy().decide(snap(nodes, [job])).launch == ()
    # A job never measured has no known load: it is placed (utilisation still ranks servers).
    assert [i.job_id for i in MlfhPolicy().decide(snap(nodes, [queued("k")])).launch] == ["k"]


def test_unmeasured_nodes_count_busy_gpus_and_never_migrate() -> None:
    # No measurements: n0 (6 of 8 busy, 0.75 on every type) and n1 (2 of 8 busy, 0.25): the
    # ideal is n1's point, so the new job goes there although n0 fits it too.
    r0 = running("r0", "n0", (0, 1, 2, 3, 4, 5), migration_requested=False)
    r1 = running("r1", "n1", (0, 1))
    nodes = [node("n0", (6, 7)), node("n1", (2, 3, 4, 5, 6, 7))]
    decision = MlfhPolicy().decide(snap(nodes, [queued("q")], [r0, r1]))
    assert [(i.job_id, i.placement[0].node_id) for i in decision.launch] == [("q", "n1")]
    assert decision.migrate == () and decision.suspend == ()


# --- overloaded servers (§3.3.3) ---------------------------------------------------------------

HOT = (0.3, 0.95, 0.2, 0.2)  # cpu above h_r


def test_a_job_an_agent_asked_to_move_migrates_to_an_underloaded_server() -> None:
    mover = running("m", "n0", (0,), migration_requested=True, resource_usage=USAGE)
    other = running("o", "n0", (1,), resource_usage=USAGE)
    nodes = [node("n0", (2, 3), HOT), node("n1", (4, 5), (0.2, 0.2, 0.2, 0.2), {4: 0.1})]
    decision = MlfhPolicy().decide(snap(nodes, [], [mover, other]))
    [migrate] = decision.migrate
    assert migrate.job_id == "m" and migrate.lease_s == LEASE
    assert migrate.placement == (TaskPlacement(0, "n1", (5,)),)  # n1's least-loaded GPU
    assert "n0" in migrate.reason
    assert decision.suspend == () and decision.launch == () and decision.renew == ()


def test_a_mover_with_nowhere_to_go_goes_back_to_the_queue() -> None:
    mover = running("m", "n0", (0,), migration_requested=True, resource_usage=USAGE)
    # n1 has a free GPU but would overload (cpu 0.85 + 0.1); n0, the source, is excluded.
    nodes = [node("n0", (2, 3), HOT), node("n1", (4,), (0.2, 0.85, 0.2, 0.2))]
    decision = MlfhPolicy().decide(snap(nodes, [], [mover]))
    assert decision.migrate == ()
    assert [s.job_id for s in decision.suspend] == ["m"]


def test_mlf_h_picks_the_task_closest_to_the_ideal_virtual_task() -> None:
    # No agent request: MLF-H runs choose_migrations on n0 (cpu 0.95 > 0.9). Loads per task:
    # big (0.1, 0.6, 0.1, 0.1), small (0.1, 0.35, 0.1, 0.1). cpu is the hot type, so
    # U_o = (min gpu, max cpu, min mem, min bw, traffic 0) = (0.1, 0.6, 0.1, 0.1, 0):
    # big is at distance 0, small at 0.25: big leaves; n0 then has cpu 0.35: relieved.
    big = running("big", "n0", (0,), resource_usage={"gpu": 0.1, "cpu": 0.6, **_rest()})
    small = running("small", "n0", (1,), resource_usage={"gpu": 0.1, "cpu": 0.35, **_rest()})
    nodes = [node("n0", (), HOT), node("n1", (0, 1), (0.1, 0.1, 0.1, 0.1))]
    decision = MlfhPolicy().decide(snap(nodes, [], [small, big]))
    assert [(m.job_id, m.placement) for m in decision.migrate] == [
        ("big", (TaskPlacement(0, "n1", (0,)),))
    ]


def test_a_leaving_jobs_load_no_longer_counts_against_its_server() -> None:
    # n0 reads cpu 0.95 (HOT) while "big" (cpu 0.6) is already suspending on its way out:
    # without it n0 is at 0.35, not overloaded, so "small" stays and nothing else moves.
    big = replace(
        running("big", "n0", (0,), resource_usage={"gpu": 0.1, "cpu": 0.6, **_rest()}),
        state=JobState.SUSPENDING,
    )
    small = running("small", "n0", (1,), resource_usage={"gpu": 0.1, "cpu": 0.35, **_rest()})
    nodes = [node("n0", (), HOT), node("n1", (0, 1), (0.1, 0.1, 0.1, 0.1))]
    decision = MlfhPolicy().decide(snap(nodes, [], [small], [big]))
    assert decision.migrate == () and decision.suspend == ()


def _rest() -> dict[str, float]:
    return {"memory": 0.1, "bandwidth": 0.1}


def test_only_the_leaving_tasks_of_a_spanning_job_move() -> None:
    # Job w has rank 0 on hot n0 and rank 1 on n1; the agent asked: rank 0 moves (to n1, which
    # hosts its peer), rank 1 keeps its GPU.
    w = replace(
        running("w", "n0", (0, 1), migration_requested=True, resource_usage=USAGE),
        placement=(TaskPlacement(0, "n0", (0,)), TaskPlacement(1, "n1", (3,))),
    )
    nodes = [node("n0", (2,), HOT), node("n1", (4, 5), (0.1, 0.1, 0.1, 0.1)), node("n2", (0,))]
    [migrate] = MlfhPolicy().decide(snap(nodes, [], [w])).migrate
    assert migrate.placement == (TaskPlacement(0, "n1", (4,)), TaskPlacement(1, "n1", (3,)))


def test_a_job_too_big_for_the_cluster_under_h_r_runs_anyway_and_stays_put() -> None:
    # Two tasks at CPU 0.5 each: one 8-GPU server holds floor(0.9 / 0.5) = 1 of them even when
    # idle, and there is one server: the job would never start. It is placed by free GPUs...
    big = {"gpu": 0.2, "cpu": 1.0, "memory": 0.1, "bandwidth": 0.1}  # two tasks' worth
    job = replace(queued("big", 2, state=JobState.SUSPENDED), resource_usage=big)
    nodes = [node("n0", tuple(range(8)), (0.0, 0.0, 0.0, 0.0))]
    [launch] = MlfhPolicy().decide(snap(nodes, [job])).launch
    assert launch.placement == (TaskPlacement(0, "n0", (0,)), TaskPlacement(1, "n0", (1,)))
    # ... and, running, never picked to leave the server it overloads.
    held = running("big", "n0", (0, 1), resource_usage=big)
    hot = [node("n0", tuple(range(2, 8)), (0.05, 1.0, 0.05, 0.05))]
    decision = MlfhPolicy().decide(snap(hot, [], [held]))
    assert decision.migrate == () and decision.suspend == ()


# --- lease boundaries ----------------------------------------------------------------------------


def test_mlfh_never_preempts_for_priority_by_default() -> None:
    # MLFS §3.3: running tasks leave only overloaded servers; the expired job is renewed.
    q = replace(queued("q", 2), spec=spec(2, MlfsSpec(urgency=10.0)))
    r = running("r", "n0", (0, 1), expires=NOW)
    decision = MlfhPolicy().decide(snap([node("n0", ())], [q], [r]))
    assert decision.suspend == () and [x.job_id for x in decision.renew] == ["r"]


def test_an_expired_lower_priority_job_yields_at_the_lease_boundary() -> None:
    # Queued q: urgency 10, new: P >= 0.3 * 10 = 3. Running r: I = 901, no losses (ratio
    # 1/900), 10 h left: P = 0.3/901/900 + 0.7 * 0.3 / 10 = 0.021.
    q = replace(queued("q", 2), spec=spec(2, MlfsSpec(urgency=10.0)))
    r = running("r", "n0", (0, 1), expires=NOW)
    decision = MlfhPolicy(preempt_ratio=1.0).decide(snap([node("n0", ())], [q], [r]))
    assert [s.job_id for s in decision.suspend] == ["r"]
    assert "q" in decision.suspend[0].reason
    assert decision.launch == () and decision.renew == ()  # q starts once the GPUs are back
    # With preempt_ratio 1000, q would need a priority above 1000 * 0.021 = 21: r is renewed.
    damped = MlfhPolicy(preempt_ratio=1000.0).decide(snap([node("n0", ())], [q], [r]))
    assert damped.suspend == () and [x.job_id for x in damped.renew] == ["r"]
    with pytest.raises(ValueError):
        MlfhPolicy(preempt_ratio=0.5)
    # Lease not expired: nobody yields, nothing to answer.
    later = replace(r, lease_expires_at=NOW + 1)
    assert MlfhPolicy(preempt_ratio=1.0).decide(snap([node("n0", ())], [q], [later])).suspend == ()
    # The queued job ranks lower (urgency 0, r nearly done): r is renewed.
    low = replace(q, spec=spec(2, MlfsSpec(urgency=0.0)))
    done_soon = replace(r, estimated_remaining_s=60.0)
    decision = MlfhPolicy(preempt_ratio=1.0).decide(snap([node("n0", ())], [low], [done_soon]))
    assert decision.suspend == () and [x.job_id for x in decision.renew] == ["r"]


def test_gpus_on_their_way_back_are_reserved_instead_of_preempting() -> None:
    q = replace(queued("q", 2), spec=spec(2, MlfsSpec(urgency=10.0)))
    r = running("r", "n0", (0, 1), expires=NOW)
    leaving = replace(running("x", "n0", (2, 3)), state=JobState.SUSPENDING)
    decision = MlfhPolicy(preempt_ratio=1.0).decide(snap([node("n0", ())], [q], [r], [leaving]))
    assert decision.suspend == () and [x.job_id for x in decision.renew] == ["r"]


def test_fewest_victims_lowest_priority_first() -> None:
    # q needs 2 GPUs; three expired 1-GPU jobs rank (by remaining time) c < b < a: c and b go.
    q = replace(queued("q", 2), spec=spec(2, MlfsSpec(urgency=10.0)))
    a = running("a", "n0", (0,), expires=NOW, estimated_remaining_s=600.0)
    b = running("b", "n0", (1,), expires=NOW, estimated_remaining_s=3600.0)
    c = running("c", "n0", (2,), expires=NOW, estimated_remaining_s=36_000.0)
    decision = MlfhPolicy(preempt_ratio=1.0).decide(snap([node("n0", ())], [q], [a, b, c]))
    assert sorted(s.job_id for s in decision.suspend) == ["b", "c"]
    assert [x.job_id for x in decision.renew] == ["a"]


# --- MLF-C hook, registry, properties ----------------------------------------------------------


def test_load_control_stops_are_passed_on_and_those_jobs_left_alone(monkeypatch) -> None:
    import controller.policy.mlfs.loadcontrol as loadcontrol

    r = running("r", "n0", (0,), expires=NOW)
    monkeypatch.setattr(loadcontrol, "load_control", lambda s, c: (Stop("r", "target reached"),))
    s = snap([node("n0", (1,))], [], [r])
    assert MlfhPolicy().decide(s).stop == ()  # off by default
    decision = MlfhPolicy(load_control=True).decide(s)
    assert decision.stop == (Stop("r", "target reached"),)
    assert decision.renew == () and decision.suspend == ()


def test_registered_as_mlf_h() -> None:
    assert "mlf-h" in available_policies()
    policy = make_policy("mlf-h")
    assert isinstance(policy, MlfhPolicy) and policy.name == "mlf-h"
    assert not policy.load_control


@pytest.mark.parametrize("seed", range(40))
def test_random_snapshots_keep_the_policy_invariants(seed: int, check_policy_properties) -> None:
    policy = MlfhPolicy()

    def outranks(s: ClusterSnapshot, job: JobView, victim: JobView) -> bool:
        priority = policy.job_priorities(s)
        return priority[job.id] > priority[victim.id]

    check_policy_properties(seed, policy.decide, outranks)


def test_decisions_are_deterministic_with_measurements() -> None:
    rng = random.Random(3)
    nodes = [node(f"n{i}", (6, 7), tuple(rng.uniform(0, 0.95) for _ in TYPES)) for i in range(6)]
    active = [
        running(f"r{i}", f"n{i}", (0, 1), migration_requested=i == 2, resource_usage=USAGE)
        for i in range(6)
    ]
    s = snap(nodes, three_jobs(), active)
    assert MlfhPolicy().decide(s) == MlfhPolicy().decide(s)
