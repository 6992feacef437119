"""The trainer session against an in-process test peer (tests/trainer_shim/shim_testkit.py)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from shim_testkit import FakeAgent, cluster_env, free_port, suspend_now
from torch import nn

import trainer_shim
from mlsched.v1 import trainer_pb2

TASK = "j-test/0/1"
HANG_S = 120.0  # only a hang takes this long: no step below waits for anything but itself


def test_restored_progress_and_checkpoint_notices_carry_the_task_metadata(
    agent: FakeAgent, tmp_path: Path
) -> None:
    environ = cluster_env(tmp_path, agent.addr)
    model = nn.Linear(2, 2)
    with trainer_shim.init(environ=environ) as job:
        assert job.restore(model) == 0
        job.report(1, loss=0.5, iteration_time=0.01, batch_size=16, compute_time=0.0075)
        assert agent.wait_for(lambda a: a.max_iteration(TASK) == 1)
        job.report(2, loss=0.25, metrics={"accuracy": 0.75}, batch_size=16)
        path = job.save_checkpoint(2, model)
        assert agent.wait_for(lambda a: bool(a.requests(TASK, "checkpoint_saved")))
    kinds = [r.kind for r in agent.requests(TASK)]
    assert kinds[0] == "restored"
    assert kinds.count("restored") == 1
    assert agent.requests(TASK, "restored")[0].request.restored.step == 0
    saved = agent.requests(TASK, "checkpoint_saved")[0].request.checkpoint_saved
    assert (saved.step, Path(saved.path)) == (2, path)
    assert {r.token for r in agent.requests()} == {environ["MLSCHED_TASK_TOKEN"]}
    assert agent.sessions[0]["mlsched-task-id"] == TASK
    first, last = agent.progress(TASK)[0], agent.progress(TASK)[-1]
    assert (first.iteration, first.loss, first.batch_size) == (1, 0.5, 16)
    assert (first.iteration_time_s, first.compute_time_s) == (0.01, 0.0075)
    assert (last.iteration, last.loss, dict(last.metrics)) == (2, 0.25, {"accuracy": 0.75})
    assert (last.iteration_time_s, last.compute_time_s) == (0.0, 0.0)  # not measured: unset
    assert last.time > 0
    record = json.loads(Path(environ["MLSCHED_EXIT_FILE"]).read_text())
    assert record == {"outcome": "completed", "step": 2, "checkpoint_step": 2, "reason": ""}


def test_progress_is_rate_limited_but_the_newest_always_arrives(
    agent: FakeAgent, tmp_path: Path
) -> None:
    with trainer_shim.init(environ=cluster_env(tmp_path, agent.addr), report_interval=5) as job:
        for step in range(1, 501):
            metrics = {"accuracy": 0.9} if step == 100 else None
            job.report(step, loss=1.0 / step, metrics=metrics)
    progress = agent.progress(TASK)
    assert len(progress) <= 3  # the first, maybe one more, and the flushed last
    assert progress[-1].iteration == 500
    assert dict(progress[-1].metrics) == {"accuracy": 0.9}  # reported at 100, not lost


def test_suspend_now_sets_should_suspend(agent: FakeAgent, tmp_path: Path) -> None:
    environ = cluster_env(tmp_path, agent.addr)
    with trainer_shim.init(environ=environ) as job:
        job.report(1)
        assert not job.should_suspend()
        agent.send(TASK, suspend_now("preempted by j-other"))
        assert job.control.wait_for(lambda c: c.suspend_reason is not None, timeout=10)
        assert job.should_suspend()
        assert not job.should_stop()
    record = json.loads(Path(environ["MLSCHED_EXIT_FILE"]).read_text())
    assert record["outcome"] == "suspended"
    assert record["reason"] == "SuspendNow: preempted by j-other"


def test_stop_now_sets_should_stop_with_its_reason(agent: FakeAgent, tmp_path: Path) -> None:
    environ = cluster_env(tmp_path, agent.addr)
    with trainer_shim.init(environ=environ) as job:
        job.report(1)
        stop = trainer_pb2.StopNow(reason="target reached on the controller")
        agent.send(TASK, trainer_pb2.TrainerSessionResponse(stop=stop))
        assert job.control.wait_for(lambda c: c.stop_reason is not None, timeout=10)
        assert job.should_stop()
        assert not job.should_suspend()
    record = json.loads(Path(environ["MLSCHED_EXIT_FILE"]).read_text())
    assert record["outcome"] == "completed"
    assert record["reason"] == "StopNow: target reached on the controller"


def test_batch_size_changes_and_lease_notices_are_visible(agent: FakeAgent, tmp_path: Path) -> None:
    with trainer_shim.init(environ=cluster_env(tmp_path, agent.addr)) as job:
        job.report(1)
        change = trainer_pb2.ChangeBatchSize(batch_size=512)
        agent.send(TASK, trainer_pb2.TrainerSessionResponse(change_batch_size=change))
        lease = trainer_pb2.LeaseNotice(expires_at=1_900_000_000.5, renewed=True)
        agent.send(TASK, trainer_pb2.TrainerSessionResponse(lease=lease))
        assert job.control.wait_for(lambda c: c.lease_expires_at is not None, timeout=10)
        assert job.requested_batch_size() == 512
        assert job.requested_batch_size() is None  # returned once
        assert job.lease_expires_at == 1_900_000_000.5
        assert job.control.lease_renewed


@pytest.fixture(params=["refused", "silent"])
def unreachable_addr(request: pytest.FixtureRequest) -> Iterator[str]:
    """An agent address that never answers: nobody listens there ("refused"), or a socket
    listens but never accepts or speaks ("silent": the TCP handshake completes, gRPC's never
    does)."""
    if request.param == "refused":
        yield f"127.0.0.1:{free_port()}"
        return
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield f"127.0.0.1:{silent.getsockname()[1]}"


def test_unreachable_agent_never_blocks_training(tmp_path: Path, unreachable_addr: str) -> None:
    """Training, checkpoints and the exit against an agent that never answers. Nothing here is
    timed: a call that waited for the agent would wait forever, so finishing at all is the
    proof (the join's bound only turns that hang into a failure instead of a stuck run)."""
    environ = cluster_env(tmp_path, unreachable_addr)
    model = nn.Linear(2, 2)

    def train() -> None:
        with trainer_shim.init(environ=environ, flush_timeout=0.5) as job:
            job.restore(model)
            for step in range(1, 2001):
                job.report(step, loss=0.1)
            job.save_checkpoint(2000, model)

    trainer = threading.Thread(target=train, daemon=True)
    trainer.start()
    trainer.join(HANG_S)
    assert not trainer.is_alive(), "training waited for an agent that never answers"
    record = json.loads(Path(environ["MLSCHED_EXIT_FILE"]).read_text())
    assert (record["outcome"], record["step"], record["checkpoint_step"]) == (
        "completed",
        2000,
        2000,
    )


def test_refused_session_keeps_training_and_retries(tmp_path: Path) -> None:
    agent = FakeAgent(tokens={}).start()  # knows no task: every session is refused
    try:
        with trainer_shim.init(environ=cluster_env(tmp_path, agent.addr), flush_timeout=0.5) as job:
            assert agent.wait_for(lambda a: len(a.refused) >= 2)  # it retried
            job.report(1)
            assert not job.should_stop()
    finally:
        agent.stop()


def test_reconnects_to_the_address_in_the_file_and_resends_the_newest(
    agent: FakeAgent, tmp_path: Path
) -> None:
    environ = cluster_env(tmp_path, agent.addr)
    second = FakeAgent().start()
    try:
        with trainer_shim.init(environ=environ) as job:
            job.report(1)
            assert agent.wait_for(lambda a: a.max_iteration(TASK) == 1)
            job.report(2, metrics={"accuracy": 0.5})
            # The agent restarts on another port and publishes it in the address file.
            Path(environ["MLSCHED_AGENT_ADDR_FILE"]).write_text(second.addr)
            agent.stop()
            assert second.wait_for(lambda a: a.max_iteration(TASK) == 2)
            latest = second.progress(TASK)[-1]
            assert dict(latest.metrics) == {"accuracy": 0.5}
            assert second.sessions[0]["mlsched-task-token"] == environ["MLSCHED_TASK_TOKEN"]
            second.send(TASK, suspend_now())  # commands flow on the new stream too
            assert job.control.wait_for(lambda c: c.suspend_reason is not None, timeout=10)
    finally:
        second.stop()
