"""``chic`` live (issue 16): PS counts from the shipped network, resize through suspension."""

from __future__ import annotations

from controller.placement import TaskPlacement as T
from controller.policy.base import ClusterSnapshot, JobView, NodeView
from controller.policy.registry import make_policy
from mlsched.model import ElasticSpec, IterationStop, JobSpec, JobState, PsSpec, RoleResources

PS = PsSpec(1, 2, 1, 2, RoleResources(1, 0.25, 0.25), RoleResources(0, 0.25, 0.25))
PS_SPEC = JobSpec("ps-resnet50", ("x",), 1, IterationStop(1500), ps=PS)
DDP = JobSpec("ddp", ("x",), 2, IterationStop(300), elastic=ElasticSpec(1, 2))


def view(job_id, spec, state, at, placement=(), iteration=0):
    lease = 1e9 if placement else None
    return JobView(job_id, "u", spec, state, at, at, 1 if placement else 0, 0, iteration,
                   lease_expires_at=lease, placement=placement)  # fmt: skip


def node(free):
    return (NodeView("a", (0, 1), free, cpus=2.0, memory_gb=8.0),)


def test_alone_the_ps_job_gets_two_workers_and_one_server():
    policy = make_policy("chic")
    decision = policy.decide(
        ClusterSnapshot(0.0, node((0, 1)), (view("p", PS_SPEC, JobState.PENDING, 0.0),), ())
    )
    [launch] = decision.launch
    assert launch.placement == (T(0, "a", (0,)), T(1, "a", (1,)), T(2, "a", ()))


def test_an_arrival_halves_its_gpu_share_so_it_is_suspended_and_relaunched_smaller():
    policy = make_policy("chic")
    policy.decide(
        ClusterSnapshot(0.0, node((0, 1)), (view("p", PS_SPEC, JobState.PENDING, 0.0),), ())
    )
    held = (T(0, "a", (0,)), T(1, "a", (1,)), T(2, "a", ()))
    for progress in (0, 700, 1400):  # whatever the PS job has done by then
        running = view("p", PS_SPEC, JobState.RUNNING, 0.0, held, progress)
        queued = (view("d", DDP, JobState.PENDING, 1.0),)
        decision = policy.decide(ClusterSnapshot(1.0, node(()), queued, (running,)))
        assert [s.reason for s in decision.suspend] == ["chic: resize to 1 workers, 2 PS"]
        assert decision.launch == ()  # no GPU free until the PS job has checkpointed
        policy._jobs = frozenset({"p"})  # the next arrival again
    # queue order: the DDP job (submitted at 1.0), then the PS job (suspended at 2.0)
    both = (view("d", DDP, JobState.PENDING, 1.0), view("p", PS_SPEC, JobState.SUSPENDED, 2.0))
    decision = policy.decide(ClusterSnapshot(3.0, node((0, 1)), both, ()))
    placements = {launch.job_id: launch.placement for launch in decision.launch}
    assert placements == {
        "d": (T(0, "a", (0,)),),
        "p": (T(0, "a", (1,)), T(1, "a", ()), T(2, "a", ())),
    }


def test_a_job_being_suspended_still_counts_so_the_plan_does_not_flap():
    policy = make_policy("chic")
    pending = (view("p", PS_SPEC, JobState.PENDING, 0.0),)
    policy.decide(ClusterSnapshot(0.0, node((0, 1)), pending, ()))
    held = (T(0, "a", (0,)), T(1, "a", (1,)), T(2, "a", ()))
    running = view("p", PS_SPEC, JobState.RUNNING, 0.0, held)
    queued = (view("d", DDP, JobState.PENDING, 1.0),)
    policy.decide(ClusterSnapshot(1.0, node(()), queued, (running,)))
    # the PS job's second worker has ended, its chief is still saving: GPU 1 is free
    suspending = view("p", PS_SPEC, JobState.SUSPENDING, 0.0, held[:1] + held[2:])
    decision = policy.decide(ClusterSnapshot(2.0, node((1,)), queued, (), (suspending,)))
    [launch] = decision.launch
    assert launch.placement == (T(0, "a", (1,)),)  # its share, one GPU, not the whole node
