"""The example scripts as real processes: locally, and under a test peer playing the agent."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from shim_testkit import (
    EXAMPLES,
    PYTHON,
    FakeAgent,
    cluster_env,
    free_port,
    subprocess_env,
    suspend_now,
)

TIMEOUT_S = 120
MLP_ARGS = ["--hidden", "64", "--eval-every", "100", "--checkpoint-every", "200"]
MLP_ITERATIONS = 1500  # steps a resumed MLP trains after its suspension
DDP_ARGS = ["--hidden", "32", "--eval-every", "50", "--checkpoint-every", "1000"]
DDP_ITERATIONS = 500  # steps a resumed DDP job trains after its suspension
# The budget of an attempt the test suspends: no machine reaches it, so the attempt ends by
# the suspension the test sends once it has seen the progress it waits for, however fast the
# job trains (a reachable budget raced the suspension, and lost on a fast machine). The
# resumed attempt then gets a budget counted from the step it was suspended at.
UNREACHABLE = 10**9


def start(script: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, str(EXAMPLES / script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    """Wait for an example; assert it exited 0; return its JSON summary line."""
    try:
        stdout, stderr = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    assert process.returncode == 0, f"exit {process.returncode}\n{stdout}\n{stderr}"
    return json.loads(stdout.strip().splitlines()[-1])


def exit_record(env: dict[str, str]) -> dict[str, Any]:
    return json.loads(Path(env["MLSCHED_EXIT_FILE"]).read_text())


def test_single_process_examples_train_locally(tmp_path: Path) -> None:
    """cnn_patterns.py and ddp_classifier.py with no agent and no WORLD_SIZE (in parallel)."""
    cnn = start(
        "cnn_patterns.py",
        ["--max-iterations", "300", "--checkpoint-dir", str(tmp_path / "cnn")],
        subprocess_env(),
    )
    ddp = start("ddp_classifier.py", ["--max-iterations", "300"], subprocess_env())
    cnn_summary, ddp_summary = finish(cnn), finish(ddp)
    assert cnn_summary["step"] == 300 and cnn_summary["accuracy"] > 0.6  # 6 classes
    assert (tmp_path / "cnn" / "LATEST").read_text().strip() == "step-300.pt"
    assert ddp_summary["step"] == 300 and ddp_summary["accuracy"] > 0.6  # 5 classes


def test_mlp_suspended_and_resumed_matches_an_uninterrupted_local_run(
    agent: FakeAgent, tmp_path: Path
) -> None:
    first_env = cluster_env(
        tmp_path, agent.addr, attempt=1, MLSCHED_MAX_ITERATIONS=str(UNREACHABLE)
    )
    agent.send_when(
        lambda a: a.max_iteration("j-test/0/1") >= 100, "j-test/0/1", suspend_now(), TIMEOUT_S
    )
    finish(start("mlp_classifier.py", MLP_ARGS, subprocess_env(first_env)))
    record = exit_record(first_env)
    suspended_at = record["step"]
    assert record["outcome"] == "suspended"
    assert suspended_at >= 100
    total = suspended_at + MLP_ITERATIONS
    assert record["checkpoint_step"] == suspended_at
    checkpoints = Path(first_env["MLSCHED_CHECKPOINT_DIR"])
    assert (checkpoints / "LATEST").read_text().strip() == f"step-{suspended_at}.pt"
    saved = [
        r.request.checkpoint_saved.step for r in agent.requests("j-test/0/1", "checkpoint_saved")
    ]
    assert saved[-1] == suspended_at

    # The uninterrupted run trains as far as the resumed one will, beside it.
    local = start(
        "mlp_classifier.py",
        [*MLP_ARGS, "--max-iterations", str(total), "--checkpoint-dir", str(tmp_path / "local")],
        subprocess_env(),
    )
    second_env = cluster_env(
        tmp_path, agent.addr, attempt=2, resume=True, MLSCHED_MAX_ITERATIONS=str(total)
    )
    resumed = finish(start("mlp_classifier.py", MLP_ARGS, subprocess_env(second_env)))
    restored = agent.requests("j-test/0/2", "restored")
    assert [r.request.restored.step for r in restored] == [suspended_at]
    record = exit_record(second_env)
    assert (record["outcome"], record["step"]) == ("completed", total)
    assert record["checkpoint_step"] == total
    reported = agent.progress("j-test/0/2")[-1]
    assert reported.iteration == total
    assert reported.metrics["accuracy"] > 0.8  # 5 spiral arms: chance is 0.2

    uninterrupted = finish(local)
    assert uninterrupted["step"] == total
    assert resumed["loss"] == uninterrupted["loss"]  # bit-identical: resume is exact
    assert resumed["accuracy"] == uninterrupted["accuracy"]


def _ddp_attempt(
    agent: FakeAgent,
    tmp_path: Path,
    attempt: int,
    resume: bool,
    world_size: int = 2,
    args: tuple[str, ...] = (),
    budget: int = UNREACHABLE,
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    port = free_port()
    envs = [
        cluster_env(
            tmp_path,
            agent.addr,
            job_id="j-ddp",
            rank=rank,
            world_size=world_size,
            attempt=attempt,
            resume=resume,
            master_port=port,
            MLSCHED_MAX_ITERATIONS=str(budget),
        )
        for rank in range(world_size)
    ]
    processes = [
        start("ddp_classifier.py", [*DDP_ARGS, *args], subprocess_env(env)) for env in envs
    ]
    return envs, [finish(p) for p in processes]


def test_ddp_ranks_suspend_together_and_resume_to_completion(
    agent: FakeAgent, tmp_path: Path
) -> None:
    rank0 = "j-ddp/0/1"
    agent.send_when(
        lambda a: a.max_iteration(rank0) >= 20, rank0, suspend_now("only rank 0"), TIMEOUT_S
    )
    envs, summaries = _ddp_attempt(agent, tmp_path, attempt=1, resume=False)
    records = [exit_record(env) for env in envs]
    assert [r["outcome"] for r in records] == ["suspended", "suspended"]
    suspended_at = records[0]["step"]
    assert suspended_at >= 20
    assert records[1]["step"] == suspended_at  # both ranks stopped at the same step
    assert [s["step"] for s in summaries] == [suspended_at, suspended_at]
    assert records[0]["reason"] == "SuspendNow: only rank 0"
    assert "another rank" in records[1]["reason"]
    checkpoints = Path(envs[0]["MLSCHED_CHECKPOINT_DIR"])
    assert (checkpoints / "LATEST").read_text().strip() == f"step-{suspended_at}.pt"
    assert agent.requests("j-ddp/1/1", "checkpoint_saved") == []  # only rank 0 writes

    total = suspended_at + DDP_ITERATIONS
    envs, summaries = _ddp_attempt(agent, tmp_path, attempt=2, resume=True, budget=total)
    for rank, env in enumerate(envs):
        restored = agent.requests(f"j-ddp/{rank}/2", "restored")
        assert [r.request.restored.step for r in restored] == [suspended_at]
        record = exit_record(env)
        assert (record["outcome"], record["step"]) == ("completed", total)
    assert summaries[0]["accuracy"] == summaries[1]["accuracy"] > 0.6


def test_ddp_profiled_on_one_rank_resumes_on_two_and_reports_compute_time(
    agent: FakeAgent, tmp_path: Path
) -> None:
    """A profiling run on fewer processes, then the full world size from its checkpoint: the
    checkpoint is rank 0's whole model and optimizer state, whatever the world size."""
    rank0 = "j-ddp/0/1"
    agent.send_when(
        lambda a: a.max_iteration(rank0) >= 20, rank0, suspend_now("profiled"), TIMEOUT_S
    )
    envs, summaries = _ddp_attempt(agent, tmp_path, attempt=1, resume=False, world_size=1)
    record = exit_record(envs[0])
    assert record["outcome"] == "suspended"
    suspended_at = record["step"]
    single = [p for p in agent.progress(rank0) if p.iteration > 1]
    assert single and all(0 < p.compute_time_s == p.iteration_time_s for p in single)

    total = suspended_at + DDP_ITERATIONS
    envs, summaries = _ddp_attempt(
        agent,
        tmp_path,
        attempt=2,
        resume=True,
        args=("--compute-probe-every", "10"),
        budget=total,
    )
    for rank, env in enumerate(envs):
        restored = agent.requests(f"j-ddp/{rank}/2", "restored")
        assert [r.request.restored.step for r in restored] == [suspended_at]
        assert exit_record(env)["outcome"] == "completed"
    assert summaries[0]["step"] == total
    assert summaries[0]["accuracy"] == summaries[1]["accuracy"] > 0.6
    # Probed from the second step of the attempt on: never more than the step itself.
    probed = [p for p in agent.progress("j-ddp/0/2") if p.iteration > suspended_at + 1]
    assert probed and all(0 < p.compute_time_s <= p.iteration_time_s for p in probed)
