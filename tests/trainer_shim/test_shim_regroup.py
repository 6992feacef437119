"""In-place regrouping (trainer_shim/regroup.py): the protocol's pieces, the agent message
reaching the inbox, and real gloo processes growing from one rank to two and back."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from shim_testkit import FakeAgent
from torch import nn

import trainer_shim
from mlsched.v1 import trainer_pb2
from trainer_shim.regroup import (
    ElasticGroup,
    RegroupInbox,
    RegroupPlan,
    attach,
    joining_generation,
    state_digest,
)

WORKER = Path(__file__).with_name("regroup_worker.py")


def test_plan_round_trips_through_the_broadcast_form() -> None:
    plan = RegroupPlan(3, 2, "10.0.0.5", 29_511, 256)
    assert plan.as_ints() == [3, 2, 29_511, 256]
    assert RegroupPlan.from_ints([3, 2, 29_511, 256], "10.0.0.5") == plan
    assert RegroupPlan.from_ints([0, 0, 0, 0], "10.0.0.5") is None


def test_plan_from_the_agent_message() -> None:
    message = trainer_pb2.Regroup(generation=2, world_size=4, master_port=40_000)
    assert RegroupPlan.from_message(message) == RegroupPlan(2, 4, "127.0.0.1", 40_000, 0)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ((0, 2, "h", 1000, 0), "generation 0"),
        ((1, 0, "h", 1000, 0), "world size 0"),
        ((1, 2, "h", 0, 0), "port 0"),
        ((1, 2, "h", 70_000, 0), "port 70000"),
        ((1, 2, "h", 1000, -8), "batch size -8"),
    ],
)
def test_a_plan_out_of_range_is_refused_with_its_field(
    fields: tuple[int, int, str, int, int], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        RegroupPlan(*fields)


def test_new_ranks_count_only_growth() -> None:
    assert RegroupPlan(1, 3, "h", 1000).new_ranks(1) == 2
    assert RegroupPlan(1, 1, "h", 1000).new_ranks(2) == 0
    assert RegroupPlan(1, 2, "h", 1000).new_ranks(2) == 0


def test_inbox_keeps_the_newest_generation() -> None:
    inbox = RegroupInbox()
    assert inbox.newest(0) is None
    inbox.offer(RegroupPlan(2, 2, "h", 1000))
    inbox.offer(RegroupPlan(1, 4, "h", 1001))  # late and older: dropped
    assert inbox.newest(0) == RegroupPlan(2, 2, "h", 1000)
    assert inbox.newest(1) == RegroupPlan(2, 2, "h", 1000)
    assert inbox.newest(2) is None  # already acted on


def test_joining_generation_parses_the_environment() -> None:
    assert joining_generation({}) == 0
    assert joining_generation({"MLSCHED_REGROUP_GENERATION": " 4 "}) == 4
    with pytest.raises(ValueError, match="MLSCHED_REGROUP_GENERATION='x'"):
        joining_generation({"MLSCHED_REGROUP_GENERATION": "x"})
    with pytest.raises(ValueError, match="must be >= 0"):
        joining_generation({"MLSCHED_REGROUP_GENERATION": "-1"})


def test_state_digest_follows_weights_and_optimizer_state() -> None:
    torch.manual_seed(0)
    a = nn.Linear(3, 2)
    b = nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert state_digest(a) == state_digest(b)
    opt = torch.optim.Adam(a.parameters())
    a(torch.ones(1, 3)).sum().backward()
    opt.step()
    assert state_digest(a) != state_digest(b)
    b.load_state_dict(a.state_dict())
    assert state_digest(a) == state_digest(b)
    assert state_digest(a, opt) != state_digest(b, torch.optim.Adam(b.parameters()))


def test_a_single_process_shrink_plan_needs_no_peer() -> None:
    """World size 1 asked to stay at 1 (a batch-size-only regroup): applied at the next
    boundary with no store, and the new batch size is reported."""
    inbox = RegroupInbox()
    model = nn.Linear(2, 2)
    with trainer_shim.init(environ={}) as job, ElasticGroup(job, inbox=inbox) as group:
        assert group.init_process_group() is False
        started = group.step_boundary(model, None, 5, 64)
        assert started is not None and started.event == "started" and started.step == 5
        assert group.step_boundary(model, None, 6, 64) is None
        inbox.offer(RegroupPlan(1, 1, "127.0.0.1", 1000, batch_size=128))
        change = group.step_boundary(model, None, 7, 64)
        assert change is not None
        assert (change.event, change.generation, change.world_size, change.step) == (
            "regrouped",
            1,
            1,
            7,
        )
        assert change.batch_size == 128
        assert group.step_boundary(model, None, 8, 128) is None


def test_the_agents_regroup_message_reaches_the_inbox(agent: FakeAgent) -> None:
    environ = {"MLSCHED_TASK_ID": "j-1/0/1", "MLSCHED_AGENT_ADDR": agent.addr}
    inbox = RegroupInbox()
    with trainer_shim.init(environ=environ, flush_timeout=0.5) as job:
        assert attach(job, inbox)
        message = trainer_pb2.Regroup(generation=1, world_size=2, master_port=31_000)
        agent.send("j-1/0/1", trainer_pb2.TrainerSessionResponse(regroup=message))
        assert inbox.wait_newest(0, 30.0) == RegroupPlan(1, 2, "127.0.0.1", 31_000)
        # A malformed one (port 0) is logged and dropped, and the session goes on: were it
        # taken, its generation 5 would hide the generation 3 that follows it.
        bad = trainer_pb2.Regroup(generation=5, world_size=2, master_port=0)
        good = trainer_pb2.Regroup(generation=3, world_size=1, master_port=31_001)
        agent.send("j-1/0/1", trainer_pb2.TrainerSessionResponse(regroup=bad))
        agent.send("j-1/0/1", trainer_pb2.TrainerSessionResponse(regroup=good))
        assert inbox.wait_newest(1, 30.0) == RegroupPlan(3, 1, "127.0.0.1", 31_001)
    assert not attach(trainer_shim.init(environ={}), RegroupInbox())  # local mode: no session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_two_real_processes_grow_and_shrink_in_place(tmp_path: Path) -> None:
    """Rank 0 trains alone, a second process joins (gloo) and receives rank 0's model and
    optimizer state, both train in lockstep, then the second leaves cleanly and rank 0 goes
    on: the step count never restarts and the state is the same on both ranks throughout."""
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLSCHED_")}
    base.update(MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    rank0_env = {**base, "RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "1"}
    rank1_env = {
        **base,
        "RANK": "1",
        "WORLD_SIZE": "2",
        "MASTER_PORT": str(port),
        "MLSCHED_REGROUP_GENERATION": "1",
    }
    argv = [sys.executable, str(WORKER), "--port", str(port)]
    procs = [
        subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
        for env in (rank0_env, rank1_env)
    ]
    try:  # a rank that fails makes the other give up within its 120-s rendezvous timeout
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    r0, r1 = _events(outs[0]), _events(outs[1])

    started = r0[0]
    assert (started["event"], started["step"], started["world_size"]) == ("started", 0, 1)
    grow = next(e for e in r0 if e["event"] == "regrouped" and e["generation"] == 1)
    joined = r1[0]
    assert joined["event"] == "joined" and joined["rank"] == 1 and joined["world_size"] == 2
    assert joined["step"] == grow["step"] >= 3  # the plan was offered at step 3
    assert joined["digest"] == grow["digest"]  # model + optimizer state arrived whole

    steps0 = {e["step"]: e["digest"] for e in r0 if e["event"] == "step"}
    steps1 = {e["step"]: e["digest"] for e in r1 if e["event"] == "step"}
    shrink = next(e for e in r0 if e["event"] == "regrouped" and e["generation"] == 2)
    left = next(e for e in r1 if e["event"] == "left")
    # The shrink plan is offered after the boundary of step grow + 4; the ranks agree on it at
    # their next exchange (trainer_shim/step_sync.py), a step later at the earliest.
    assert shrink["world_size"] == 1 and shrink["step"] == left["step"] >= int(grow["step"]) + 5
    assert sorted(steps1) == list(range(int(grow["step"]) + 1, int(shrink["step"]) + 1))
    assert all(steps0[s] == d for s, d in steps1.items())  # lockstep, same state
    assert (r1[-1]["event"], r1[-1]["step"]) == ("end", left["step"])  # out of the loop at once
    assert r0[-1]["event"] == "end" and r0[-1]["step"] == int(shrink["step"]) + 3
