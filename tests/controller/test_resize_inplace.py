"""GPU-count changes on the job's own node go in place (controller/resize_inplace.py, issue 15):
the controller's side, with the agents played by the test."""

from __future__ import annotations

from controller import dispatch
from controller.commands import KillCommand, LaunchCommand, RegroupCommand, SuspendCommand
from controller.policy.base import Decision, Renew
from controller.resize_inplace import plan_problem
from mlsched.model import BatchRule, JobState, Progress, TaskState

from .test_resize_live import StubPolicy, elastic_job, messages, resize, start, tp


def regroup_progress(c, job, generation: int, batch: int = 64, iteration: int = 10) -> None:
    """Rank 0's report from a script that follows regroups (``ElasticGroup``): the shim adds
    the last regroup's generation (0 before the first)."""
    metrics = {"regroup_generation": float(generation)}
    c.events.progress(
        "n1", job.id, 0, c.job(job.id).attempt, Progress(iteration, 1.0, metrics, 0.1, batch, 0.0)
    )


def start_following(c, job, *placement) -> None:
    """Launched, and its first report says the script follows regroups."""
    start(c, job, *placement)
    regroup_progress(c, job, 0, iteration=1)


def live_ranks(c, job) -> list[tuple[int, tuple[int, ...], TaskState]]:
    return [(t.rank, t.gpu_indices, t.state) for t in c.tasks(job.id)]


def test_the_plan_needs_one_node_another_count_and_the_staying_ranks_on_their_gpus():
    one = (tp(0, "n1", 0),)
    two = (tp(0, "n1", 0), tp(1, "n1", 1))
    assert plan_problem(one, two) is None
    assert plan_problem(two, one) is None
    assert plan_problem(two, two) == "the process count does not change"
    assert plan_problem(one, (tp(0, "n1", 0), tp(1, "n2", 0))) == (
        "the job would span nodes ['n1', 'n2']"
    )
    assert plan_problem(one, (tp(0, "n1", 1), tp(1, "n1", 0))) == (
        "the ranks that stay would change GPUs"
    )


def test_a_grow_on_the_same_node_records_the_new_rank_first_and_regroups(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 1, BatchRule.FIXED_PER_GPU)  # 64 per GPU
    start_following(c, job, tp(0, "n1", 0))
    c.sink.clear()
    c.clock.advance(1.0)
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    [(node, command)] = c.sink.of(RegroupCommand)
    assert node == "n1"
    assert (command.task.rank, command.task.attempt) == (0, 1)
    assert (command.generation, command.world_size, command.new_ranks) == (1, 2, ((1, (1,)),))
    assert command.batch_size == 128
    assert dict(command.spec.env)["MLSCHED_ELASTIC_BATCH_SIZE"] == "128"
    assert c.sink.of(SuspendCommand) == [] and c.sink.of(LaunchCommand) == []
    assert live_ranks(c, job) == [(0, (0,), TaskState.RUNNING), (1, (1,), TaskState.LAUNCHING)]
    assert c.job(job.id).state is JobState.RUNNING
    c.report(job.id, 1, TaskState.RUNNING)
    assert c.sink.of(KillCommand) == []  # the new rank is known
    c.clock.advance(2.0)
    regroup_progress(c, job, 0, batch=64)  # before the switch
    assert messages(c, job, "job_resized") == []
    c.clock.advance(1.5)
    regroup_progress(c, job, 1, batch=128, iteration=11)
    assert messages(c, job, "job_resized") == [
        "1 -> 2 GPUs, global batch 128, by in-place regroup in 3.50 s; test: predicted gain 0.25"
    ]
    assert c.job(job.id).attempt == 1 and c.job(job.id).suspensions == 0


