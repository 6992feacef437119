"""Checkpoint files: atomicity, LATEST, pruning, RNG round trips, restore."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest
import torch
from torch import nn

import trainer_shim
from trainer_shim.checkpoint import (
    FENCE,
    LATEST,
    LOCK,
    CheckpointStore,
    StaleCheckpointWrite,
    capture_rng,
    restore_rng,
)


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
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        FENCE,
        LATEST,
        LOCK,
        "step-200.pt",
        "step-300.pt",
    ]
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


def test_a_fresh_timeline_takes_latest_but_deletes_no_newer_step(tmp_path: Path) -> None:
    old = CheckpointStore(tmp_path, generation=1)
    for step in (400, 500):
        old.save(step, {"step": step})
    fresh = CheckpointStore(tmp_path, generation=2)  # a fresh start over the same directory
    fresh.save(100, {"step": 100})
    assert fresh.steps() == [100, 400, 500]
    assert fresh.latest_path() == tmp_path / "step-100.pt"
    loaded = fresh.load_latest()
    assert loaded is not None and loaded[1]["step"] == 100


def test_within_one_generation_latest_never_moves_backwards(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, generation=3)
    store.save(500, {"step": 500})
    store.save(400, {"step": 400})
    assert store.latest_path() == tmp_path / "step-500.pt"
    assert store.steps() == [400, 500]


def test_a_late_save_of_a_stale_attempt_is_refused_issue_11_case(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 11 #3: the new attempt saved 1000; a late save of the stale attempt at 900 must
    neither delete 1000 nor move LATEST to 900."""
    stale = CheckpointStore(tmp_path, generation=1)
    stale.save(800, {"step": 800})
    new = CheckpointStore(tmp_path, generation=2)
    new.save(1000, {"step": 1000})
    with pytest.raises(StaleCheckpointWrite, match="generation 2 has taken over"):
        stale.save(900, {"step": 900})
    assert "refusing to save step 900 for generation (attempt) 1" in caplog.text
    assert new.steps() == [800, 1000]
    assert (tmp_path / LATEST).read_text().strip() == "step-1000.pt"
    assert not list(tmp_path.glob("*.tmp"))
    loaded = new.load_latest()
    assert loaded is not None and loaded[1]["step"] == 1000


def test_a_claim_fences_the_stale_attempt_before_the_new_one_saves(tmp_path: Path) -> None:
    stale = CheckpointStore(tmp_path, generation=1)
    stale.save(800, {"step": 800})
    CheckpointStore(tmp_path, generation=2).claim()  # the new attempt started (restore)
    with pytest.raises(StaleCheckpointWrite):
        stale.save(900, {"step": 900})
    assert stale.steps() == [800]
    assert stale.latest_path() == tmp_path / "step-800.pt"


class _SaveWhilePickled:
    """Pickling this runs ``action``: another writer acts while a save is mid-write."""

    def __init__(self, action: Callable[[], object]) -> None:
        self.action = action

    def __reduce__(self) -> tuple[object, ...]:
        self.action()
        return (int, (0,))


def test_a_stale_save_in_flight_when_the_new_attempt_publishes_is_refused(
    tmp_path: Path,
) -> None:
    """Unique temporary names: both writers write step 900's file at once; neither clobbers
    the other's temporary file, and only the newer generation's file is published."""
    stale = CheckpointStore(tmp_path, generation=1)
    new = CheckpointStore(tmp_path, generation=2)
    seen: list[list[str]] = []

    def new_attempt_saves() -> None:
        seen.append(sorted(p.name for p in tmp_path.glob("*.tmp")))
        new.save(900, {"step": 900, "by": "new"})
        new.save(1000, {"step": 1000, "by": "new"})

    with pytest.raises(StaleCheckpointWrite):
        stale.save(900, {"step": 900, "by": "stale", "hook": _SaveWhilePickled(new_attempt_saves)})
    assert len(seen) == 1 and len(seen[0]) == 1 and seen[0][0].startswith("step-900.pt.g1.")
    assert new.steps() == [900, 1000]
    assert torch.load(tmp_path / "step-900.pt", weights_only=True)["by"] == "new"
    assert (tmp_path / LATEST).read_text().strip() == "step-1000.pt"
    assert not list(tmp_path.glob("*.tmp"))


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


def _cluster(tmp_path: Path, attempt: int, resume: bool) -> dict[str, str]:
    return {
        "MLSCHED_TASK_ID": f"j-11/0/{attempt}",
        "MLSCHED_CHECKPOINT_DIR": str(tmp_path / "ck"),
        "MLSCHED_RESUME": "1" if resume else "0",
        "MLSCHED_EXIT_FILE": str(tmp_path / f"exit-{attempt}.json"),
        "MLSCHED_VIRTUAL_GPUS": "1",
    }


def test_a_stale_attempt_is_refused_and_told_to_suspend(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = _model()
    with trainer_shim.init(environ=_cluster(tmp_path, 1, False), flush_timeout=0.2) as stale:
        assert stale.restore(model) == 0
        assert stale.save_checkpoint(800, model) is not None
        with trainer_shim.init(environ=_cluster(tmp_path, 2, True), flush_timeout=0.2) as new:
            assert new.restore(model) == 800  # claims the directory for attempt 2
            assert not stale.should_suspend()  # nothing refused yet
            assert stale.save_checkpoint(900, model) is None  # refused: attempt 2 owns it
            assert new.save_checkpoint(1000, model) is not None
        assert stale.save_checkpoint(950, model) is None
        assert stale.should_suspend()
        assert stale.suspend_reason == "stale attempt: generation 2 owns the checkpoints"
    assert "this attempt is stale and will suspend" in caplog.text
    store = CheckpointStore(tmp_path / "ck")
    assert store.steps() == [800, 1000]
    assert (tmp_path / "ck" / LATEST).read_text().strip() == "step-1000.pt"
