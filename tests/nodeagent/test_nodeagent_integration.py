"""Integration: a real NodeAgent against an in-test controller peer, running real processes."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from nodeagent_testkit import (
    JOIN_TOKEN,
    ControllerServer,
    FakeController,
    agent_config,
    kill_leftovers,
    launch_message,
    wait_until,
    workdir_of,
)

from mlsched.v1 import agent_pb2, common_pb2, trainer_pb2, trainer_pb2_grpc
from nodeagent.agent import NodeAgent
from nodeagent.config import ConfigError
from nodeagent.gpus import VirtualGpus

pytestmark = pytest.mark.integration

S = common_pb2  # task states


def ref(job_id: str, rank: int = 0, attempt: int = 1) -> agent_pb2.TaskRef:
    return agent_pb2.TaskRef(job_id=job_id, rank=rank, attempt=attempt)


def wait_ready(tmp_path: Path, job_id: str) -> dict[str, str]:
    """Wait until a ``wait``-mode task is up; returns the environment it saw."""
    workdir = workdir_of(tmp_path, job_id)
    wait_until(lambda: (workdir / "ready").exists())
    return json.loads((workdir / "env.json").read_text())


def release(tmp_path: Path, job_id: str, outcome: str = "") -> None:
    (workdir_of(tmp_path, job_id) / "release").write_text(outcome)


def start_waiting_task(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
    job_id: str,
    *args: str,
) -> tuple[FakeController, dict[str, str]]:
    """Start an agent, launch a ``wait``-mode task on it and wait until the task is up.

    Returns the controller peer and the environment the task saw.
    """
    make_agent()
    peer = controller.servicer
    peer.send(launch=launch_message(tmp_path, task_script, job_id, "wait", *args))
    return peer, wait_ready(tmp_path, job_id)


def test_registers_with_virtual_gpus_and_reports_metrics(
    controller: ControllerServer, make_agent: Callable[..., NodeAgent]
) -> None:
    make_agent()
    peer = controller.servicer
    register = peer.wait_for("register")
    assert register.node_id == "node-a"
    assert register.address == "127.0.0.1"
    assert [(g.index, g.virtual) for g in register.gpus] == [(0, True), (1, True)]
    assert register.cpu_count == os.cpu_count()
    assert register.memory_total_bytes > 0
    assert register.agent_version
    assert list(register.tasks) == []
    metrics = peer.wait_for("metrics")
    assert metrics.node.memory_total_bytes > 0
    assert metrics.node.time > 0
    assert [(g.index, g.virtual, g.utilization_percent) for g in metrics.node.gpus] == [
        (0, True, 0.0),
        (1, True, 0.0),
    ]


def test_task_exit_0_completes_and_logs_are_fetchable(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    make_agent()
    peer = controller.servicer
    peer.wait_for("register")
    peer.send(launch=launch_message(tmp_path, task_script, "j-ok", "exit", "--code", "0"))
    launching = peer.wait_status("j-ok", S.TASK_STATE_LAUNCHING)
    running = peer.wait_status("j-ok", S.TASK_STATE_RUNNING)
    done = peer.wait_status("j-ok", S.TASK_STATE_COMPLETED)
    assert launching.pid == 0 and running.pid > 0
    assert done.exit_code == 0 and done.pid == running.pid

    log = tmp_path / "state" / "logs" / "j-ok" / "rank-0.log"
    text = log.read_text()
    assert text.startswith("=== attempt 1 on node node-a ===\n")
    assert "line 2 of rank 0" in text and "exiting with 0" in text

    peer.send(fetch_logs=agent_pb2.FetchLogs(request_id="r1", task=ref("j-ok")))
    reply = peer.wait_for("logs", lambda m: m.request_id == "r1")
    assert reply.error == "" and not reply.truncated
    assert "line 0 of rank 0" in reply.content
    peer.send(fetch_logs=agent_pb2.FetchLogs(request_id="r2", task=ref("j-ok"), max_bytes=20))
    reply = peer.wait_for("logs", lambda m: m.request_id == "r2")
    assert reply.truncated and len(reply.content.encode()) <= 20
    peer.send(fetch_logs=agent_pb2.FetchLogs(request_id="r3", task=ref("nope")))
    reply = peer.wait_for("logs", lambda m: m.request_id == "r3")
    assert reply.error and reply.content == ""

    record = tmp_path / "state" / "tasks" / "j-ok" / "rank-0-attempt-1.json"
    assert json.loads(record.read_text())["final_unacked"] is True
    peer.send(ack=agent_pb2.TaskStatusAck(task=ref("j-ok")))
    wait_until(lambda: not record.exists())
    assert log.exists()


def test_task_exit_3_fails_with_code_and_log_tail(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    make_agent()
    peer = controller.servicer
    peer.send(launch=launch_message(tmp_path, task_script, "j-bad", "exit", "--code", "3"))
    failed = peer.wait_status("j-bad", S.TASK_STATE_FAILED)
    assert failed.exit_code == 3
    assert "exit code 3" in failed.message
    assert "exiting with 3" in failed.message and "line 2 of rank 0" in failed.message


def test_suspend_of_a_script_ignoring_everything_ends_suspended_after_sigkill(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    peer, _ = start_waiting_task(
        tmp_path, controller, make_agent, task_script, "j-stub", "--ignore-term"
    )
    started = time.monotonic()
    peer.send(suspend=agent_pb2.SuspendTask(task=ref("j-stub"), grace_s=0.3, reason="preempt"))
    peer.wait_status("j-stub", S.TASK_STATE_SUSPENDING)
    suspended = peer.wait_status("j-stub", S.TASK_STATE_SUSPENDED)
    assert time.monotonic() - started >= 0.6  # SIGTERM after 0.3 s, SIGKILL after 0.6 s
    assert suspended.exit_code == -9
    assert "SIGKILL" in suspended.message


def test_kill_task_ends_killed(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    peer, _ = start_waiting_task(tmp_path, controller, make_agent, task_script, "j-kill")
    peer.send(kill=agent_pb2.KillTask(task=ref("j-kill"), reason="cancelled by user"))
    killed = peer.wait_status("j-kill", S.TASK_STATE_KILLED)
    assert "cancelled by user" in killed.message
    assert killed.exit_code == -15


def test_launch_is_idempotent_and_unknown_tasks_are_lost(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    make_agent()
    peer = controller.servicer
    launch = launch_message(tmp_path, task_script, "j-idem", "wait")
    peer.send(launch=launch)
    wait_ready(tmp_path, "j-idem")
    peer.send(launch=launch)
    wait_until(lambda: len(_statuses(peer, "j-idem", S.TASK_STATE_RUNNING)) == 2)
    assert len({s.pid for s in _statuses(peer, "j-idem", S.TASK_STATE_RUNNING)}) == 1
    peer.send(kill=agent_pb2.KillTask(task=ref("j-ghost")))
    peer.wait_status("j-ghost", S.TASK_STATE_LOST)
    release(tmp_path, "j-idem")
    peer.wait_status("j-idem", S.TASK_STATE_COMPLETED)


def _statuses(peer: FakeController, job_id: str, state: int) -> list[agent_pb2.TaskStatus]:
    return [s for s in peer.messages("task_status") if s.task.job_id == job_id and s.state == state]


def test_trainer_session_auth_progress_checkpoint_and_commands(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    # The test process plays the trainer, so the agent must take the token alone (a real
    # trainer is a process of its task: test_nodeagent_isolation.py).
    peer, env = start_waiting_task(
        tmp_path,
        controller,
        functools.partial(make_agent, verify_trainer_peer=False),
        task_script,
        "j-tr",
        "--checkpoint-step",
        "7",
    )
    addr_file = Path(env["MLSCHED_AGENT_ADDR_FILE"])
    assert addr_file.read_text() == env["MLSCHED_AGENT_ADDR"]

    with grpc.insecure_channel(env["MLSCHED_AGENT_ADDR"]) as channel:
        stub = trainer_pb2_grpc.TrainerServiceStub(channel)
        bad = stub.TrainerSession(
            iter(()),
            metadata=(("mlsched-task-id", "j-tr/0/1"), ("mlsched-task-token", "wrong")),
        )
        with pytest.raises(grpc.RpcError) as err:
            list(bad)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stale = stub.TrainerSession(
            iter(()),
            metadata=(
                ("mlsched-task-id", "j-tr/0/0"),
                ("mlsched-task-token", env["MLSCHED_TASK_TOKEN"]),
            ),
        )
        with pytest.raises(grpc.RpcError) as err:
            list(stale)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED

        requests: list[trainer_pb2.TrainerSessionRequest] = [
            trainer_pb2.TrainerSessionRequest(restored=trainer_pb2.Restored(step=0)),
            trainer_pb2.TrainerSessionRequest(
                progress=common_pb2.Progress(
                    iteration=5,
                    loss=0.5,
                    metrics={"acc": 0.25},
                    iteration_time_s=0.5,
                    compute_time_s=0.375,
                )
            ),
            trainer_pb2.TrainerSessionRequest(
                checkpoint_saved=trainer_pb2.CheckpointSaved(step=7, path="/ckpt/step-7.pt")
            ),
        ]
        outgoing = _RequestFeed(requests)
        session = stub.TrainerSession(
            outgoing,
            metadata=(
                ("mlsched-task-id", env["MLSCHED_TASK_ID"]),
                ("mlsched-task-token", env["MLSCHED_TASK_TOKEN"]),
            ),
        )
        progress = peer.wait_for("progress", lambda p: p.task.job_id == "j-tr")
        assert progress.progress.iteration == 5 and progress.progress.metrics["acc"] == 0.25
        assert (progress.progress.iteration_time_s, progress.progress.compute_time_s) == (
            0.5,
            0.375,
        )
        peer.wait_for(
            "task_status",
            lambda s: s.task.job_id == "j-tr" and s.checkpoint_step == 7 and s.state == 2,
        )
        restored = peer.wait_for("task_status", lambda s: s.task.job_id == "j-tr" and s.restored)
        assert restored.restored_step == 0
        before = [s for s in peer.messages("task_status") if s.task.job_id == "j-tr"][:2]
        assert [(s.state, s.restored) for s in before] == [(1, False), (2, False)]

        task = ref("j-tr")
        peer.send(
            trainer_command=agent_pb2.TrainerCommand(
                task=task, set_batch_size=agent_pb2.SetBatchSize(batch_size=64)
            )
        )
        peer.send(
            lease=agent_pb2.LeaseUpdate(
                task=task, status=agent_pb2.LEASE_STATUS_RENEWED, expires_at=123.5
            )
        )
        peer.send(suspend=agent_pb2.SuspendTask(task=task, grace_s=10, reason="lease over"))
        received = []
        for response in session:
            received.append(response)
            if response.WhichOneof("message") == "suspend":
                break
        assert received[0].WhichOneof("message") == "alive"  # a session opens with AgentAlive
        received = [r for r in received if r.WhichOneof("message") != "alive"]
        kinds = [r.WhichOneof("message") for r in received]
        assert kinds == ["change_batch_size", "lease", "suspend"]
        assert received[0].change_batch_size.batch_size == 64
        assert received[1].lease.expires_at == 123.5 and received[1].lease.renewed
        assert received[2].suspend.reason == "lease over"

        release(tmp_path, "j-tr", "suspended")
        suspended = peer.wait_status("j-tr", S.TASK_STATE_SUSPENDED)
        assert suspended.exit_code == 0 and suspended.checkpoint_step == 7
        outgoing.close()
        session.cancel()


class _RequestFeed:
    """A request iterator that yields the given messages and then waits until closed."""

    def __init__(self, messages: list[trainer_pb2.TrainerSessionRequest]) -> None:
        import threading

        self._messages = list(messages)
        self._closed = threading.Event()

    def __iter__(self) -> _RequestFeed:
        return self

    def __next__(self) -> trainer_pb2.TrainerSessionRequest:
        if self._messages:
            return self._messages.pop(0)
        self._closed.wait(30)
        raise StopIteration

    def close(self) -> None:
        self._closed.set()


def test_controller_restart_reregisters_with_running_task(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    make_agent()
    peer = controller.servicer
    peer.wait_for("register", session=1)
    peer.send(launch=launch_message(tmp_path, task_script, "j-live", "wait"))
    wait_ready(tmp_path, "j-live")
    running = peer.wait_status("j-live", S.TASK_STATE_RUNNING)
    controller.stop()
    controller.start()
    register = peer.wait_for("register", session=2, timeout=15)
    listed = {t.task.job_id: t for t in register.tasks}
    assert listed["j-live"].state == S.TASK_STATE_RUNNING
    assert listed["j-live"].pid == running.pid
    release(tmp_path, "j-live")
    done = peer.wait_for(
        "task_status",
        lambda s: s.task.job_id == "j-live" and s.state == S.TASK_STATE_COMPLETED,
        session=2,
    )
    assert done.exit_code == 0


def test_agent_restart_readopts_running_task(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    first = make_agent(verify_trainer_peer=False)  # the test plays the trainer below
    peer = controller.servicer
    peer.send(launch=launch_message(tmp_path, task_script, "j-adopt", "wait"))
    env = wait_ready(tmp_path, "j-adopt")
    running = peer.wait_status("j-adopt", S.TASK_STATE_RUNNING)
    first.close()
    assert _alive(running.pid)
    make_agent(verify_trainer_peer=False)
    register = peer.wait_for("register", session=2)
    listed = {t.task.job_id: t for t in register.tasks}
    assert listed["j-adopt"].state == S.TASK_STATE_RUNNING
    assert listed["j-adopt"].pid == running.pid
    # The re-adopted task's trainer can still authenticate, at the new address.
    new_addr = Path(env["MLSCHED_AGENT_ADDR_FILE"]).read_text()
    with grpc.insecure_channel(new_addr) as channel:
        stub = trainer_pb2_grpc.TrainerServiceStub(channel)
        feed = _RequestFeed(
            [trainer_pb2.TrainerSessionRequest(progress=common_pb2.Progress(iteration=9))]
        )
        call = stub.TrainerSession(
            feed,
            metadata=(
                ("mlsched-task-id", env["MLSCHED_TASK_ID"]),
                ("mlsched-task-token", env["MLSCHED_TASK_TOKEN"]),
            ),
        )
        peer.wait_for("progress", lambda p: p.progress.iteration == 9)
        feed.close()
        call.cancel()
    release(tmp_path, "j-adopt", "completed")
    done = peer.wait_status("j-adopt", S.TASK_STATE_COMPLETED)
    assert done.pid == running.pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_wrong_join_token_makes_the_agent_process_exit_non_zero(tmp_path: Path) -> None:
    peer = FakeController()
    server = ControllerServer(peer).start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "nodeagent",
                "--insecure",
                "--controller",
                server.address,
                "--join-token",
                "wrong-token",
                "--gpus",
                "2",
                "--state-dir",
                str(tmp_path / "state"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.stop()
    assert proc.returncode != 0
    assert "join token" in proc.stderr
    assert peer.refused >= 1 and peer.sessions == 0


def test_agent_uses_the_join_token(tmp_path: Path) -> None:
    peer = FakeController(token=JOIN_TOKEN)
    server = ControllerServer(peer).start()
    agent = NodeAgent(agent_config(tmp_path, server.address), gpus=VirtualGpus(2))
    try:
        agent.start()
        peer.wait_for("register")
        assert peer.refused == 0
    finally:
        agent.close()
        server.stop()
        kill_leftovers(peer.pids(), str(tmp_path))


def test_sigterm_drains_the_agent_process_and_leaves_tasks_running(
    tmp_path: Path, task_script: Path
) -> None:
    peer = FakeController()
    server = ControllerServer(peer).start()
    token_file = tmp_path / "join-token"
    token_file.write_text(JOIN_TOKEN + "\n")
    command = [
        sys.executable,
        "-m",
        "nodeagent",
        "--insecure",
        "--controller",
        server.address,
        "--join-token-file",
        str(token_file),
        "--node-id",
        "node-cli",
        "--gpus",
        "2",
        "--state-dir",
        str(tmp_path / "state"),
        "--checkpoint-root",
        str(tmp_path / "checkpoints"),
        "--metrics-interval",
        "0.2",
        "--run-tasks-as",  # tmp_path is root's alone (tests/nodeagent/test_task_users.py)
        "agent",
    ]
    agent = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        register = peer.wait_for("register", timeout=30)
        assert register.node_id == "node-cli" and len(register.gpus) == 2
        peer.send(launch=launch_message(tmp_path, task_script, "j-cli", "wait"))
        wait_ready(tmp_path, "j-cli")
        running = peer.wait_status("j-cli", S.TASK_STATE_RUNNING)
        agent.terminate()
        assert agent.wait(timeout=30) == 0
        assert _alive(running.pid)  # the drain left the training process running
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        server.stop()
        kill_leftovers(peer.pids(), str(tmp_path))


def test_a_second_agent_on_the_same_state_dir_refuses_to_start(
    tmp_path: Path, make_agent: Callable[..., NodeAgent], controller: ControllerServer
) -> None:
    make_agent()
    second = NodeAgent(agent_config(tmp_path, controller.address), gpus=VirtualGpus(2))
    with pytest.raises(ConfigError, match="another agent is using the state directory"):
        second.start()


def test_an_agent_cut_off_from_the_controller_suspends_its_tasks_itself(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    # Issue 11 #2: a node the controller declares dead must not keep training the old attempt.
    agent = make_agent(self_fence_after_s=0.5, suspend_grace_s=0.3)
    peer = controller.servicer
    first = peer.wait_for("register", session=1)
    assert first.self_fence_margin_s > 2 * 0.3  # told the controller how long it takes at most
    peer.send(launch=launch_message(tmp_path, task_script, "j-cut", "wait"))
    wait_ready(tmp_path, "j-cut")
    peer.wait_status("j-cut", S.TASK_STATE_RUNNING)
    controller.stop()
    wait_until(lambda: not agent.tasks.running())
    controller.start()
    register = peer.wait_for("register", session=2, timeout=15)
    [status] = [t for t in register.tasks if t.task.job_id == "j-cut"]
    assert status.state == S.TASK_STATE_SUSPENDED  # SuspendNow, then SIGTERM after the grace


def test_a_registered_agent_does_not_fence(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    agent = make_agent(self_fence_after_s=0.5)
    peer = controller.servicer
    peer.send(launch=launch_message(tmp_path, task_script, "j-ok", "wait"))
    wait_ready(tmp_path, "j-ok")
    peer.wait_status("j-ok", S.TASK_STATE_RUNNING)
    # Connected: however many fence checks run, the task keeps running (checked synchronously).
    for _ in range(3):
        agent._self_fence()
    assert [r.job_id for r, _ in agent.tasks.running()] == ["j-ok"]
    release(tmp_path, "j-ok")
    peer.wait_status("j-ok", S.TASK_STATE_COMPLETED)
