"""Tasks run as their job's user (``--run-tasks-as job-user``, the default): a real agent runs
alice's and bob's tasks under two uids of its pool; bob's task, holding alice's stolen token,
can read neither her environment, nor her checkpoints, nor the agent's records, and the token
opens nothing. Needs root (the agent switches uids), as a deployed agent has."""

from __future__ import annotations

import json
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nodeagent_testkit import (
    TRAINER_SESSION_ATTEMPT,
    ControllerServer,
    kill_leftovers,
    launch_message,
    wait_until,
    workdir_of,
    write_task_script,
)

from mlsched.v1 import common_pb2 as S
from nodeagent.agent import NodeAgent
from nodeagent.cli import EXIT_CONFIG
from nodeagent.taskuser import (
    DEFAULT_UID_RANGE,
    TaskUserError,
    TaskUsers,
    effective_capabilities,
    missing_capabilities,
    parse_uid_range,
)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching a task's uid needs root")

# Bob's task: tries everything a curious neighbour would, writes what each attempt got.
PROBE = (
    TRAINER_SESSION_ATTEMPT
    + r"""
stolen = json.load(open(sys.argv[1]))

def attempt(action):
    try:
        action()
        return "read"
    except PermissionError:
        return "denied"
    except OSError as exc:
        return type(exc).__name__

result = {
    "uid": os.getuid(),
    "own_session": session(os.environ["MLSCHED_TASK_ID"], os.environ["MLSCHED_TASK_TOKEN"]),
    "stolen_session": session(stolen["MLSCHED_TASK_ID"], stolen["MLSCHED_TASK_TOKEN"]),
    "victim_environ": attempt(lambda: open(f"/proc/{stolen['pid']}/environ", "rb").read()),
    "victim_checkpoints": attempt(lambda: os.listdir(stolen["checkpoint_dir"])),
    "agent_records": attempt(lambda: os.listdir(stolen["tasks_dir"])),
    "victim_signal": attempt(lambda: os.kill(stolen["pid"], 0)),
}
with open("result.json.tmp", "w") as f:
    json.dump(result, f)
os.replace("result.json.tmp", "result.json")
"""
)


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every uid may enter (pytest's tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="mlsched-task-users-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _enterable_by_all(path: Path) -> bool:
    """True when every uid may run ``path``: it and each directory above it are o+x."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _as_any_user(message: S.JobSpec | object) -> object:
    """The launch with an interpreter every uid can run. This machine's own may live under
    /root (pyenv), which other uids cannot enter; a deployment installs the agent's Python
    where tasks can (deploy/). Then the tasks run the system's Python of the same version with
    this environment's packages and the checkout on PYTHONPATH."""
    python = _python_for_all()
    if python == sys.executable:
        return message
    spec = message.spec  # type: ignore[attr-defined]
    spec.command[0] = python
    spec.env["PYTHONPATH"] = _pythonpath()
    return message


def _python_for_all() -> str:
    """This interpreter when every uid can run it, else the system's of the same version."""
    own = Path(sys.executable).resolve()
    if _enterable_by_all(own):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/bin:/usr/local/bin")
    if system is None or not _enterable_by_all(Path(system).resolve()):
        pytest.skip(f"no {version} that every uid can run ({own} is under a closed directory)")
    return system


def _pythonpath() -> str:
    """The checkout and this environment's packages, for the system's interpreter."""
    return os.pathsep.join([str(Path(__file__).resolve().parents[2]), *site.getsitepackages()])


def _open_workdir(root: Path, job_id: str) -> None:
    """The job's working directory, writable by its task (a user's own directory would be)."""
    workdir_of(root, job_id).chmod(0o777)


@needs_root
def test_tasks_of_two_users_cannot_reach_each_other(
    open_root: Path,
    controller: ControllerServer,
    make_agent: Callable[..., NodeAgent],
) -> None:
    make_agent(
        state_dir=open_root / "state",
        checkpoint_root=open_root / "checkpoints",
        run_tasks_as="job-user",
    )
    peer = controller.servicer
    try:
        script = write_task_script(open_root)
        victim = _as_any_user(launch_message(open_root, script, "j-alice", "wait", user="alice"))
        _open_workdir(open_root, "j-alice")
        peer.send(launch=victim)
        running = peer.wait_status("j-alice", S.TASK_STATE_RUNNING)
        victim_env = workdir_of(open_root, "j-alice") / "env.json"
        wait_until(victim_env.exists)
        assert stat.S_IMODE(victim_env.stat().st_mode) == 0o600  # umask 077
        alice_uid = victim_env.stat().st_uid
        assert DEFAULT_UID_RANGE[0] <= alice_uid <= DEFAULT_UID_RANGE[1]

        checkpoint_dir = open_root / "checkpoints" / "j-alice"
        assert checkpoint_dir.stat().st_uid == alice_uid
        assert stat.S_IMODE(checkpoint_dir.stat().st_mode) == 0o700
        stolen = json.loads(victim_env.read_text())  # what a leak would hand bob
        stolen.update(
            pid=running.pid,
            checkpoint_dir=str(checkpoint_dir),
            tasks_dir=str(open_root / "state" / "tasks"),
        )
        stolen_file = open_root / "stolen.json"
        stolen_file.write_text(json.dumps(stolen))
        stolen_file.chmod(0o644)

        probe = open_root / "probe.py"
        probe.write_text(PROBE)
        thief = launch_message(open_root, probe, "j-bob", str(stolen_file), user="bob")
        peer.send(launch=_as_any_user(thief))
        _open_workdir(open_root, "j-bob")
        result_file = workdir_of(open_root, "j-bob") / "result.json"
        wait_until(result_file.exists, timeout=30.0)
        result = json.loads(result_file.read_text())

        assert result["uid"] not in (0, alice_uid)
        assert DEFAULT_UID_RANGE[0] <= result["uid"] <= DEFAULT_UID_RANGE[1]
        assert result["own_session"] == ["OK", "alive"]
        code, details = result["stolen_session"]
        assert code == "UNAUTHENTICATED"
        assert "is not task j-alice/0/1's" in details
        assert result["victim_environ"] == "denied"
        assert result["victim_checkpoints"] == "denied"
        assert result["agent_records"] == "denied"
        assert result["victim_signal"] == "denied"
        peer.wait_status("j-bob", S.TASK_STATE_COMPLETED)

        (workdir_of(open_root, "j-alice") / "release").write_text("")
        peer.wait_status("j-alice", S.TASK_STATE_COMPLETED)  # alice's own session worked
        pool = json.loads((open_root / "state" / "task-uids.json").read_text())
        assert pool == {"alice": alice_uid, "bob": result["uid"]}
    finally:
        kill_leftovers(peer.pids(), str(open_root))


def test_the_pool_gives_each_user_one_stable_uid(tmp_path: Path) -> None:
    pool_file = tmp_path / "task-uids.json"
    users = TaskUsers("job-user", pool_file, (5000, 5001))
    carol = users.identity("mlsched-test-carol")
    dave = users.identity("mlsched-test-dave")
    assert carol is not None and dave is not None
    assert (carol.uid, carol.gid, dave.uid) == (5000, 5000, 5001)
    again = TaskUsers("job-user", pool_file, (5000, 5001))  # an agent restart keeps them
    assert again.identity("mlsched-test-carol") == carol
    with pytest.raises(TaskUserError, match="pool 5000-5001 is exhausted"):
        again.identity("mlsched-test-erin")
    with pytest.raises(TaskUserError, match="names no user"):
        again.identity("")
    assert TaskUsers("agent", pool_file).identity("mlsched-test-carol") is None


def test_system_accounts_are_never_a_jobs_identity(tmp_path: Path) -> None:
    users = TaskUsers("job-user", tmp_path / "pool.json", (5000, 5009))
    root = users.identity("root")  # uid 0: a pool uid, never root itself
    nobody = users.identity("nobody")
    assert root is not None and root.uid == 5000
    assert nobody is not None and nobody.uid == 5001


def test_capabilities_needed_to_switch_uids() -> None:
    status = "Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t00000000000000e1\n"
    assert effective_capabilities(status) == 0xE1  # CHOWN, KILL, SETGID, SETUID
    assert missing_capabilities(1000, 0xE1) == []
    assert missing_capabilities(1000, 0x01) == ["CAP_SETUID", "CAP_SETGID", "CAP_KILL"]
    assert missing_capabilities(0, 0) == []  # root
    assert effective_capabilities("Name:\tx\n") == 0


def test_uid_ranges_are_checked() -> None:
    assert parse_uid_range("2000-2999") == (2000, 2999)
    for bad in ("2000", "a-b", "10-20", "3000-2000", "60000-70000"):
        with pytest.raises(ValueError, match="--task-uid-range"):
            parse_uid_range(bad)


def test_an_unprivileged_agent_refuses_to_start_by_default(open_root: Path) -> None:
    """``mlsched agent`` without root or the capabilities, as a plain uid (setpriv drops them
    when the test runs as root): exits with a configuration error naming the way out."""
    state = open_root / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    as_plain_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv (util-linux) is needed to drop root")
        as_plain_user = ["setpriv", "--reuid=1500065000", "--regid=1500065000", "--clear-groups"]
    command = [sys.executable, "-m", "mlsched", "agent", "--controller", "127.0.0.1:1"]
    command += ["--state-dir", str(state), "--insecure"]
    done = subprocess.run(
        [*as_plain_user, *command], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == EXIT_CONFIG, done.stderr
    assert "needs root or CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL" in done.stderr
    assert "--run-tasks-as agent" in done.stderr


# Run by an unprivileged uid holding the capabilities in its ambient set, as the systemd unit
# gives them: starts a task as another uid and reports that task's uid and capabilities.
CAPABLE_SPAWNER = r"""
import sys, time
from pathlib import Path
from nodeagent.launcher import spawn_task
from nodeagent.taskuser import TaskIdentity

out = Path(sys.argv[1])
child = spawn_task(
    [sys.executable, "-c", "import os, sys; open(sys.argv[1], 'w').write(str(os.getuid()) + '\\n'"
     " + ''.join(l for l in open('/proc/self/status') if l.startswith('Cap')))", str(out)],
    {}, out.parent, out.parent / "task.log", "=== test ===",
    identity=TaskIdentity(uid=1500065003, gid=1500065003, groups=(), home=""),
)
while child.poll() is None:
    time.sleep(0.01)
"""


@needs_root
def test_a_task_keeps_none_of_a_capable_agents_capabilities(open_root: Path) -> None:
    """An agent that is not root but holds CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL
    (deploy/systemd) starts a task as another uid: the task has no capability at all."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed")
    python = _python_for_all()
    out_dir = open_root / "spawn"
    out_dir.mkdir()
    out_dir.chmod(0o777)
    spawner = open_root / "spawner.py"
    spawner.write_text(CAPABLE_SPAWNER)
    caps = "+setuid,+setgid,+chown,+kill"
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=1500065002",
            "--regid=1500065002",
            "--clear-groups",
            f"--inh-caps={caps}",
            f"--ambient-caps={caps}",
            python,
            str(spawner),
            str(out_dir / "status.txt"),
        ],
        env={"PYTHONPATH": _pythonpath()},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    uid, *caps_lines = (out_dir / "status.txt").read_text().splitlines()
    assert uid == "1500065003"
    values = dict(line.split(":\t") for line in caps_lines)
    for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert int(values[name], 16) == 0, (name, values)
