"""The controller says which policy it runs, in its log and in its event feed."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from controller.cli import EXIT_STATE_DIR_IN_USE
from controller.clock import ManualClock
from controller.server import Controller, ControllerConfig
from mlsched.cli import main
from mlsched.model import IterationStop, JobSpec
from mlsched.statelock import StateDirInUse


@pytest.mark.parametrize(
    ("policy", "logged"), [("unisched", "policy unisched (the default)"), ("fifo", "policy fifo,")]
)
def test_the_controller_names_its_policy_at_start(tmp_path, caplog, policy, logged):
    config = ControllerConfig(
        listen="127.0.0.1:0", state_dir=tmp_path, join_token="t" * 32, policy=policy
    )
    controller = Controller(config, clock=ManualClock(1_000.0))
    with caplog.at_level(logging.INFO, logger="controller.server"):
        controller.start()
    try:
        assert logged in caplog.text
        events = controller.store.events_after(0, "")
        assert [e.message for e in events if e.kind == "controller_started"] == [
            f"listening on {controller.address}, policy {policy}"
        ]
    finally:
        controller.stop()


def run_controller_cli(*args: str) -> int:
    """``mlsched controller ARGS`` in this process, the root logger put back as it was after.

    The CLI replaces the root logger's handlers with one on the sys.stderr of the moment (this
    test's capture, closed when the test ends) at level INFO: left in place, every later
    controller in this pytest process (its event follower's INFO lines) would write to a closed
    file, and "--- Logging error ---" tracebacks would reach the terminal between tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        return main(["controller", *args])
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _snapshot_dir(path):
    """The directory's files but SQLite's shared-memory index (``*-shm``), which the first
    controller's own readers (its event follower, `events -f` streams) update at any time."""
    return {
        p.name: p.read_bytes()
        for p in sorted(path.iterdir())
        if p.is_file() and not p.name.endswith("-shm")
    }


def test_a_second_controller_on_the_same_state_dir_refuses_and_touches_nothing(tmp_path):
    config = ControllerConfig(listen="127.0.0.1:0", state_dir=tmp_path, join_token="t" * 32)
    first = Controller(config, clock=ManualClock(1_000.0))
    first.start()
    try:
        with first.state.lock:
            first.state.emit("marker", "written by the first controller")
        before = _snapshot_dir(tmp_path)
        with pytest.raises(StateDirInUse, match="another controller is using the state"):
            Controller(config, clock=ManualClock(2_000.0))
        code = run_controller_cli(
            "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path),
            "--join-token", "t" * 32, "--policy", "fifo",
        )  # fmt: skip
        assert code == EXIT_STATE_DIR_IN_USE
        assert _snapshot_dir(tmp_path) == before
    finally:
        first.stop()
    # the lock goes with the first controller: a successor starts and sees the first's state
    second = Controller(config, clock=ManualClock(3_000.0))
    second.start()
    try:
        assert "marker" in [e.kind for e in second.store.events_after(0, "")]
    finally:
        second.stop()


def test_the_refusal_is_a_clear_message_and_its_own_exit_code(tmp_path, capsys):
    config = ControllerConfig(listen="127.0.0.1:0", state_dir=tmp_path, join_token="t" * 32)
    first = Controller(config, clock=ManualClock(1_000.0))
    first.start()
    try:
        code = run_controller_cli(
            "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path),
            "--join-token", "t" * 32, "--policy", "fifo",
        )  # fmt: skip
    finally:
        first.stop()
    assert code == EXIT_STATE_DIR_IN_USE == 3
    err = capsys.readouterr().err
    assert f"another controller is using the state directory {tmp_path}" in err
    assert "refusing to start" in err


def test_a_corrupt_row_is_quarantined_and_the_controller_starts_with_the_rest(tmp_path, caplog):
    config = ControllerConfig(
        listen="127.0.0.1:0", state_dir=tmp_path, join_token="t" * 32, policy="fifo"
    )
    first = Controller(config, clock=ManualClock(1_000.0))
    first.start()
    good = first.ops.submit("alice", make_spec("good"))
    bad = first.ops.submit("alice", make_spec("bad"))
    first.stop()
    conn = sqlite3.connect(tmp_path / "controller.db")
    conn.execute("UPDATE jobs SET data = '{\"truncated' WHERE id = ?", (bad.id,))
    conn.commit()
    conn.close()
    with caplog.at_level(logging.ERROR, logger="controller.state"):
        second = Controller(config, clock=ManualClock(2_000.0))  # before: JSONDecodeError
    second.start()
    try:
        assert list(second.state.jobs) == [good.id]
        assert f"quarantined unreadable jobs row {bad.id!r} (JSONDecodeError" in caplog.text
        [event] = [e for e in second.store.events_after(0, "") if e.kind == "state_row_quarantined"]
        assert event.job_id == bad.id and "the controller starts without it" in event.message
    finally:
        second.stop()


def make_spec(name: str) -> JobSpec:
    return JobSpec(name, ("python", "train.py"), 1, IterationStop(100))


def test_mlfs_params_reach_the_controllers_policy(tmp_path):
    from controller.policy.mlfs.config import MlfsConfig

    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path,
        join_token="t" * 32,
        policy="mlf-h",
        mlfs=MlfsConfig(gamma_w=0.0),
    )
    controller = Controller(config, clock=ManualClock(1_000.0))
    controller.start()
    try:
        assert controller.scheduler.policy.config == MlfsConfig(gamma_w=0.0)
    finally:
        controller.stop()


