"""UniSched plans an overloaded server with reduced capacity (issue 10, MLFS §3.3.3).

Two nodes of 2 GPUs: n1 runs "mover" on GPU 0, n2 runs "stayer" on GPU 0; one GPU is free on
each. Two 1-GPU jobs wait.
"""

from __future__ import annotations

from dataclasses import replace

from controller.policy.unisched import UniSchedConfig, UniSchedPolicy

NOW = 600.0


def decide(on, waiting, running, snapshot, asked: bool):
    mover = replace(running("mover", on("n1", 0), expires=NOW + 300), migration_requested=asked)
    stayer = running("stayer", on("n2", 0), expires=NOW + 300)
    queued = [waiting("q1", 1, queued_since=1.0), waiting("q2", 1, queued_since=2.0)]
    snap = snapshot(NOW, active=[mover, stayer], queued=queued, nodes={"n1": 2, "n2": 2})
    policy = UniSchedPolicy(UniSchedConfig(isolate_solver=False))
    return {p.node_id for launch in policy.decide(snap).launch for p in launch.placement}


def test_a_server_with_a_pending_request_takes_no_new_work(on, waiting, running, snapshot):
    assert decide(on, waiting, running, snapshot, asked=True) == {"n2"}


def test_without_a_request_both_servers_take_work(on, waiting, running, snapshot):
    assert decide(on, waiting, running, snapshot, asked=False) == {"n1", "n2"}
