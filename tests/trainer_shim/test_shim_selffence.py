"""Self-fencing of a training process whose agent falls silent (trainer_shim/selffence.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from shim_testkit import PYTHON, FakeAgent, cluster_env, subprocess_env

import trainer_shim
from mlsched.v1 import trainer_pb2
from trainer_shim.env import parse_env
from trainer_shim.selffence import FenceAction, SilenceWatch

TASK = "j-test/0/1"
HANG_S = 120.0  # only a hang takes this long

# Trains until told to suspend, then saves a checkpoint and leaves: exit 0.
OBEDIENT = """
import torch, trainer_shim
model = torch.nn.Linear(2, 1)
with trainer_shim.init() as job:
    step = job.restore(model)
    while not job.should_suspend():
        step += 1
        job.report(step, loss=0.5)
    job.save_checkpoint(step, model)
"""

# Never asks whether to suspend: only the hard deadline ends it.
DEAF = """
import trainer_shim
with trainer_shim.init() as job:
    step = 0
    while True:
        step += 1
        job.report(step, loss=0.5)
"""


def test_silence_calls_for_suspend_then_exit_at_hand_computed_times() -> None:
    watch = SilenceWatch(4.0, 7.0, now=100.0)
    assert watch.check(103.9) is FenceAction.NONE
    assert watch.check(104.0) is FenceAction.SUSPEND
    watch.heard(103.0)  # the agent spoke at 103: silent since then
    assert watch.check(106.9) is FenceAction.NONE
    assert watch.check(107.0) is FenceAction.SUSPEND
    assert watch.check(110.0) is FenceAction.EXIT
    watch.heard(102.0)  # an older message never moves the last one back
    assert watch.silence_s(110.0) == 7.0


@pytest.mark.parametrize(("suspend", "exit_"), [(0.0, 1.0), (2.0, 1.0), (float("nan"), 3.0)])
def test_bad_deadlines_are_refused(suspend: float, exit_: float) -> None:
    with pytest.raises(ValueError):
        SilenceWatch(suspend, exit_, now=0.0)


def test_the_deadlines_come_from_the_environment_together(tmp_path: Path) -> None:
    base = cluster_env(tmp_path, "127.0.0.1:1")
    env = parse_env(
        {**base, "MLSCHED_FENCE_SUSPEND_AFTER_S": "4.0", "MLSCHED_FENCE_EXIT_AFTER_S": "7.5"}
    )
    assert (env.fence_suspend_after_s, env.fence_exit_after_s) == (4.0, 7.5)
    assert parse_env(base).fence_suspend_after_s is None
    with pytest.raises(ValueError, match="set together"):
        parse_env({**base, "MLSCHED_FENCE_SUSPEND_AFTER_S": "4"})
    with pytest.raises(ValueError, match=">="):
        parse_env({**base, "MLSCHED_FENCE_SUSPEND_AFTER_S": "4", "MLSCHED_FENCE_EXIT_AFTER_S": "3"})
    with pytest.raises(ValueError, match="positive"):
        parse_env(
            {**base, "MLSCHED_FENCE_SUSPEND_AFTER_S": "inf", "MLSCHED_FENCE_EXIT_AFTER_S": "9"}
        )


def _run(script: str, contract: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-c", script],
        env=subprocess_env(contract),
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_a_silent_agent_makes_the_trainer_checkpoint_and_exit(
    agent: FakeAgent, tmp_path: Path
) -> None:
    """The test peer never speaks: an agent stopped by SIGSTOP."""
    contract = cluster_env(
        tmp_path,
        agent.addr,
        MLSCHED_FENCE_SUSPEND_AFTER_S="0.5",
        MLSCHED_FENCE_EXIT_AFTER_S="60",
    )
    result = _run(OBEDIENT, contract)
    assert result.returncode == 0, result.stderr
    assert "self-fencing: no word from the node agent" in result.stderr
    record = json.loads(Path(contract["MLSCHED_EXIT_FILE"]).read_text())
    assert record["outcome"] == "suspended"
    assert record["reason"].startswith("self-fencing: no word from the node agent for ")
    assert record["checkpoint_step"] == record["step"] > 0
    saves = [r.request.save for r in agent.requests(TASK, "save")]
    assert [(s.in_progress, s.step) for s in saves] == [
        (True, record["step"]),
        (False, record["step"]),
    ]


def test_a_trainer_that_never_checks_is_ended_at_the_exit_deadline(
    agent: FakeAgent, tmp_path: Path
) -> None:
    contract = cluster_env(
        tmp_path,
        agent.addr,
        MLSCHED_FENCE_SUSPEND_AFTER_S="0.5",
        MLSCHED_FENCE_EXIT_AFTER_S="1.0",
    )
    result = _run(DEAF, contract)
    assert result.returncode == trainer_shim.context.SELF_FENCE_EXIT_CODE, result.stderr
    assert "exiting now" in result.stderr
    record = json.loads(Path(contract["MLSCHED_EXIT_FILE"]).read_text())
    assert record["outcome"] == "suspended" and record["step"] > 0


def test_a_lease_ended_without_renewal_asks_to_suspend(agent: FakeAgent, tmp_path: Path) -> None:
    with trainer_shim.init(environ=cluster_env(tmp_path, agent.addr)) as job:
        job.report(1)
        renewed = trainer_pb2.LeaseNotice(expires_at=1_900_000_000.0, renewed=True)
        agent.send(TASK, trainer_pb2.TrainerSessionResponse(lease=renewed))
        assert job.control.wait_for(lambda c: c.lease_expires_at is not None, timeout=HANG_S)
        assert not job.should_suspend()
        ended = trainer_pb2.LeaseNotice(expires_at=1_900_000_000.0, renewed=False)
        agent.send(TASK, trainer_pb2.TrainerSessionResponse(lease=ended))
        assert job.control.wait_for(lambda c: not c.lease_renewed, timeout=HANG_S)
        assert job.should_suspend()
        assert job.suspend_reason == "lease expired and not renewed"