def test_a_bad_mlfs_param_refuses_to_start_and_touches_nothing(tmp_path, capsys):
    state = tmp_path / "state"
    with pytest.raises(
        SystemExit, match=r"mlsched: MlfsConfig.gamma_w must be >= 0 \(Eq. 4\), got -1.0"
    ):
        run_controller_cli(
            "--listen", "127.0.0.1:0", "--state-dir", str(state),
            "--join-token", "t" * 32, "--policy", "mlf-h", "--mlfs-param", "gamma_w=-1",
        )  # fmt: skip
    assert not state.exists()


def test_the_controller_runs_the_mlfrl_model_it_is_given(tmp_path):
    import shutil

    from controller.policy.mlfs.rl.network import DEFAULT_MODEL_PATH

    model = shutil.copy(DEFAULT_MODEL_PATH, tmp_path / "for-this-cluster.pt")
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        join_token="t" * 32,
        policy="mlfs",
        mlfs_model=Path(model),
    )
    controller = Controller(config, clock=ManualClock(1_000.0))
    controller.start()
    try:
        policy = controller.scheduler.policy
        assert policy.model_path == Path(model) and policy.load_control  # MLF-C on: mlfs
    finally:
        controller.stop()


def test_a_missing_mlfrl_model_refuses_to_start(tmp_path):
    missing = tmp_path / "none.pt"
    with pytest.raises(SystemExit, match=f"mlsched: MLF-RL model file not found: {missing}"):
        run_controller_cli(
            "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"),
            "--join-token", "t" * 32, "--policy", "mlf-rl", "--mlfs-model", str(missing),
        )  # fmt: skip


@pytest.mark.parametrize("policy", ["slaq", "slaq-maxmin"])
def test_the_controller_gives_slaq_the_restart_pause_it_is_told(tmp_path, policy):
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        join_token="t" * 32,
        policy=policy,
        slaq_pause_s=2.5,
    )
    controller = Controller(config, clock=ManualClock(1_000.0))
    controller.start()
    try:
        policy_object = controller.scheduler.policy
        assert policy_object.pause_s == 2.5 and policy_object.name == policy
        assert policy_object.maxmin == (policy == "slaq-maxmin")
    finally:
        controller.stop()


def test_slaq_keeps_its_default_pause_and_other_policies_ignore_the_setting():
    from controller.policy import make_policy
    from controller.policy.slaq import RESIZE_PAUSE_S

    assert make_policy("slaq").pause_s == RESIZE_PAUSE_S == 25.0
    assert make_policy("fifo", slaq_pause_s=3.0).name == "fifo"
    with pytest.raises(ValueError, match=r"slaq_pause_s must not be negative, got -1\.0"):
        make_policy("slaq", slaq_pause_s=-1.0)


def test_a_negative_slaq_pause_refuses_to_start(tmp_path):
    state = tmp_path / "state"
    with pytest.raises(SystemExit, match="mlsched: --slaq-pause-s must not be negative"):
        run_controller_cli(
            "--listen", "127.0.0.1:0", "--state-dir", str(state),
            "--join-token", "t" * 32, "--policy", "slaq", "--slaq-pause-s", "-1",
        )  # fmt: skip
    assert not state.exists()
