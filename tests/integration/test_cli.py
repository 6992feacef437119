"""The ``mlsched`` command as a user runs it: real subprocesses against a real controller.

Bad input gets a clear message naming the problem, a non-zero exit and stores nothing; server
refusals print their status code.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mlsched import exitcodes
from mlsched.localcluster import LocalCluster

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 60.0
SUBCOMMANDS = (
    "controller",
    "agent",
    "submit",
    "jobs",
    "describe",
    "cancel",
    "nodes",
    "logs",
    "events",
    "demo",
    "completion",
    "contexts",
)
VALID = """\
name: cli-job
command: python train.py --lr 0.1
gpus: 2
stop: {iterations: 100}
"""


def _env() -> dict[str, str]:
    """The caller's environment without any MLSCHED_* setting that could change defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MLSCHED_")}


def mlsched(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mlsched", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=_env(),
        cwd=cwd,
    )


def client(
    command: str, *args: str | Path, addr: LocalCluster | str, user: str = "alice"
) -> subprocess.CompletedProcess[str]:
    """``mlsched COMMAND`` as ``user``: with the user's certificate bundle on a LocalCluster,
    claiming the name (--insecure) at a bare address."""
    if isinstance(addr, LocalCluster):
        addr.credentials(user)
        bundle = addr.root / "users" / user
        return mlsched(command, *args, "--controller", addr.address, "--credentials", bundle)
    return mlsched(command, *args, "--controller", addr, "--insecure", "--user", user)


