"""ONES (issue 15): the progress predictor, the batch-size limit rules and deployment."""

from __future__ import annotations

import numpy as np
import pytest

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, JobView
from controller.policy.ones import OnesPolicy, Track
from controller.policy.ones_predict import (
    PRIOR,
    ProgressModel,
    Status,
    beta_parameters,
    remaining_samples,
)
from mlsched.model import BatchRule, ElasticSpec, IterationStop, JobSpec, JobState

# --- the predictor ------------------------------------------------------------------------------


def test_beta_parameters_are_epochs_done_and_to_do_at_least_one():
    assert beta_parameters(4.0, 0.5) == (4.0, 4.0)  # mean 0.5
    assert beta_parameters(10.0, 0.25) == (10.0, 30.0)  # mean 10 / 40
    assert beta_parameters(0.5, 0.8) == (1.0, 1.0)  # both thresholded


def test_features_hold_the_loss_improvement_ratio():
    status = Status(epoch_size=999.0, initial_loss=2.0, samples=0.0, loss=1.5, accuracy=0.3)
    assert status.features()[3] == pytest.approx(0.25)  # (2 - 1.5) / 2
    assert status.features()[0] == pytest.approx(np.log(1000.0))
    assert Status.of({"samples": 50.0, "epoch_size": 25.0}).epochs == 2.0


def test_remaining_samples_follow_eq_7():
    # 1000 epochs done at predicted progress 0.25: Beta(1000, 3000) is narrow around 0.25,
    # so R = S (1 - p) / p is near 3 S
    got = remaining_samples(
        np.array([100.0]), np.array([1000.0]), np.array([0.25]), 50, np.random.default_rng(0)
    )
    assert got.shape == (1, 50)
    assert got.mean() == pytest.approx(300.0, rel=0.05)


def _history(epochs: int, epoch_size: float = 100.0) -> list[Status]:
    return [
        Status(epoch_size, 2.0, k * epoch_size, 2.0 - k / epochs, 0.9 * k / epochs)
        for k in range(1, epochs + 1)
    ]


def test_the_regressor_learns_progress_from_completed_jobs():
    model = ProgressModel(np.random.default_rng(0))
    assert model.mean([_history(4)[0]])[0] == PRIOR  # nothing learnt yet
    for _ in range(3):
        model.add_job(_history(10), final_samples=1000.0)  # labels 0.1 .. 1.0
    early, late = model.mean([_history(10)[1], _history(10)[7]])
    assert early == pytest.approx(0.2, abs=0.1) and late == pytest.approx(0.8, abs=0.1)


def test_the_training_set_keeps_a_uniform_sample_up_to_its_capacity():
    model = ProgressModel(np.random.default_rng(0), capacity=25)
    for _ in range(3):
        model.add_job(_history(10), final_samples=1000.0)
    assert model.points == 25


# --- the limit rules and deployment ---------------------------------------------------------


def _spec(gpus=4, batch=128, most=2048, high=8):
    return JobSpec(
        name="j",
        command=("x",),
        gpus=gpus,
        stopping=IterationStop(100),
        batch_size=batch,
        elastic=ElasticSpec(1, high, BatchRule.SCHEDULER, most, True),
    )


def _queued(job_id, submit=0.0, **metrics):
    return JobView(job_id, "u", _spec(), JobState.PENDING, submit, submit, 0, 0, metrics=metrics)


def _running(job_id, gpus, node="n0", **metrics):
    placement = tuple(TaskPlacement(i, node, (i,)) for i in range(gpus))
    return JobView(
        job_id,
        "u",
        _spec(),
        JobState.RUNNING,
        0.0,
        0.0,
        1,
        0,
        metrics=metrics,
        placement=placement,
        lease_expires_at=1000.0,
    )


def _snap(now, active=(), queued=(), gpus=4):
    return ClusterSnapshot.of(now, {"n0": gpus}, active=active, queued=queued)


