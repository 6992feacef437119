"""What a resize costs in the simulator: the live controller's mechanisms (issue 14).

A resize order is carried out by the first mechanism that can, as ``controller/resize.py``
picks one, and the job pauses for that mechanism's cost:

- ``renew``: same GPUs, same batch: nothing.
- ``in-place batch``: same GPUs, a new global batch (``SetBatchSize`` through the shim):
  ``batch_s`` = 1 s. ONES §4.3, Fig. 16: "basically around 1 second"; measured live
  (docs/elastic.md): 0.82-1.22 s (three runs), ``benchmarks/resize_costs.py`` median 1.27 s
  (0.61-1.47 s) at a load average of 22-28 on 2 cores.
- ``regroup``: a GPU-count change with every rank, before and after, on one and the same node
  (``RegroupTask``, ``trainer_shim/regroup.py``: rank 0 trains on while the new ranks start,
  then switches at a step boundary): ``regroup_s``, when one was measured; None sends such a
  change to suspend/resume, as the live controller does where the agent cannot regroup.
  ``regroup_any`` (a what-if, not a live mechanism: regrouping is per node) regroups every
  GPU change, whatever the nodes.
- ``suspend/resume``: anything else (the nodes change): checkpoint, release, restart; the job
  model's ``suspend_s(old GPUs) + resume_s(new GPUs)`` = 4 s + 20 s + 0.36 s/GPU (UniSched
  §III-B3, Fig. 3). Measured live on the CPU example: 9-41 s (docs/elastic.md, loads 9-44).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controller.placement import TaskPlacement
from simulator.elastic import RESCALE_S

BATCH_S = RESCALE_S  # ONES Fig. 16: about 1 s; live 0.82-1.27 s (docs/elastic.md)

RENEW = "renew"
BATCH = "in-place batch"
REGROUP = "regroup"
SUSPEND_RESUME = "suspend/resume"


@dataclass(frozen=True)
class ResizeCosts:
    """Pauses per mechanism (module docstring); ``regroup_s`` None: no in-place regroup."""

    batch_s: float = BATCH_S
    regroup_s: float | None = None
    regroup_any: bool = False  # ours, a what-if: every GPU change regroups, across nodes too

    def __post_init__(self) -> None:
        if self.batch_s < 0:
            raise ValueError(f"batch_s must be >= 0, got {self.batch_s}")
        if self.regroup_s is not None and self.regroup_s < 0:
            raise ValueError(f"regroup_s must be >= 0 or None, got {self.regroup_s}")


NO_REGROUP = ResizeCosts()  # the default: batch changes in place, GPU changes by restart


def mechanism(
    old: Sequence[TaskPlacement],
    new: Sequence[TaskPlacement],
    batch_changed: bool,
    costs: ResizeCosts,
) -> str:
    """The mechanism that carries out a resize from placement ``old`` to ``new``."""
    if tuple(old) == tuple(new):
        return BATCH if batch_changed else RENEW
    nodes = {p.node_id for p in old} | {p.node_id for p in new}
    if costs.regroup_s is not None and (len(nodes) == 1 or costs.regroup_any):
        return REGROUP
    return SUSPEND_RESUME