def test_a_shrink_settles_once_the_leaving_rank_ended_and_a_regrow_uses_its_rank_again(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 2, BatchRule.FIXED_GLOBAL)
    start_following(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0))
    [(_, command)] = c.sink.of(RegroupCommand)
    assert (command.generation, command.world_size, command.new_ranks) == (1, 1, ())
    c.clock.advance(1.0)
    regroup_progress(c, job, 1)  # rank 0 switched; rank 1 has not reported its end yet
    assert messages(c, job, "job_resized") == []
    c.report(job.id, 1, TaskState.COMPLETED, message="left the group at regroup 1")
    assert c.job(job.id).state is JobState.RUNNING  # only rank 0's end completes the job
    regroup_progress(c, job, 1, iteration=11)
    assert messages(c, job, "job_resized") == [
        "2 -> 1 GPUs, global batch 64, by in-place regroup in 1.00 s; test: predicted gain 0.25"
    ]
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))  # and back
    [(_, command)] = c.sink.of(RegroupCommand)
    assert (command.generation, command.world_size, command.new_ranks) == (2, 2, ((1, (1,)),))
    assert live_ranks(c, job) == [(0, (0,), TaskState.RUNNING), (1, (1,), TaskState.LAUNCHING)]
    c.report(job.id, 1, TaskState.RUNNING)
    regroup_progress(c, job, 2, iteration=12)
    assert len(messages(c, job, "job_resized")) == 2


def test_a_regroup_never_reported_is_abandoned_and_the_next_resize_suspends(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    start_following(c, job, tp(0, "n1", 0))
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))  # an agent that refuses it says nothing
    c.sink.clear()
    c.clock.advance(10.5)  # past the order's lease of 10 s
    regroup_progress(c, job, 0)
    assert messages(c, job, "resize_abandoned") == [
        "in-place regroup: regroup 1 not reported after 10 s"
    ]
    assert [cmd.task.rank for _, cmd in c.sink.of(KillCommand)] == [1]
    assert live_ranks(c, job) == [(0, (0,), TaskState.RUNNING)]
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    assert c.sink.of(RegroupCommand) == []
    assert c.job(job.id).state is JobState.SUSPENDING


def test_a_regroup_with_no_report_at_all_is_abandoned_and_the_job_suspended(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    start_following(c, job, tp(0, "n1", 0))
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    c.report(job.id, 1, TaskState.RUNNING)
    c.clock.advance(9.0)
    c.scheduler.policy = StubPolicy(Decision(renew=(Renew(job.id, 10.0),)))  # as ONES does
    c.cycle()
    assert messages(c, job, "resize_abandoned") == []
    c.sink.clear()
    c.clock.advance(1.5)  # past the order's lease; rank 0 hangs in the switch: no report
    c.cycle()
    assert messages(c, job, "resize_abandoned") == [
        "in-place regroup: regroup 1 not done after 10 s; the job is suspended"
    ]
    assert c.job(job.id).state is JobState.SUSPENDING
    assert sorted(type(cmd).__name__ + str(cmd.task.rank) for _, cmd in c.sink.sent) == [
        "KillCommand1",
        "SuspendCommand0",
    ]


def test_a_script_that_does_not_follow_regroups_is_resized_by_checkpoint_restart(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    start(c, job, tp(0, "n1", 0))
    c.events.progress("n1", job.id, 0, 1, Progress(1, 1.0, {}, 0.1, 64, 0.0))  # no generation
    c.sink.clear()
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    assert c.sink.of(RegroupCommand) == []
    assert c.job(job.id).state is JobState.SUSPENDING


def test_the_regroup_command_goes_to_the_agent_as_a_regroup_task(cluster):
    c = cluster
    c.add_node("n1", 2)
    job = elastic_job(c, 1, BatchRule.FIXED_GLOBAL)
    start_following(c, job, tp(0, "n1", 0))
    resize(c, job, tp(0, "n1", 0), tp(1, "n1", 1))
    [(_, command)] = c.sink.of(RegroupCommand)
    message = dispatch.encode(command).regroup
    assert (message.job_id, message.attempt, message.generation) == (job.id, 1, 1)
    assert message.world_size == 2 and message.batch_size == 64
    assert [(r.rank, list(r.gpu_indices)) for r in message.new_ranks] == [(1, [1])]
    assert message.spec.name == job.spec.name and message.user == "alice"
