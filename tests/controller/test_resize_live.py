"""The live controller carries out resizes of elastic jobs (controller/resize.py, issue 14)."""

from __future__ import annotations

import logging
from dataclasses import replace

from controller.commands import BatchSizeCommand, LaunchCommand, SuspendCommand
from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, Launch, Migrate, Resize
from mlsched.model import BatchRule, ElasticSpec, JobState, Progress, TaskState


class StubPolicy:
    """Returns its decision once, then nothing."""

    name = "stub"

    def __init__(self, decision: Decision | None = None) -> None:
        self.decision = decision or Decision()
        self.snapshots: list[ClusterSnapshot] = []

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        self.snapshots.append(snapshot)
        decision, self.decision = self.decision, Decision()
        return decision


def tp(rank: int, node: str, *gpus: int) -> TaskPlacement:
    return TaskPlacement(rank, node, gpus)


def elastic_job(c, gpus: int, rule: BatchRule, batch: int = 64, low=1, high=4, **elastic):
    spec = replace(
        c.spec("elastic", gpus),
        batch_size=batch,
        elastic=ElasticSpec(
            low, high, rule, linear_lr=rule is not BatchRule.FIXED_GLOBAL, **elastic
        ),
    )
    return c.jobs.submit("alice", spec)


def start(c, job, *placement: TaskPlacement) -> None:
    c.scheduler.policy = StubPolicy(Decision(launch=(Launch(job.id, placement, 10.0),)))
    c.cycle()
    c.report_all(job.id, TaskState.RUNNING)


def progress(c, job, batch: int, iteration: int = 10) -> None:
    c.events.progress(
        c.task(job.id).node_id,
        job.id,
        0,
        c.job(job.id).attempt,
        Progress(iteration, 1.0, {}, 0.1, batch, 0.0),
    )


def resize(c, job, *placement: TaskPlacement, batch: int = 0) -> None:
    item = Resize(job.id, placement, 10.0, batch, "test: predicted gain 0.25")
    c.scheduler.policy = StubPolicy(Decision(resize=(item,)))
    c.cycle()


def messages(c, job, kind: str) -> list[str]:
    return [e.message for e in c.store.events_after(0, job.id) if e.kind == kind]


def test_a_batch_change_on_the_same_gpus_goes_in_place_and_its_cost_is_recorded(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 2, BatchRule.SCHEDULER, max_batch_size=256)
    start(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.sink.clear()
    c.clock.advance(4.0)  # the lease of 10 s now ends at +14 s
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1), batch=128)
    assert [(n, cmd.task.rank, cmd.batch_size) for n, cmd in c.sink.of(BatchSizeCommand)] == [
        ("n1", 0, 128),
        ("n1", 1, 128),
    ]
    assert not c.sink.of(SuspendCommand)
    assert c.job(job.id).lease_expires_at == c.clock.now() + 10.0
    assert messages(c, job, "resize_ordered") == [
        "2 -> 2 GPUs (n1:[0], n1:[1]), global batch 128, by in-place batch: "
        "test: predicted gain 0.25"
    ]
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1), batch=128)  # repeated before it shows
    assert c.sink.of(BatchSizeCommand) == [] and len(messages(c, job, "resize_ordered")) == 1
    c.clock.advance(1.5)
    progress(c, job, 64)  # a report from before the switch closes nothing
    assert messages(c, job, "job_resized") == []
    c.clock.advance(0.25)
    progress(c, job, 128, iteration=11)
    assert messages(c, job, "job_resized") == [
        "2 -> 2 GPUs, global batch 128, by in-place batch in 1.75 s; test: predicted gain 0.25"
    ]
    assert c.job(job.id).state is JobState.RUNNING