def test_start_a_new_job_is_limited_to_one_gpu_at_its_own_per_gpu_batch():
    policy = OnesPolicy(seed=0)
    decision = policy.decide(_snap(0.0, queued=[_queued("a")]))
    track = policy.tracks["a"]
    assert (track.local, track.limit, track.batch) == (32, 32, 128)  # 128 over 4 GPUs
    assert [len(x.placement) for x in decision.launch] == [1]


def test_scale_up_doubles_the_limit_per_finished_epoch_up_to_the_maximum():
    policy = OnesPolicy(seed=0)
    metrics = {"samples": 0.0, "epoch": 0.0, "epoch_size": 100.0, "batch_size": 128.0}
    policy.decide(_snap(0.0, active=[_running("a", 1, **metrics)]))
    assert policy.tracks["a"].limit == 32
    policy.decide(_snap(10.0, active=[_running("a", 1, **{**metrics, "epoch": 1.0})]))
    assert policy.tracks["a"].limit == 64
    policy.decide(_snap(20.0, active=[_running("a", 1, **{**metrics, "epoch": 3.0})]))
    assert policy.tracks["a"].limit == 256  # two more epochs: x4
    policy.decide(_snap(30.0, active=[_running("a", 1, **{**metrics, "epoch": 9.0})]))
    assert policy.tracks["a"].limit == 2048  # x64 would pass max_batch_size


def test_start_lifts_the_limit_to_the_users_batch_once_warm_up_measured_a_throughput():
    policy = OnesPolicy(seed=0)
    metrics = {"samples": 0.0, "epoch": 0.0, "epoch_size": 100.0, "batch_size": 32.0}
    policy.decide(_snap(0.0, active=[_running("a", 1, **metrics)]))
    assert policy.tracks["a"].limit == 32  # no throughput yet: one GPU at 32
    policy.decide(_snap(10.0, active=[_running("a", 1, **metrics, throughput=50.0)]))
    assert policy.tracks["a"].limit == 128  # the user's 128 over 4 GPUs
    done = {**metrics, "epoch": 1.0, "throughput": 50.0}
    policy.decide(_snap(20.0, active=[_running("a", 1, **done)]))
    assert policy.tracks["a"].limit == 256  # then doubles per epoch


def test_resume_halves_the_limit_of_a_job_passed_over_but_not_below_one_gpu():
    policy = OnesPolicy(seed=0)
    policy.tracks["w"] = Track(local=32, limit=256, batch=128, ran=True)
    policy.tracks["r"] = Track(local=32, limit=32, batch=128, ran=True)
    view = _queued("w")
    policy._deploy(_snap(0.0, queued=[view]), best=(("r", 32),), genes={})
    assert policy.tracks["w"].limit == 128
    for _ in range(5):
        policy._deploy(_snap(0.0, queued=[view]), best=(("r", 32),), genes={})
    assert policy.tracks["w"].limit == 32


def test_batch_bounds_follow_the_limit_memory_and_lr_steps():
    policy = OnesPolicy()
    # a worker within [50 / 2, 50 x 2]; the global batch within [100 / 2, min(1000, 2 x 100)]
    assert policy.bounds(Track(local=50, limit=1000, batch=100, ran=True)) == (50, 25, 100, 50, 200)
    # the limit wins over the lr step's lower bound (the gene's fit clamps to ``high`` last)
    assert policy.bounds(Track(local=50, limit=60, batch=200, ran=True)) == (50, 25, 100, 100, 60)
    # a job that never ran: only the start limit (one GPU at its own batch)
    assert policy.bounds(Track(local=50, limit=50, batch=400)) == (50, 25, 100, 1, 50)
    assert policy.bounds(Track(local=1, limit=1, batch=0)) == (0, 0, 0, 0, 0)  # not its batch


def test_the_deployed_plan_carries_the_genomes_batches():
    policy = OnesPolicy(seed=0)
    policy.tracks["a"] = Track(local=32, limit=256, batch=128, ran=True)
    best = (("a", 40), ("a", 24), None, None)
    policy._deploy(_snap(0.0, active=[_running("a", 2)]), best=best, genes={})
    assert policy.plan == {"a": (2, 64)}


