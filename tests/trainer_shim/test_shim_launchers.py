"""The shim under torchrun and the missing-process-group warning (issue 18)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import trainer_shim
from trainer_shim.env import parse_env
from trainer_shim.launchers import GroupCheck, speaks_for_task

CHILD = {
    "MLSCHED_TASK_ID": "j-1/0/2",
    "MLSCHED_TASK_TOKEN": "tok",
    "MLSCHED_AGENT_ADDR": "127.0.0.1:9",
    "MLSCHED_LAUNCHER": "torchrun",
    "RANK": "1",
    "WORLD_SIZE": "2",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
}


def test_only_local_rank_zero_speaks_for_a_torchrun_task():
    assert not speaks_for_task(parse_env(CHILD))
    assert speaks_for_task(parse_env({**CHILD, "RANK": "0", "LOCAL_RANK": "0"}))
    # the agent's own launcher: every process is a task of its own
    per_process = {k: v for k, v in CHILD.items() if k != "MLSCHED_LAUNCHER"}
    assert speaks_for_task(parse_env(per_process))


def test_a_torchrun_child_of_local_rank_one_opens_no_session_and_writes_no_exit_record(
    tmp_path: Path,
):
    environ = {
        **CHILD,
        "MLSCHED_CHECKPOINT_DIR": str(tmp_path / "ck"),
        "MLSCHED_EXIT_FILE": str(tmp_path / "exit.json"),
    }
    with trainer_shim.init(environ=environ, handle_sigterm=False) as job:
        assert job._session is None and job._exit_file is None
        assert (job.rank, job.world_size, job.checkpoint_dir) == (1, 2, tmp_path / "ck")
    assert not (tmp_path / "exit.json").exists()


def test_group_check_warns_once_at_the_third_report_without_a_group():
    check = GroupCheck(world_size=2)
    asked: list[int] = []

    def no_group() -> bool:
        asked.append(check.reports)
        return False

    answers = [check.observe(no_group) for _ in range(5)]
    assert asked == [3]  # the group is looked at once, at the third report
    assert answers[:2] == [None, None] and answers[3:] == [None, None]
    assert answers[2] is not None and "WORLD_SIZE=2" in answers[2]


@pytest.mark.parametrize(("world_size", "active"), [(1, False), (2, True)])
def test_group_check_is_silent_alone_or_in_a_group(world_size, active):
    check = GroupCheck(world_size=world_size)
    assert [check.observe(lambda: active) for _ in range(4)] == [None] * 4


def test_the_shim_logs_the_warning_for_two_processes_without_a_group(caplog):
    environ = {"RANK": "0", "WORLD_SIZE": "2"}
    with (
        caplog.at_level(logging.WARNING, "trainer_shim"),
        trainer_shim.init(environ=environ, handle_sigterm=False) as job,
    ):
        for step in (1, 2):
            job.report(step)
        assert not caplog.records
        job.report(3)
    [record] = caplog.records
    assert "none has joined a torch.distributed process group" in record.getMessage()
