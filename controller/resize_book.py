"""The resizes a controller is carrying out (issue 14): plain records, no actions.

One :class:`PendingResize` per job from the order until the job trains again in its new shape;
``controller.resize`` creates, advances and closes them. Kept in memory beside
``ControllerState.sr_timings``: a controller restart forgets the resizes under way (a job
suspended for one stays in the queue and the policy places it again; the cost of that resize
is not recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.placement import TaskPlacement


@dataclass
class PendingResize:
    """A resize from its order to the job training again."""

    job_id: str
    mechanism: str  # the name of the ``controller.resize`` mechanism carrying it out
    from_gpus: int
    placement: tuple[TaskPlacement, ...]  # the target
    batch_size: int  # the global batch after it; 0: the job's batch is not the controller's
    lease_s: float
    reason: str
    ordered_at: float
    attempt: int  # the attempt running when it was ordered
    relaunched: bool = False  # suspend/resume: launched on the target
    from_ranks: int = 0  # in-place regroup: the attempt's processes before it
    generation: int = 0  # in-place regroup: its number (controller/resize_inplace.py)

    @property
    def to_gpus(self) -> int:
        return sum(len(p.gpu_indices) for p in self.placement)


@dataclass
class ResizeBook:
    """Resizes under way per job id, the global batch last ordered per job, the last regroup
    generation per job, and the (job, attempt)s whose resizes no longer go in place."""

    pending: dict[str, PendingResize] = field(default_factory=dict)
    batches: dict[str, int] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    no_regroup: set[tuple[str, int]] = field(default_factory=set)

    def reserved(self) -> dict[str, set[int]]:
        """GPUs held for jobs waiting to be relaunched on a target, per node."""
        out: dict[str, set[int]] = {}
        for item in self.pending.values():
            if item.relaunched or item.mechanism != "suspend/resume":
                continue
            for p in item.placement:
                out.setdefault(p.node_id, set()).update(p.gpu_indices)
        return out

    def releasing(self, job_id: str, node_id: str, gpu: int) -> bool:
        """Whether ``job_id`` is giving ``gpu`` of ``node_id`` up: a suspend/resume resize
        of it under way whose target leaves that GPU out."""
        item = self.pending.get(job_id)
        if item is None or item.relaunched or item.mechanism != "suspend/resume":
            return False
        return not any(p.node_id == node_id and gpu in p.gpu_indices for p in item.placement)
