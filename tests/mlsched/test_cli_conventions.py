"""The client commands' conventions (issue 18 #6): exit codes by error class, named contexts,
``submit -- CMD``, ``logs -f``'s merging of tails, and the bash completion script, run in bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from mlsched import exitcodes
from mlsched.cli import _split_quick_command, build_parser
from mlsched.completion import bash_script
from mlsched.contexts import ContextError, load_contexts, select_context
from mlsched.follow import OVERLAP_CHARS, new_output
from mlsched.model import JobState


@pytest.mark.parametrize(
    ("code", "exit_code"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, 2),
        (grpc.StatusCode.NOT_FOUND, 3),
        (grpc.StatusCode.PERMISSION_DENIED, 4),
        (grpc.StatusCode.UNAUTHENTICATED, 5),
        (grpc.StatusCode.FAILED_PRECONDITION, 6),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 7),
        (grpc.StatusCode.UNAVAILABLE, 8),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 8),
        (grpc.StatusCode.INTERNAL, 1),
        (None, 1),
    ],
)
def test_each_status_class_has_its_exit_code(code: grpc.StatusCode | None, exit_code: int) -> None:
    assert exitcodes.for_status(code) == exit_code


def test_submit_wait_exits_with_the_jobs_outcome() -> None:
    assert exitcodes.for_outcome(JobState.COMPLETED) == 0
    assert exitcodes.for_outcome(JobState.FAILED) == 10
    assert exitcodes.for_outcome(JobState.CANCELLED) == 11
    assert exitcodes.for_outcome(JobState.RUNNING) == 1  # never returned for a live job


def test_the_quick_command_is_what_follows_the_double_dash() -> None:
    argv = ["submit", "--gpus", "2", "--", "python", "train.py", "--lr", "0.1", "--", "x"]
    assert _split_quick_command(argv) == (
        ["submit", "--gpus", "2"],
        ["python", "train.py", "--lr", "0.1", "--", "x"],
    )
    assert _split_quick_command(["jobs", "--json"]) == (["jobs", "--json"], [])
    assert _split_quick_command(["logs", "--", "submit"]) == (["logs", "--", "submit"], [])


def test_logs_follow_prints_only_what_a_new_tail_adds() -> None:
    assert new_output("", "a\nb\n") == ("a\nb\n", False)
    assert new_output("a\nb\n", "a\nb\n") == ("", False)
    assert new_output("a\nb\n", "a\nb\nc\n") == ("c\n", False)
    # a tail window that moved on: only the end of the old one is still inside it
    log = "".join(f"line {i}\n" for i in range(100))  # 7 or 8 characters a line
    first, second = log[:400], log[200:500]  # two 300- and 400-character tails
    assert new_output(first, second) == (log[400:500], False)
    # more than a whole tail arrived in between: say so, print the new tail
    assert new_output(log[:300], log[400:700]) == (log[400:700], True)
    assert OVERLAP_CHARS >= 64


CONFIG = """\
current-context: lab
contexts:
  lab: {controller: "ctl1:50051,ctl2:50051", credentials: ~/lab-creds}
  laptop: {controller: "127.0.0.1:1", insecure: true, user: alice}
"""


def test_contexts_come_from_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    contexts, current = load_contexts(path)
    assert current == "lab"
    assert contexts["lab"].controller == "ctl1:50051,ctl2:50051"
    assert contexts["lab"].credentials == Path("~/lab-creds").expanduser()
    assert (contexts["laptop"].insecure, contexts["laptop"].user) == (True, "alice")

    monkeypatch.setenv("MLSCHED_CONFIG", str(path))
    monkeypatch.delenv("MLSCHED_CONTEXT", raising=False)
    assert select_context(None).name == "lab"
    assert select_context("laptop").name == "laptop"
    monkeypatch.setenv("MLSCHED_CONTEXT", "laptop")
    assert select_context(None).name == "laptop"
    assert select_context("lab").name == "lab"  # the flag wins
    with pytest.raises(ContextError, match=r"no context 'prod'.*contexts: lab, laptop"):
        select_context("prod")
    assert load_contexts(tmp_path / "absent.yaml") == ({}, "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("contexts: [a, b]\n", "expected a mapping"),
        ("contexts: {a: {controller: x, tls: true}}\n", "unknown field(s) tls"),
        ("contexts: {a: {insecure: 'yes'}}\n", "insecure must be true or false"),
        ("current-context: b\ncontexts: {a: {}}\n", "current-context 'b' is not among"),
        ("contexts: {a: [unclosed\n", "cannot read"),
    ],
)
def test_a_bad_config_file_is_named_with_its_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ContextError, match=re.escape(problem)):
        load_contexts(path)


def test_a_context_sends_the_command_to_its_controller(tmp_path: Path) -> None:
    """A real run: the laptop context names an insecure controller at a closed port, so the
    command fails to reach it (exit 8) after trying exactly that address."""
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLSCHED_")}
    env["MLSCHED_CONFIG"] = str(path)
    done = subprocess.run(
        [sys.executable, "-m", "mlsched", "jobs", "--context", "laptop"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == exitcodes.UNAVAILABLE, done.stderr
    assert "claiming to be 'alice'" in done.stderr
    assert "UNAVAILABLE" in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "mlsched", "jobs", "--context", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert bad.returncode == exitcodes.INVALID
    assert "no context 'nope'" in bad.stderr


def _complete(script: str, words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` with the generated completion loaded."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _mlsched;"
        ' printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_and_each_commands_options() -> None:
    script = bash_script(build_parser())
    assert _complete(script, ["mlsched", "sub"]) == ["submit"]
    assert "describe" in _complete(script, ["mlsched", ""])
    assert _complete(script, ["mlsched", "logs", "--fo"]) == ["--follow"]
    assert _complete(script, ["mlsched", "submit", "--wa"]) == ["--wait"]
    assert "--context" in _complete(script, ["mlsched", "jobs", "--c"])
