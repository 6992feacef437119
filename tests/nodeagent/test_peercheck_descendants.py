"""The trainer peer check accepts a task's descendants in sessions of their own (torchrun's
training processes; issue 18), and still nobody else's processes."""

from __future__ import annotations

import subprocess
import sys

from nodeagent.peercheck import in_session

# The "task" starts a child in a new session (as torchrun does) and prints the child's pid.
TASK = (
    "import subprocess, sys\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'],"
    " stdin=subprocess.PIPE, start_new_session=True)\n"
    "print(child.pid, flush=True)\n"
    "sys.stdin.read()\n"
    "child.stdin.close()\n"
    "child.wait()\n"
)


def _start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_child_in_its_own_session_counts_for_the_task_that_started_it():
    task = _start(TASK)
    other = _start("import sys; sys.stdin.read()")  # another job's task, in its own session
    try:
        assert task.stdout is not None
        child = int(task.stdout.readline())
        assert in_session({child}, task.pid)  # the task's session leader is an ancestor
        assert not in_session({child}, other.pid)
        assert not in_session({other.pid}, task.pid)
    finally:
        for process in (task, other):
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=60)
