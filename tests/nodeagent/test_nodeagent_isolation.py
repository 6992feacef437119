"""With ``--run-tasks-as agent`` tasks of different jobs run under one uid; a token one job
steals from another (here: from the victim's environment, as it could from /proc or the agent's
records) must not open the victim's trainer session. A real agent, two real task processes
launched by it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from nodeagent_testkit import (
    TRAINER_SESSION_ATTEMPT,
    ControllerServer,
    launch_message,
    wait_until,
    workdir_of,
)

from mlsched.v1 import common_pb2 as S
from nodeagent.agent import NodeAgent
from nodeagent.peercheck import Peer, in_session, parse_peer, peer_is_task, socket_uids

# Job B's task: opens its own trainer session, then tries the victim's with the stolen token;
# writes what each attempt got to result.json in its working directory.
THIEF = (
    TRAINER_SESSION_ATTEMPT
    + r"""
victim = json.load(open(sys.argv[1]))

result = {
    "own": session(os.environ["MLSCHED_TASK_ID"], os.environ["MLSCHED_TASK_TOKEN"]),
    "victim": session(victim["MLSCHED_TASK_ID"], victim["MLSCHED_TASK_TOKEN"]),
}
with open("result.json.tmp", "w") as f:
    json.dump(result, f)
os.replace("result.json.tmp", "result.json")
"""
)


def test_a_stolen_token_does_not_open_another_tasks_trainer_session(
    tmp_path: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
    task_script: Path,
) -> None:
    make_agent()
    peer = controller.servicer
    peer.send(launch=launch_message(tmp_path, task_script, "j-victim", "wait"))
    victim_env = workdir_of(tmp_path, "j-victim") / "env.json"
    wait_until(victim_env.exists)
    peer.wait_status("j-victim", S.TASK_STATE_RUNNING)

    thief = tmp_path / "thief.py"
    thief.write_text(THIEF)
    peer.send(launch=launch_message(tmp_path, thief, "j-thief", str(victim_env)))
    result_file = workdir_of(tmp_path, "j-thief") / "result.json"
    wait_until(result_file.exists, timeout=30.0)
    result = json.loads(result_file.read_text())

    assert result["own"] == ["OK", "alive"]  # a task's own session opens
    code, details = result["victim"]
    assert code == "UNAUTHENTICATED"
    assert "is not task j-victim/0/1's" in details
    peer.wait_status("j-thief", S.TASK_STATE_COMPLETED)


def test_peer_forms() -> None:
    assert parse_peer("ipv4:127.0.0.1:5000") == ("127.0.0.1", 5000)
    assert parse_peer("ipv6:[::1]:41000") == ("::1", 41000)
    assert parse_peer("unix:/run/x.sock") is None
    assert parse_peer("ipv4:127.0.0.1:x") is None
    # gRPC's dual-stack sockets: the kernel lists the client end as a v4-mapped address
    assert parse_peer("ipv6:[::ffff:127.0.0.1]:41000") == ("127.0.0.1", 41000)


def test_in_session_needs_a_pid_of_that_session() -> None:
    import os

    mine = os.getsid(0)
    assert in_session({os.getpid()}, mine)
    assert not in_session({os.getpid()}, mine + 1)
    assert not in_session(set(), mine)


def test_peer_is_task_by_uid_when_the_task_runs_as_its_user() -> None:
    import os

    mine = os.getsid(0)
    peer = Peer(frozenset({os.getpid()}), frozenset({1500000001}))
    assert peer_is_task(peer, 1500000001, 0)  # the socket's uid is the task's
    assert not peer_is_task(peer, 1500000002, mine)  # another user's socket, whatever its pids
    assert peer_is_task(peer, -1, mine)  # agent's uid: the session decides
    assert not peer_is_task(Peer(frozenset(), frozenset({0})), -1, mine)


# Two lines of /proc/net/tcp as the kernel writes them on a little-endian machine: a client
# socket 127.0.0.1:41000 (0xA028) -> 127.0.0.1:5000 (0x1388) owned by uid 1500000001, and the
# listening socket of port 5000 owned by uid 0.
PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:A028 0100007F:1388 01 00000000:00000000 00:00000000 00000000 1500000001 0 2 1
"""
# /proc/net/tcp6: the same client over a dual-stack socket, ::ffff:127.0.0.1 as four
# little-endian words.
V4_MAPPED_LOOPBACK = "0000000000000000FFFF00000100007F"
PROC_NET_TCP6 = (
    "  sl  local_address remote_address st tx_queue:rx_queue tr:tm->when retrnsmt uid\n"
    f"   0: {V4_MAPPED_LOOPBACK}:A029 {V4_MAPPED_LOOPBACK}:1388 01 0:0 0:0 0 1500000002 0 3\n"
)


def test_socket_uids_reads_the_kernels_tcp_tables() -> None:
    assert socket_uids(("127.0.0.1", 41000), 5000, PROC_NET_TCP) == {1500000001}
    assert socket_uids(("127.0.0.1", 41001), 5000, PROC_NET_TCP) == set()
    assert socket_uids(("127.0.0.1", 41000), 5001, PROC_NET_TCP) == set()
    assert socket_uids(("127.0.0.1", 41001), 5000, PROC_NET_TCP6) == {1500000002}
