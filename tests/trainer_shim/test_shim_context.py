"""JobContext lifecycle: exit records, SIGTERM, identity, local mode."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import trainer_shim
from trainer_shim.exit_record import ExitRecord, write_exit_record


def _read(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())


def test_exit_record_completed(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit.json"
    with trainer_shim.init(
        max_iterations=2, checkpoint_dir=tmp_path / "ck", exit_file=exit_file, environ={}
    ) as job:
        while not job.should_stop():
            job.report(job.last_step + 1)
        job.save_checkpoint(2, nn.Linear(1, 1))
    assert _read(exit_file) == {
        "outcome": "completed",
        "step": 2,
        "checkpoint_step": 2,
        "reason": "max_iterations reached: step 2 >= 2",
    }
    assert not list(tmp_path.glob("exit.json.tmp*"))


def test_exit_record_suspended_on_sigterm_and_handler_restored(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit.json"
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    try:
        with trainer_shim.init(
            checkpoint_dir=tmp_path / "ck", exit_file=exit_file, environ={}
        ) as job:
            job.report(5)
            assert not job.should_suspend()
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in this (main) thread
            assert job.should_suspend()
            job.save_checkpoint(5, nn.Linear(1, 1))
        assert _read(exit_file) == {
            "outcome": "suspended",
            "step": 5,
            "checkpoint_step": 5,
            "reason": "SIGTERM",
        }
        os.kill(os.getpid(), signal.SIGTERM)  # the test's own handler is back
        assert calls == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_exit_record_failed_and_the_exception_propagates(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit.json"
    with (
        pytest.raises(RuntimeError, match="boom"),
        trainer_shim.init(exit_file=exit_file, environ={}) as job,
    ):
        job.report(3)
        raise RuntimeError("boom")
    assert _read(exit_file) == {
        "outcome": "failed",
        "step": 3,
        "checkpoint_step": 0,
        "reason": "RuntimeError('boom')",
    }


def test_sys_exit_zero_counts_as_completed(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit.json"
    with pytest.raises(SystemExit), trainer_shim.init(exit_file=exit_file, environ={}):
        raise SystemExit(0)
    assert _read(exit_file)["outcome"] == "completed"


def test_checkpoint_step_defaults_to_the_restored_step(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    with trainer_shim.init(checkpoint_dir=tmp_path / "ck", environ={}) as job:
        job.save_checkpoint(40, model)
    exit_file = tmp_path / "exit.json"
    with trainer_shim.init(
        checkpoint_dir=tmp_path / "ck", resume=True, exit_file=exit_file, environ={}
    ) as job:
        assert job.restore(model) == 40
    assert _read(exit_file) == {
        "outcome": "completed",
        "step": 40,
        "checkpoint_step": 40,
        "reason": "",
    }


def test_exit_record_rejects_unknown_outcomes(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        ExitRecord("exploded", 1, 1)
    write_exit_record(tmp_path / "r.json", ExitRecord("completed", 1, 0))
    assert _read(tmp_path / "r.json")["outcome"] == "completed"


def test_local_identity_and_device() -> None:
    with trainer_shim.init(batch_size=64, environ={}) as job:
        assert job.is_local
        assert (job.job_id, job.task_id) == ("local", None)
        assert (job.rank, job.world_size, job.local_rank) == (0, 1, 0)
        assert job.batch_size == 64
        assert job.device == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        assert job.init_process_group() is False  # WORLD_SIZE=1: nothing to join
        assert job.requested_batch_size() is None
        assert job.lease_expires_at is None


def test_virtual_gpus_train_on_cpu() -> None:
    environ = {"MLSCHED_VIRTUAL_GPUS": "1", "CUDA_VISIBLE_DEVICES": "0"}
    with trainer_shim.init(environ=environ) as job:
        assert job.device == torch.device("cpu")


def test_cluster_settings_come_from_the_environment(tmp_path: Path) -> None:
    environ = {
        "MLSCHED_TASK_ID": "j-9/0/3",
        "MLSCHED_CHECKPOINT_DIR": str(tmp_path / "env-ck"),
        "MLSCHED_MAX_ITERATIONS": "50",
        "MLSCHED_BATCH_SIZE": "32",
        "MLSCHED_EXIT_FILE": str(tmp_path / "exit.json"),
    }
    with trainer_shim.init(
        checkpoint_dir=tmp_path / "kw-ck",
        max_iterations=10,
        target=("accuracy", 0.5),
        batch_size=8,
        flush_timeout=0.2,
        environ=environ,
    ) as job:
        assert not job.is_local
        assert (job.job_id, job.task_id) == ("j-9", "j-9/0/3")
        assert job.checkpoint_dir == tmp_path / "env-ck"
        assert job.batch_size == 32
        assert (job.criteria.max_iterations, job.criteria.target) == (50, None)
    assert (tmp_path / "exit.json").exists()


def test_cluster_criteria_fall_back_to_the_script_when_the_spec_sets_none() -> None:
    environ = {"MLSCHED_TASK_ID": "j-9/0/3"}
    with trainer_shim.init(max_iterations=10, flush_timeout=0.2, environ=environ) as job:
        assert job.criteria.max_iterations == 10


def test_no_signal_handler_off_the_main_thread() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []

    def run() -> None:
        with trainer_shim.init(environ={}):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [before]