def test_a_grow_suspends_and_resumes_on_the_target_with_the_batch_for_its_gpus(cluster):
    c = cluster
    c.add_node("n1", 2)
    c.add_node("n2", 2)
    job = elastic_job(c, 2, BatchRule.FIXED_PER_GPU)  # 64 on 2 GPUs: 32 per GPU
    start(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.sink.clear()
    # onto a second node: not in place (controller/resize_inplace.py)
    target = (tp(0, "n1", 0), tp(1, "n1", 1), tp(2, "n2", 0), tp(3, "n2", 1))
    resize(c, job, *target)
    assert len(c.sink.of(SuspendCommand)) == 2
    assert c.job(job.id).state is JobState.SUSPENDING
    c.cycle()  # n2's GPUs are held for the job: not free to the policy
    assert [n.free_gpu_indices for n in c.scheduler.policy.snapshots[-1].nodes] == [(), ()]
    c.clock.advance(2.0)
    c.report_all(job.id, TaskState.SUSPENDED, checkpoint_step=10)
    assert c.job(job.id).state is JobState.SUSPENDED
    c.sink.clear()
    c.cycle()
    launches = [cmd for _, cmd in c.sink.of(LaunchCommand)]
    assert [(cmd.task.rank, cmd.gpu_indices, cmd.world_size) for cmd in launches] == [
        (0, (0,), 4),
        (1, (1,), 4),
        (2, (0,), 4),
        (3, (1,), 4),
    ]
    env = dict(launches[0].spec.env)
    assert (env["MLSCHED_ELASTIC_BATCH_SIZE"], env["MLSCHED_BASE_BATCH_SIZE"]) == ("128", "64")
    assert env["MLSCHED_LR_SCALING"] == "linear"
    assert c.job(job.id).spec.env == ()  # the stored spec is the user's
    c.report_all(job.id, TaskState.RUNNING)
    c.clock.advance(3.0)
    progress(c, job, 128)
    assert messages(c, job, "job_resized") == [
        "2 -> 4 GPUs, global batch 128, by suspend/resume in 5.00 s; test: predicted gain 0.25"
    ]


def test_a_grow_into_gpus_a_shrinking_job_gives_up_waits_for_them(cluster):
    c = cluster
    c.add_node("n1", 3)
    shrinking = elastic_job(c, 2, BatchRule.FIXED_GLOBAL)
    growing = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    start(c, shrinking, tp(0, "n1", 0), tp(1, "n1", 1))
    start(c, growing, tp(0, "n1", 2))
    c.scheduler.policy = StubPolicy(
        Decision(
            resize=(
                # each moves a rank that stays: not in place (controller/resize_inplace.py)
                Resize(shrinking.id, (tp(0, "n1", 1),), 10.0, reason="shrink"),
                Resize(growing.id, (tp(0, "n1", 0), tp(1, "n1", 2)), 10.0, reason="grow"),
            )
        )
    )
    c.cycle()
    assert c.job(shrinking.id).state is c.job(growing.id).state is JobState.SUSPENDING
    c.report_all(growing.id, TaskState.SUSPENDED, checkpoint_step=5)
    c.cycle()  # GPU 0 is still the shrinking job's: the growing one waits, queued
    assert c.job(growing.id).state is JobState.SUSPENDED
    c.report_all(shrinking.id, TaskState.SUSPENDED, checkpoint_step=5)
    c.sink.clear()
    c.cycle()
    assert [(cmd.task.job_id, cmd.gpu_indices) for _, cmd in c.sink.of(LaunchCommand)] == [
        (shrinking.id, (1,)),
        (growing.id, (0,)),
        (growing.id, (2,)),
    ]
    assert messages(c, growing, "resize_abandoned") == []


def test_a_resize_of_a_rigid_job_is_refused_and_the_job_renewed(cluster, caplog):
    c = cluster
    c.add_node("n1", 2)
    job = c.submit(gpus=1)
    start(c, job, tp(0, "n1", 0))
    with caplog.at_level(logging.WARNING, logger="controller.resize"):
        resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    assert c.job(job.id).state is JobState.RUNNING
    assert c.job(job.id).lease_expires_at == c.clock.now() + 10.0
    assert [r.getMessage() for r in caplog.records] == [
        f"resize of {job.id} not made: the job is not elastic (its spec has no elastic section)"
    ]


def test_a_resize_outside_the_elastic_range_is_refused(cluster, caplog):
    c = cluster
    c.add_node("n1", 4)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL, high=2)
    start(c, job, tp(0, "n1", 0))
    with caplog.at_level(logging.WARNING, logger="controller.resize"):
        resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1), tp(2, "n1", 2))
    assert c.job(job.id).state is JobState.RUNNING
    assert [r.getMessage() for r in caplog.records] == [
        f"resize of {job.id} not made: 3 GPUs; the job stretches over 1 to 2"
    ]


def test_the_same_gpus_in_another_rank_order_change_only_the_batch(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 2, BatchRule.SCHEDULER, max_batch_size=256)
    start(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.sink.clear()
    resize(c, job, tp(0, "n1", 1), tp(1, "n1", 0), batch=96)
    assert not c.sink.of(SuspendCommand)
    assert [cmd.batch_size for _, cmd in c.sink.of(BatchSizeCommand)] == [96, 96]
    assert c.job(job.id).state is JobState.RUNNING


def test_gpus_reserved_for_a_resize_are_not_given_to_a_migration(cluster):
    c = cluster
    c.add_node("n1", 3)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    other = c.submit(gpus=1)
    start(c, job, tp(0, "n1", 0))
    start(c, other, tp(0, "n1", 1))
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 2))  # GPU 2 is held for it from now on
    c.sink.clear()
    move = Migrate(other.id, (tp(0, "n1", 2),), 10.0, "overloaded")
    c.scheduler.policy = StubPolicy(Decision(migrate=(move,)))
    c.cycle()
    assert not c.sink.of(SuspendCommand)
    assert c.job(other.id).state is JobState.RUNNING


def test_an_in_place_change_the_script_ignores_is_given_up_after_a_lease(cluster):
    c = cluster
    c.add_node("n1", 1)
    job = elastic_job(c, 1, BatchRule.SCHEDULER, max_batch_size=256)
    start(c, job, tp(0, "n1", 0))
    resize(c, job, tp(0, "n1", 0), batch=128)
    c.clock.advance(10.0)  # the order's lease
    progress(c, job, 64)
    assert messages(c, job, "resize_abandoned") == []
    c.clock.advance(0.5)
    progress(c, job, 64, iteration=11)
    assert messages(c, job, "resize_abandoned") == [
        "in-place batch: the job still reports batch 64 after 10 s"
    ]
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0), batch=96)  # the job may be resized again
    assert [cmd.batch_size for _, cmd in c.sink.of(BatchSizeCommand)] == [96]


def test_a_job_a_user_has_stopped_is_not_resized(cluster, caplog):
    # Seen live (ONES): a batch change ordered after `mlsched stop`, while the trainer was
    # saving its final checkpoint. The stop ends the job; no new shape is started.
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 2, BatchRule.SCHEDULER, max_batch_size=256)
    start(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.jobs.stop("alice", job.id, "seen enough")
    c.sink.clear()
    with caplog.at_level(logging.INFO, logger="controller.resize"):
        resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1), batch=128)
    assert c.sink.of(BatchSizeCommand) == [] and c.sink.of(SuspendCommand) == []
    assert messages(c, job, "resize_ordered") == []
    assert c.job(job.id).state is JobState.RUNNING
    assert c.job(job.id).lease_expires_at == c.clock.now() + 10.0
    assert f"resize of {job.id} skipped: stopped by alice: seen enough" in [
        r.getMessage() for r in caplog.records
    ]