def test_throughput_off_the_measured_points_follows_the_fitted_step_time():
    policy = OnesPolicy()
    # one GPU at 32: 100 samples/s (a step of 0.32 s); at 64: 160/s (0.4 s), so a worker's step
    # is 0.24 + 0.0025 m s and eff(m) = m / (0.24 + 0.0025 m): eff(32) = 100, eff(48) = 133.3
    track = Track(local=32, limit=512, batch=64, rates={(1, 32): 100.0, (1, 64): 160.0})
    shape = policy.step_model(track)
    assert shape == pytest.approx((0.24, 0.0025))
    assert policy.throughput(track, 1, 64, shape) == 160.0  # measured
    # 48 per GPU: the closest measured (a tie: the first, 32) x 133.3 / 100, on 2 GPUs
    assert policy.throughput(track, 2, 96, shape) == pytest.approx(2 * 100 * 4 / 3)
    assert policy.throughput(track, 2, 96) == pytest.approx(200.0)  # no step model: flat
    # one batch of its own measured: its model's points (another job's) give the shape
    policy.steps["m"] = {32.0: 0.32, 64.0: 0.4}
    alone = Track(local=32, limit=512, batch=32, model="m", rates={(1, 32): 50.0})
    assert policy.step_model(alone) == pytest.approx((0.24, 0.0025))
    assert policy.step_model(Track(local=32, limit=32, batch=32, model="x")) is None


def test_scale_down_penalty_grows_with_executed_time_over_the_mean_interarrival():
    policy = OnesPolicy(seed=0)
    first = [_queued("a", 0.0), _queued("b", 30.0), _queued("c", 60.0)]
    policy.decide(_snap(60.0, queued=first))  # arrivals 30 s apart: k = 30
    policy.tracks["a"].executed_s = 90.0
    gene = policy.gene(_running("a", 1), 60.0)
    assert gene.penalty == pytest.approx(3.0)
    policy.tracks["a"].executed_s = 10.0
    assert policy.gene(_running("a", 1), 60.0).penalty == 1.0


def test_a_new_schedule_waits_until_every_running_job_finished_an_epoch():
    policy = OnesPolicy(seed=0)
    metrics = {"samples": 0.0, "epoch": 0.0, "epoch_size": 100.0, "batch_size": 128.0}
    a, b = _running("a", 1, **metrics), _running("b", 1, node="n0", **metrics)
    b = JobView(**{**b.__dict__, "placement": (TaskPlacement(0, "n0", (1,)),)})
    policy.decide(_snap(0.0, active=[a, b]))
    plan = dict(policy.plan)
    assert policy._due(_snap(5.0, active=[a, b])) is False
    a1 = JobView(**{**a.__dict__, "metrics": {**metrics, "epoch": 1.0}})
    policy.decide(_snap(5.0, active=[a1, b]))
    assert policy.plan == plan and policy._due(_snap(5.0, active=[a1, b])) is False
    b1 = JobView(**{**b.__dict__, "metrics": {**metrics, "epoch": 1.0}})
    policy._report(b1, policy.tracks["b"], 6.0, 1.0)
    assert policy._due(_snap(6.0, active=[a1, b1])) is True


def test_the_same_seed_gives_the_same_decisions():
    jobs = [_queued(k, float(i)) for i, k in enumerate("abcdef")]
    one = OnesPolicy(seed=7).decide(_snap(10.0, queued=jobs, gpus=8))
    two = OnesPolicy(seed=7).decide(_snap(10.0, queued=jobs, gpus=8))
    assert one == two
    used = [g for x in one.launch for p in x.placement for g in p.gpu_indices]
    assert len(used) == len(set(used)) <= 8


def test_a_pausing_job_showing_only_its_loss_keeps_its_last_report():
    policy = OnesPolicy(seed=0)
    full = {"samples": 400.0, "epoch": 4.0, "epoch_size": 100.0, "batch_size": 128.0}
    policy.decide(_snap(0.0, active=[_running("a", 1, **full)]))
    gene = policy.gene(_running("a", 1, loss=0.5), 10.0)
    assert gene.samples == 400.0
    policy.tracks["a"].deployed_epoch = 4
    assert policy._due(_snap(10.0, active=[_running("a", 1, loss=0.5)])) is False
