"""A stored job keeps its launcher (issue 18), and rows from before the field load as the
agent's launcher."""

from __future__ import annotations

from controller.store.codec import spec_from_dict, spec_to_dict
from mlsched.model import IterationStop, JobSpec, Launcher


def test_the_launcher_round_trips_and_old_rows_mean_the_agent():
    spec = JobSpec("t", ("torchrun", "train.py"), 4, IterationStop(9), gpus_per_process=4)
    torchrun = JobSpec(
        "t", ("torchrun", "train.py"), 4, IterationStop(9), gpus_per_process=4,
        launcher=Launcher.TORCHRUN,
    )  # fmt: skip
    stored = spec_to_dict(torchrun)
    assert stored["launcher"] == "torchrun"
    assert spec_from_dict(stored) == torchrun
    del stored["launcher"]  # a row written before issue 18
    assert spec_from_dict(stored) == spec


def test_the_suspend_grace_round_trips_and_old_rows_have_none():
    spec = JobSpec("t", ("python", "train.py"), 1, IterationStop(9), suspend_grace_s=120.0)
    stored = spec_to_dict(spec)
    assert spec_from_dict(stored) == spec
    del stored["suspend_grace_s"]
    assert spec_from_dict(stored).suspend_grace_s == 0.0
