"""MLF-RL training (simulator/rltrain.py): the reward by hand, the returns, the convergence rule,
a tiny training run through ``mlsched mlfs-train`` and its input errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mlsched.cli import main
from mlsched.model import Deadline, MlfsSpec
from simulator.rltrain import (
    TrainConfig,
    converged,
    cycle_rewards,
    discounted_returns,
    episode_objectives,
    episode_reward,
    split,
)
from simulator.types import JobRecord, ResourceDemand, SimResult, TraceJob

HEADER = (
    "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,"
    "expect_time_list,expect_value_list,best_effort,job_type\n"
)
# Chronus Philly rows (minutes): 12 jobs, 1-8 GPUs, overlapping on a 2x4 cluster.
ROWS = [
    f"{i},u{i % 3},{gpus},{i},{100 * (i + 1)},{model},{10 + 3 * i},5,{deadline},10,0,strict"
    for i, (gpus, model, deadline) in enumerate(
        [
            (4, "resnet50", 40),
            (2, "vgg16", 30),
            (1, "resnet50", 25),
            (8, "vgg16", 90),
            (2, "resnet50", 40),
            (1, "vgg16", 35),
            (4, "resnet50", 80),
            (1, "resnet50", 50),
            (2, "vgg16", 60),
            (1, "vgg16", 45),
            (4, "resnet50", 120),
            (1, "resnet50", 70),
        ]
    )
]
MODEL_INFO = {
    "resnet50": {"2": {"1": 1.0, "2": 0.9}, "4": {"1": 1.0, "2": 0.8}, "8": {"2": 0.7}},
    "vgg16": {"2": {"1": 1.0, "2": 0.6}, "4": {"1": 1.0, "2": 0.5}, "8": {"2": 0.4}},
}
TINY = [
    "--cluster",
    "2x4",
    "--epochs",
    "1",
    "--episode-jobs",
    "4",
    "--validation-jobs",
    "4",
    "--imitation-episodes",
    "1",
    "--imitation-epochs",
    "2",
    "--episodes-per-epoch",
    "1",
    "--quiet",
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "\n".join(ROWS) + "\n")
    (tmp_path / "model_info.json").write_text(json.dumps(MODEL_INFO))
    return path


def hand_result() -> SimResult:
    """Job a: 2 GPUs, ring 100 MB over 10 iterations (worst case 2 GB), deadline 120 s, needs
    accuracy 0.5; runs 0-100 s, reaches 0.6, sends 1 GB. Job b: 1 GPU, no deadline, no
    requirement; runs 50-250 s, reaches 0.8. Mean trace duration (50 + 150) / 2 = 100 s."""
    demand = ResourceDemand(0.5, 0.1, 0.1, 0.1, ring_mb=100.0)
    a = TraceJob(
        "a",
        "u",
        0.0,
        50.0,
        2,
        iterations=10,
        deadlines=(Deadline(120.0, 1.0),),
        mlfs=MlfsSpec(required_accuracy=0.5),
        demand=demand,
    )
    b = TraceJob("b", "u", 50.0, 150.0, 1, iterations=10, mlfs=MlfsSpec())
    records = [
        JobRecord(a, end_s=100.0, final_metric=0.6, accuracy_by_deadline=0.6, bandwidth_gb=1.0),
        JobRecord(b, end_s=250.0, final_metric=0.8, accuracy_by_deadline=0.8),
    ]
    return SimResult("x", 4, records, makespan_s=250.0)


def test_episode_objectives_by_hand() -> None:
    # g1 = -mean JCT / T = -(100 + 200) / 2 / 100; g2: a met its deadline; g3 = -1 GB / 2 GB;
    # g4: a reached 0.5; g5 = (0.6 + 0.8) / 2
    g = episode_objectives(hand_result())
    assert g == pytest.approx((-1.5, 1.0, -0.5, 1.0, 0.7))
    # Eq. 7, β of §4.1: 0.5 * -1.5 + 0.55 + 0.25 * -0.5 + 0.15 + 0.15 * 0.7
    assert episode_reward(hand_result()) == pytest.approx(-0.07)


def test_cycle_rewards_by_hand() -> None:
    # cycles at 0, 100, 200 s; intervals [0, 100), [100, 200), [200, 250]
    # g1: 150, 100, 50 job-seconds over N T = 200; a ends in interval 1 (deadline, accuracy
    # 0.6 / 2), b in interval 2 (0.8 / 2); a's 1 GB spread 3:1 over intervals 0 and 1.
    rewards = cycle_rewards(hand_result(), [0.0, 100.0, 200.0], [{"a": 0.3}, {"a": 0.1}, {}])
    expected = [
        0.5 * -0.75 + 0.25 * -0.375,
        0.5 * -0.5 + 0.55 + 0.25 * -0.125 + 0.15 + 0.15 * 0.3,
        0.5 * -0.25 + 0.15 * 0.4,
    ]
    assert rewards == pytest.approx(expected)
    assert rewards.sum() == pytest.approx(episode_reward(hand_result()))
    # without traffic estimates the bandwidth is credited where the job ends
    late = cycle_rewards(hand_result(), [0.0, 100.0, 200.0])
    assert late[1] - rewards[1] == pytest.approx(0.25 * -0.5 - 0.25 * -0.125)
    assert late.sum() == pytest.approx(episode_reward(hand_result()))


def test_discounted_returns() -> None:
    rewards = np.array([1.0, 2.0, 3.0])
    assert discounted_returns(rewards, 0.5, 1) == pytest.approx([2.0, 3.5, 3.0])
    assert discounted_returns(rewards, 0.95, 30)[0] == pytest.approx(1 + 0.95 * 2 + 0.95**2 * 3)


def test_convergence_rule() -> None:
    assert converged([-1.0, -1.005, -1.009, -1.01], tolerance=0.01, patience=3)
    assert not converged([-1.0, -0.5, -0.501, -0.502], tolerance=0.01, patience=3)
    assert converged([-1.0, -0.5, -0.501, -0.502], tolerance=0.01, patience=2)
    assert not converged([-1.0, -1.0], tolerance=0.01, patience=3)  # too few epochs


def test_the_training_queue_is_the_larger_slice() -> None:
    # what a step may offer in training and validation (MlfRlPolicy reads it from the meta)
    assert TrainConfig(episode_jobs=300, validation_jobs=120).queue == 300
    assert TrainConfig(episode_jobs=50, validation_jobs=120).queue == 120


def test_split() -> None:
    jobs = [TraceJob(str(i), "u", float(i), 10.0, 1) for i in range(11)]
    episodes, held_out = split(jobs, TrainConfig(episode_jobs=4, validation_jobs=3))
    assert [j.id for j in held_out] == ["8", "9", "10"]
    assert [len(e) for e in episodes] == [4, 4]
    episodes, _ = split(jobs[:10], TrainConfig(episode_jobs=3, validation_jobs=3))
    assert [len(e) for e in episodes] == [3, 4]  # the short tail joins the last episode
    with pytest.raises(ValueError, match="need at least"):
        split(jobs[:5], TrainConfig(episode_jobs=4, validation_jobs=3))


@pytest.mark.parametrize(
    "field, value",
    [("eta", 0.0), ("window", 0), ("epochs", -1), ("lr", 0.0), ("betas", (1.0,) * 4)],
)
def test_config_validation(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})  # type: ignore[arg-type]


def test_tiny_training_run_writes_a_loadable_model(trace: Path, tmp_path: Path) -> None:
    from controller.policy.mlfs.rl.network import load_model
    from controller.policy.mlfs.rl.policy import MlfRlPolicy

    out = tmp_path / "model.pt"
    args = ["mlfs-train", "--trace", str(trace), "--out", str(out), "--seed", "5", *TINY]
    assert main([*args, "--history", str(tmp_path / "h.json")]) == 0
    net, meta = load_model(out)
    assert meta["seed"] == 5 and meta["cluster"] == "2x4"
    assert meta["speed_model"] == "table"  # model_info.json beside the trace
    assert [h["epoch"] for h in meta["history"]] == [0, 1]
    assert meta["teacher_agreement"] == 1.0, "the replayed cycle equals MLF-H's decision"
    assert json.loads((tmp_path / "h.json").read_text())["history"] == meta["history"]
    policy = MlfRlPolicy(model_path=out)
    assert policy.meta["seed"] == 5
    assert policy.max_candidates == 4, "the window of its training: 4-job episodes"
    # the same seed gives the same model
    again = tmp_path / "again.pt"
    assert (
        main(["mlfs-train", "--trace", str(trace), "--out", str(again), "--seed", "5", *TINY]) == 0
    )
    twin, _ = load_model(again)
    for (name, a), (_, b) in zip(net.state_dict().items(), twin.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_training_without_a_table_warns_and_records_eq2(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.policy.mlfs.rl.network import load_model

    expected = trace.with_name("model_info.json")
    expected.unlink()
    out = tmp_path / "model.pt"
    assert main(["mlfs-train", "--trace", str(trace), "--out", str(out), *TINY]) == 0
    assert capsys.readouterr().err == (
        f"mlsched mlfs-train: warning: no model_info table for this Philly trace "
        f"({expected.resolve()} does not exist): job speeds use UniSched Eq. 2 defaults "
        "(T1 = 0.075, T2 = 0.12); put the trace's model_info.json there or pass "
        "--model-info PATH\n"
    )
    assert load_model(out)[1]["speed_model"] == "eq2-defaults"


def test_a_missing_model_info_path_is_an_error(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, missing = tmp_path / "m.pt", tmp_path / "none.json"
    args = ["mlfs-train", "--trace", str(trace), "--out", str(out), "--model-info", str(missing)]
    assert main(args) == 2
    assert capsys.readouterr().err == f"mlsched mlfs-train: --model-info {missing}: no such file\n"
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--epochs", "-1"], "epochs must be >= 0"),
        (["--limit", "0"], "--limit must be >= 1"),
        (["--window", "0"], "window must be >= 1"),
        (["--validation-jobs", "12"], "need at least"),
        (["--cluster", "nonsense"], "unknown cluster"),
    ],
)
def test_bad_arguments(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    out = tmp_path / "m.pt"
    assert main(["mlfs-train", "--trace", str(trace), "--out", str(out), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_inputs(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.csv"
    assert main(["mlfs-train", "--trace", str(missing), "--out", str(tmp_path / "m.pt")]) == 2
    assert "mlsched mlfs-train:" in capsys.readouterr().err
    nowhere = tmp_path / "no" / "dir" / "m.pt"
    assert main(["mlfs-train", "--trace", str(trace), "--out", str(nowhere)]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["mlfs-train", "--trace", str(trace)])  # --out is required
