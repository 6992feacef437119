"""The Lightning and Hugging Face adapters in local mode (issue 18 #2): a run suspended at a
chosen step saves there and stops; the next run restores that checkpoint and completes."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch

import trainer_shim
from trainer_shim.env import TaskEnv

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SUSPEND_AT, BUDGET = 7, 12


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))  # the examples import synthetic.py beside them
    return importlib.import_module


def _saved_weights(directory: Path, step: int) -> dict[str, torch.Tensor]:
    return torch.load(directory / f"step-{step}.pt", weights_only=True)["model"]


def _same(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> bool:
    state = model.state_dict()
    return state.keys() == weights.keys() and all(torch.equal(state[k], weights[k]) for k in state)


def test_lightning_environment_reports_the_launch_by_hand():
    lightning = pytest.importorskip("trainer_shim.integrations.lightning")
    env = TaskEnv(
        task_id="j-1/3/1",
        rank=3,
        world_size=4,
        local_rank=1,
        local_world_size=2,
        master_addr="10.0.0.5",
        master_port=29500,
        virtual_gpus=True,
    )
    cluster = lightning.MlschedEnvironment(env)
    assert cluster.creates_processes_externally
    assert (cluster.main_address, cluster.main_port) == ("10.0.0.5", 29500)
    assert (cluster.global_rank(), cluster.world_size(), cluster.local_rank()) == (3, 4, 1)
    assert cluster.node_rank() == 1  # ranks 2 and 3 are the second node's two processes
    assert lightning.trainer_placement(env) == {
        "accelerator": "cpu",
        "devices": 2,
        "num_nodes": 2,
        "strategy": "ddp",
    }


def _lightning_run(example, directory: Path, resume: bool, suspend_at: int | None):
    pl = pytest.importorskip("lightning.pytorch")
    adapter = importlib.import_module("trainer_shim.integrations.lightning")
    module = example("lightning_classifier")
    args = module.parse_args(["--train-size", "512", "--hidden", "16"])

    class SuspendAt(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == suspend_at:
                job.control.request_suspend("test: suspend")

    with trainer_shim.init(
        checkpoint_dir=directory, max_iterations=BUDGET, resume=resume, handle_sigterm=False
    ) as job:
        pl.seed_everything(0, verbose=False)
        inputs, labels = module.spirals(args.train_size, args.classes, seed=0)
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(inputs, labels), batch_size=args.batch_size
        )
        model = module.SpiralClassifier(args.hidden, args.classes, args.lr)
        callback = adapter.MlschedCallback(job)
        restored: list[bool] = []

        class CheckRestore(pl.Callback):
            def on_train_start(self, trainer, pl_module):
                if resume:
                    restored.append(_same(pl_module, _saved_weights(directory, SUSPEND_AT)))

        trainer = pl.Trainer(
            max_epochs=-1,
            callbacks=[SuspendAt(), callback, CheckRestore()],
            plugins=[adapter.MlschedEnvironment(job.env)],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            **adapter.trainer_placement(job.env),
        )
        trainer.fit(model, loader)
    return job, callback, restored


def test_lightning_suspends_at_a_step_and_resumes_from_it(example, tmp_path: Path):
    job, callback, _ = _lightning_run(example, tmp_path, resume=False, suspend_at=SUSPEND_AT)
    assert job.suspend_reason == "test: suspend"
    assert (callback.step, job.checkpoint_step) == (SUSPEND_AT, SUSPEND_AT)
    job, callback, restored = _lightning_run(example, tmp_path, resume=True, suspend_at=None)
    assert restored == [True]  # the model held the step-7 weights when training restarted
    assert job.suspend_reason is None and job.stop_reason is not None
    assert (callback.restored_step, callback.step, job.checkpoint_step) == (7, BUDGET, BUDGET)


def _hf_run(example, directory: Path, scratch: Path, resume: bool, suspend_at: int | None):
    transformers = pytest.importorskip("transformers")
    adapter = importlib.import_module("trainer_shim.integrations.hf")
    module = example("hf_classifier")
    args = module.parse_args(["--train-size", "512", "--hidden", "16"])
    restored: list[bool] = []

    class SuspendAt(transformers.TrainerCallback):
        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step == suspend_at:
                job.control.request_suspend("test: suspend")

    class CheckRestore(transformers.TrainerCallback):
        def on_train_begin(self, targs, state, control, model=None, **kwargs):
            if resume:
                restored.append(_same(model, _saved_weights(directory, SUSPEND_AT)))

    with trainer_shim.init(
        checkpoint_dir=directory, max_iterations=BUDGET, resume=resume, handle_sigterm=False
    ) as job:
        torch.manual_seed(0)
        callback = adapter.MlschedTrainerCallback(job)
        trainer = transformers.Trainer(
            model=module.SpiralClassifier(args.hidden, args.classes),
            args=module.training_arguments(str(scratch), args),
            train_dataset=module.SpiralSet(args.train_size, args.classes, 0),
            callbacks=[SuspendAt(), callback, CheckRestore()],
        )
        trainer.train()
    return job, callback, restored


def test_hf_trainer_suspends_at_a_step_and_resumes_from_it(example, tmp_path: Path):
    ck, scratch = tmp_path / "ck", tmp_path / "hf"
    job, callback, _ = _hf_run(example, ck, scratch, resume=False, suspend_at=SUSPEND_AT)
    assert job.suspend_reason == "test: suspend"
    assert (callback.step, job.checkpoint_step) == (SUSPEND_AT, SUSPEND_AT)
    assert "lr_scheduler" in torch.load(ck / "step-7.pt", weights_only=True)["extra"]
    job, callback, restored = _hf_run(example, ck, scratch, resume=True, suspend_at=None)
    assert restored == [True]
    assert job.suspend_reason is None and job.stop_reason is not None
    assert (callback.restored_step, callback.step, job.checkpoint_step) == (7, BUDGET, BUDGET)