def all_jobs(addr: LocalCluster) -> list[dict]:
    result = client("jobs", "--json", "--all", addr=addr)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _controller(root: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster(root)
    try:
        cluster.start_controller()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def empty_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A controller that must never store a job: only bad submissions reach it."""
    yield from _controller(tmp_path_factory.mktemp("empty") / "c")


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _controller(tmp_path_factory.mktemp("flow") / "c")


# --- submit: bad specs -------------------------------------------------------------------

BAD_SPECS = {
    "malformed-yaml": ("name: [unclosed\n", "malformed YAML"),
    "not-a-mapping": ("- name\n- gpus\n", "must be a mapping"),
    "scalar-document": ("just a string\n", "must be a mapping"),
    "empty-file": ("", "must be a mapping"),
    "unknown-field": (VALID.replace("gpus: 2", "gpus: 2\ngpu: 1"), "unknown field(s): gpu"),
    "negative-gpus": (VALID.replace("gpus: 2", "gpus: -1"), "gpus: must be between 1 and"),
    "zero-gpus": (VALID.replace("gpus: 2", "gpus: 0"), "gpus: must be between 1 and"),
    "huge-gpus": (VALID.replace("gpus: 2", "gpus: 100000"), "gpus: must be between 1 and"),
    "gpus-not-integer": (VALID.replace("gpus: 2", "gpus: two"), "gpus: must be an integer"),
    "missing-gpus": (VALID.replace("gpus: 2\n", ""), "gpus: required"),
    "missing-command": (VALID.replace("command: python train.py --lr 0.1\n", ""), "command"),
    "empty-command": (
        VALID.replace("python train.py --lr 0.1", '""'),
        "command: must not be empty",
    ),
    "empty-command-list": (
        VALID.replace("python train.py --lr 0.1", "[]"),
        "command: must not be empty",
    ),
    "unbalanced-quote-command": (
        VALID.replace("python train.py --lr 0.1", "python 'train.py"),
        "command: cannot split",
    ),
    "gpus-not-multiple-of-gpus-per-process": (
        VALID.replace("gpus: 2", "gpus: 3\ngpus_per_process: 2"),
        "multiple of gpus_per_process",
    ),
    "bad-class": (VALID + "class: gold\n", "class: must be one of"),
    "strict-slo-without-deadline": (VALID + "class: strict-slo\n", "deadlines"),
    "best-effort-with-deadline": (VALID + "deadlines: [{after: 1h}]\n", "deadlines"),
    "soft-slo-increasing-rewards": (
        VALID
        + "class: soft-slo\n"
        + "deadlines: [{after: 1h, reward: 10}, {after: 2h, reward: 50}]\n",
        "later deadline cannot pay a larger reward",
    ),
    "bad-deadline-duration": (
        VALID + "class: strict-slo\ndeadlines: [{after: soon}]\n",
        "deadlines[0].after",
    ),
    "missing-stop": (VALID.replace("stop: {iterations: 100}\n", ""), "stop: required"),
    "stop-zero-iterations": (
        VALID.replace("{iterations: 100}", "{iterations: 0}"),
        "stop.iterations",
    ),
    "name-with-spaces": (VALID.replace("name: cli-job", "name: my job"), "name:"),
    "reserved-env": (VALID + "env: {MLSCHED_TASK_ID: x}\n", "env: MLSCHED_TASK_ID is reserved"),
}


MISSING = b"<missing>"
DIRECTORY = b"<directory>"
SPECIAL_FILES = {
    "nonexistent-file": (MISSING, "cannot read"),
    "directory-not-file": (DIRECTORY, "cannot read"),
    "every-problem-listed": (
        b"name: a b\ngpus: -1\nclass: gold\n",
        "command: required",  # and the others: see test_submit_lists_every_problem
    ),
}


class BadSubmissions:
    def __init__(self, results: dict, jobs_after: list[dict]) -> None:
        self.results: dict[str, tuple[Path, subprocess.CompletedProcess[str]]] = results
        self.jobs_after = jobs_after  # `mlsched jobs --json --all` once every one was refused


@pytest.fixture(scope="module")
def bad_submissions(
    empty_controller: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> BadSubmissions:
    """Every bad spec submitted at once (concurrent subprocesses keep this fast), then the
    controller's job list."""
    folder = tmp_path_factory.mktemp("specs")
    files: dict[str, Path] = {}
    cases = {k: (t.encode(), w) for k, (t, w) in BAD_SPECS.items()} | SPECIAL_FILES
    for case, (content, _) in cases.items():
        path = folder / f"{case}.yaml"
        if content == DIRECTORY:
            path.mkdir()
        elif content != MISSING:
            # A unique, valid name per case: a stored job would say which case let it through.
            path.write_bytes(content.replace(b"name: cli-job", f"name: {case}".encode()))
        files[case] = path
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = {
            case: pool.submit(client, "submit", path, addr=empty_controller)
            for case, path in files.items()
        }
        done = {case: (files[case], future.result()) for case, future in results.items()}
    return BadSubmissions(done, all_jobs(empty_controller))


def _assert_refused(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("mlsched: invalid job spec"), result.stderr
    for w in words:
        assert w in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("case", [*BAD_SPECS, *SPECIAL_FILES])
def test_submit_bad_spec_exits_2_and_stores_nothing(
    bad_submissions: BadSubmissions, case: str
) -> None:
    path, result = bad_submissions.results[case]
    words = (BAD_SPECS.get(case) or SPECIAL_FILES[case])[1]
    _assert_refused(result, words)
    if not path.is_file():
        assert str(path) in result.stderr  # the message names the path it cannot read
    assert case not in {job["name"] for job in bad_submissions.jobs_after}
    assert bad_submissions.jobs_after == []


def test_submit_lists_every_problem(bad_submissions: BadSubmissions) -> None:
    _, result = bad_submissions.results["every-problem-listed"]
    _assert_refused(
        result, "name:", "command: required", "gpus: must be between", "class:", "stop:"
    )


def test_submit_non_utf8_file(empty_controller: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_bytes(b"name: \xff\xfe\ngpus: 1\n")
    result = client("submit", spec, addr=empty_controller)
    assert all_jobs(empty_controller) == []
    _assert_refused(result, str(spec))


# --- the happy path and server-side refusals ---------------------------------------------


def test_submit_list_describe_cancel(controller: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID)
    result = client("submit", spec, addr=controller)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("submitted j-"), result.stdout
    job_id = result.stdout.split()[1]

    listed = json.loads(client("jobs", "--json", addr=controller).stdout)
    assert [(j["id"], j["user"], j["name"], j["gpus"]) for j in listed] == [
        (job_id, "alice", "cli-job", 2)
    ]
    assert json.loads(client("jobs", "--json", addr=controller, user="bob").stdout) == []

    described = client("describe", job_id, "--json", addr=controller)
    assert described.returncode == 0, described.stderr
    job = json.loads(described.stdout)
    assert job["state"] == "PENDING"
    assert job["command"] == ["python", "train.py", "--lr", "0.1"]

    denied = client("cancel", job_id, addr=controller, user="bob")
    assert denied.returncode == exitcodes.PERMISSION_DENIED
    assert "PERMISSION_DENIED" in denied.stderr, denied.stderr
    assert "Traceback" not in denied.stderr
    assert json.loads(client("describe", job_id, "--json", addr=controller).stdout)["state"] == (
        "PENDING"
    )

    cancelled = client("cancel", job_id, addr=controller)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"{job_id}: CANCELLED"
    job = json.loads(client("describe", job_id, "--json", addr=controller).stdout)
    assert job["state"] == "CANCELLED"

    again = client("cancel", job_id, addr=controller)
    assert again.returncode == exitcodes.FAILED_PRECONDITION
    assert "FAILED_PRECONDITION" in again.stderr, again.stderr

    events = client("events", "--json", "--job", job_id, addr=controller)
    assert events.returncode == 0, events.stderr
    kinds = [json.loads(line)["kind"] for line in events.stdout.splitlines()]
    assert kinds[0] == "job_submitted"
    assert "job_state" in kinds


def test_describe_unknown_job_is_not_found(controller: LocalCluster) -> None:
    result = client("describe", "j-nope", addr=controller)
    assert result.returncode == exitcodes.NOT_FOUND
    assert "NOT_FOUND" in result.stderr, result.stderr
    assert "j-nope" in result.stderr
    assert "Traceback" not in result.stderr


def test_logs_of_unknown_job_is_not_found(controller: LocalCluster) -> None:
    result = client("logs", "j-nope", addr=controller)
    assert result.returncode == exitcodes.NOT_FOUND
    assert "NOT_FOUND" in result.stderr, result.stderr


def test_nodes_without_agents_is_empty(controller: LocalCluster) -> None:
    result = client("nodes", "--json", addr=controller)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_events_prints_json_lines(controller: LocalCluster, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID.replace("cli-job", "events-job"))
    submitted = client("submit", spec, addr=controller, user="carol")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.split()[1]
    result = client("events", "--json", addr=controller, user="carol")
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events, result.stdout
    assert {"seq", "time", "kind", "job", "node", "message"} <= set(events[0])
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert {"kind": "job_submitted", "job": job_id} in [
        {"kind": e["kind"], "job": e["job"]} for e in events
    ]


def test_unreachable_controller_is_unavailable() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        addr = f"127.0.0.1:{s.getsockname()[1]}"
    result = client("jobs", addr=addr)
    assert result.returncode == exitcodes.UNAVAILABLE
    assert "UNAVAILABLE" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# --- help and process commands -----------------------------------------------------------


def test_help_lists_every_subcommand() -> None:
    result = mlsched("--help")
    assert result.returncode == 0, result.stderr
    for name in SUBCOMMANDS:
        assert f"\n    {name}" in result.stdout, name


def test_no_subcommand_is_a_usage_error() -> None:
    result = mlsched()
    assert result.returncode == 2
    assert "usage: mlsched" in result.stderr


@pytest.mark.parametrize(
    ("token_args", "words"),
    [
        ((), "a join token is required"),
        (("--join-token-file", "{tmp}/missing-token"), "cannot read join token file"),
        (("--join-token-file", "{tmp}/empty-token"), "a join token is required"),
    ],
    ids=["none", "missing-file", "empty-file"],
)
def test_an_insecure_controller_without_a_join_token_refuses_to_start(
    tmp_path: Path, token_args: tuple[str, ...], words: str
) -> None:
    (tmp_path / "empty-token").write_text("\n")
    state_dir = tmp_path / "state"
    args = [a.format(tmp=tmp_path) for a in token_args]
    result = mlsched(
        "controller", "--listen", "127.0.0.1:0", "--state-dir", state_dir, "--insecure", *args
    )
    assert result.returncode != 0
    assert words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert "listening on" not in result.stdout
    assert not state_dir.exists()


def test_agent_with_a_missing_token_file_refuses_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "missing-token"
    state_dir = tmp_path / "agent"
    result = mlsched(
        "agent",
        "--controller",
        "127.0.0.1:1",
        "--join-token-file",
        missing,
        "--node-id",
        "n1",
        "--state-dir",
        state_dir,
        "--gpus",
        "1",
    )
    assert result.returncode != 0
    assert "cannot read the join token file" in result.stderr, result.stderr
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr
    assert not state_dir.exists()


# --- following jobs: submit --wait, submit -- CMD, logs -f -------------------------------


@pytest.fixture(scope="module")
def working_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A controller with one agent (one virtual GPU), so jobs run to their end."""
    cluster = LocalCluster(tmp_path_factory.mktemp("work") / "c")
    try:
        cluster.start_controller()
        cluster.start_agent("node-a", gpus=1)
        yield cluster
    finally:
        cluster.stop()


def quick_job(
    addr: LocalCluster, *flags: str | Path, command: list[str | Path]
) -> subprocess.CompletedProcess[str]:
    """``mlsched submit FLAGS -- COMMAND`` as alice (everything after ``--`` is the job's)."""
    addr.credentials("alice")
    bundle = addr.root / "users" / "alice"
    connect = ("--controller", addr.address, "--credentials", bundle)
    return mlsched("submit", *flags, *connect, "--", *command)


def test_submit_wait_exits_with_the_outcome_and_logs_follow_to_the_end(
    working_cluster: LocalCluster, tmp_path: Path
) -> None:
    script = tmp_path / "hello.py"
    script.write_text("for i in range(3):\n    print(f'step {i}', flush=True)\n")
    done = quick_job(working_cluster, "--wait", "--name", "hello", command=[sys.executable, script])
    assert done.returncode == exitcodes.OK, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("submitted j-") and lines[0].endswith("(hello)")
    job_id = lines[0].split()[1]
    assert lines[-1].startswith(f"{job_id}: COMPLETED")
    assert any("RUNNING" in line for line in lines[1:-1]), lines  # the way there, as it went

    logs = client("logs", "-f", job_id, addr=working_cluster)  # the job ended: prints, returns
    assert logs.returncode == exitcodes.OK, logs.stderr
    assert [line for line in logs.stdout.splitlines() if line.startswith("step")] == [
        "step 0",
        "step 1",
        "step 2",
    ]


def test_submit_wait_of_a_failing_job_exits_10(working_cluster: LocalCluster) -> None:
    failed = quick_job(
        working_cluster, "--wait", command=[sys.executable, "-c", "raise SystemExit(3)"]
    )
    assert failed.returncode == exitcodes.JOB_FAILED, (failed.stdout, failed.stderr)
    assert "FAILED" in failed.stdout.splitlines()[-1]


def test_a_quick_job_is_checked_like_a_spec(empty_controller: LocalCluster) -> None:
    result = quick_job(empty_controller, "--gpus", "0", command=["python", "x.py"])
    assert result.returncode == exitcodes.INVALID
    assert "gpus: must be between 1 and" in result.stderr
    neither = client("submit", addr=empty_controller)
    assert neither.returncode == exitcodes.INVALID
    assert "give a spec file, or a command after --" in neither.stderr
    assert all_jobs(empty_controller) == []
