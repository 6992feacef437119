"""Checkpoint files: atomicity, LATEST, pruning, RNG round trips, restore."""

from __future__ import annotations

import random
from pathlib import Path, PurePosixPath

import pytest
import torch
from torch import nn

import trainer_shim
from trainer_shim.checkpoint import LATEST, CheckpointStore, capture_rng, restore_rng


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _train_one_step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    loss = model(torch.randn(5, 4)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_save_writes_the_file_then_latest_and_prunes_to_two(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (100, 200, 300):
        path = store.save(step, {"step": step})
        assert path == tmp_path / f"step-{step}.pt"
        assert (tmp_path / LATEST).read_text().strip() == path.name
    assert sorted(p.name for p in tmp_path.iterdir()) == [LATEST, "step-200.pt", "step-300.pt"]
    loaded = store.load_latest()
    assert loaded is not None
    assert loaded[0].name == "step-300.pt"
    assert loaded[1] == {"step": 300}


def test_leftover_tmp_files_are_ignored_and_cleaned(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(5, {"step": 5})
    # A writer killed mid-save leaves a partial temporary file of a newer step behind.
    (tmp_path / "step-9.pt.tmp").write_bytes(b"\x80partial")
    (tmp_path / "LATEST.tmp").write_text("step-9.pt\n")
    loaded = store.load_latest()
    assert loaded is not None and loaded[1]["step"] == 5
    assert store.steps() == [5]
    store.save(6, {"step": 6})
    assert not list(tmp_path.glob("*.tmp"))


def test_latest_always_names_a_complete_file(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=1)
    for step in range(1, 6):
        store.save(step, {"step": step, "weights": torch.full((64,), float(step))})
        name = (tmp_path / LATEST).read_text().strip()
        payload = torch.load(tmp_path / name, weights_only=True)
        assert payload["step"] == step
        assert torch.equal(payload["weights"], torch.full((64,), float(step)))


def test_unloadable_latest_falls_back_to_an_older_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(1, {"step": 1})
    store.save(2, {"step": 2})
    (tmp_path / "step-2.pt").write_bytes(b"garbage")  # e.g. storage lost the data
    loaded = store.load_latest()
    assert loaded is not None and loaded[1]["step"] == 1


def test_a_fresh_timeline_removes_newer_checkpoints_of_an_old_one(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for step in (400, 500):
        store.save(step, {"step": step})
    store.save(100, {"step": 100})  # a fresh start over the same directory
    assert store.steps() == [100]
    assert store.latest_path() == tmp_path / "step-100.pt"


def test_rng_round_trip_gives_identical_random_numbers() -> None:
    random.seed(1)
    torch.manual_seed(2)
    random.gauss(0, 1)  # leaves a cached gaussian in the python state
    state = capture_rng()
    expected = (torch.rand(4), random.random(), random.gauss(0, 1))
    torch.manual_seed(99)
    random.seed(99)
    restore_rng(state)
    actual = (torch.rand(4), random.random(), random.gauss(0, 1))
    assert torch.equal(actual[0], expected[0])
    assert actual[1:] == expected[1:]


def test_job_checkpoint_restores_model_optimizer_rng_and_extra(tmp_path: Path) -> None:
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    with trainer_shim.init(checkpoint_dir=tmp_path, batch_size=32, environ={}) as job:
        assert job.restore(model, optimizer=optimizer) == 0  # fresh start: nothing read
        _train_one_step(model, optimizer)
        job.report(1, batch_size=48)
        path = job.save_checkpoint(
            1, nn.DataParallel(model), optimizer=optimizer, extra={"epoch": 3}
        )
        assert path == tmp_path / "step-1.pt"
        after_save = torch.rand(3)
        _train_one_step(model, optimizer)  # diverge from the checkpoint
    saved = torch.load(path, weights_only=True)  # every value is weights-only safe
    assert set(saved["model"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # unwrapped

    model2 = _model()
    optimizer2 = torch.optim.Adam(model2.parameters(), lr=0.1)
    torch.manual_seed(12345)
    with trainer_shim.init(checkpoint_dir=tmp_path, resume=True, environ={}) as job:
        assert job.restore(model2, optimizer=optimizer2) == 1
        assert job.restored is not None and job.restored.batch_size == 48
        assert job.load_extra() == {"epoch": 3}
        assert job.last_step == 1
        assert torch.equal(torch.rand(3), after_save)
    reference = torch.load(path, weights_only=True)
    for name, tensor in model2.state_dict().items():
        assert torch.equal(tensor, reference["model"][name])
    assert optimizer2.state_dict()["state"][0]["step"] == 1


@pytest.mark.parametrize("bad", [PurePosixPath("a"), lambda: None])
def test_extra_must_be_weights_only_loadable(tmp_path: Path, bad: object) -> None:
    with (
        trainer_shim.init(checkpoint_dir=tmp_path, environ={}) as job,
        pytest.raises(TypeError, match="weights_only"),
    ):
        job.save_checkpoint(1, _model(), extra={"thing": bad})
    assert not list(tmp_path.glob("step-*"))


def test_resume_without_checkpoint_is_a_fresh_start(tmp_path: Path) -> None:
    with trainer_shim.init(checkpoint_dir=tmp_path / "empty", resume=True, environ={}) as job:
        assert job.restore(_model()) == 0
        assert job.restored is None
        assert job.load_extra() == {}


def test_no_checkpoint_dir_makes_save_a_no_op(caplog: pytest.LogCaptureFixture) -> None:
    with trainer_shim.init(environ={}) as job:
        assert job.save_checkpoint(1, _model()) is None
        assert job.save_checkpoint(2, _model()) is None
        assert job.restore(_model()) == 0
    assert sum("no checkpoint directory" in r.message for r in caplog.records) == 1


def test_only_rank_zero_writes(tmp_path: Path) -> None:
    environ = {"RANK": "1", "WORLD_SIZE": "2"}
    with trainer_shim.init(checkpoint_dir=tmp_path, environ=environ) as job:
        assert job.save_checkpoint(7, _model()) is None
        assert job.checkpoint_step == 7
    assert not list(tmp_path.iterdir())


def test_resuming_at_the_budget_runs_no_further_iteration(tmp_path: Path) -> None:
    model = _model()
    with trainer_shim.init(checkpoint_dir=tmp_path, environ={}) as job:
        job.save_checkpoint(10, model)
    with trainer_shim.init(
        checkpoint_dir=tmp_path, resume=True, max_iterations=10, environ={}
    ) as job:
        assert job.restore(model) == 10
        assert job.should_stop()
