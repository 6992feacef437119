"""The shim under a per-task launcher (torchrun), and the warning for a job whose processes
never form a process group (issue 18; docs/frameworks.md).

Under ``launcher: torchrun`` one agent task is one torchrun, and torchrun starts a training
process per GPU; every one of them inherits the task's ``MLSCHED_*`` variables. The task has one
trainer session and one exit record, so only the process of local rank 0 speaks for the task:
it opens the session (and so receives SuspendNow) and writes the exit record. The other
processes train, checkpoint and restore as usual and learn of a suspension through the
collectives behind ``should_suspend()``, which make every rank stop at the same step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainer_shim.env import TaskEnv

__all__ = ["TORCHRUN", "GroupCheck", "speaks_for_task"]

TORCHRUN = "torchrun"
REPORTS_BEFORE_WARNING = 3


def speaks_for_task(task_env: TaskEnv) -> bool:
    """Whether this process opens its task's trainer session and writes its exit record."""
    return task_env.launcher != TORCHRUN or task_env.local_rank == 0


@dataclass
class GroupCheck:
    """Warns once when a job of several processes trains without a process group.

    Each of ``world_size`` processes then trains its own copy of the model (an easy mistake
    with ``gpus: 2`` and a single-process script). Judged at the ``after``-th report, so a
    script that joins the group late in its setup is not blamed.
    """

    world_size: int
    after: int = REPORTS_BEFORE_WARNING
    reports: int = 0

    def observe(self, group_active: Callable[[], bool]) -> str | None:
        """Count one report; the warning text once, at the ``after``-th, when it applies.

        ``group_active`` is asked only then: called on every step it hung the in-place regroup
        test (tests/trainer_shim/test_shim_regroup.py), which rebuilds the group mid-run.
        """
        self.reports += 1
        if self.reports != self.after or self.world_size <= 1 or group_active():
            return None
        return (
            f"this job runs {self.world_size} processes (WORLD_SIZE={self.world_size}) but "
            f"none has joined a torch.distributed process group after {self.after} reports: "
            "each process trains alone. Call job.init_process_group() and wrap the model in "
            "DistributedDataParallel, or ask for one GPU."
        )
