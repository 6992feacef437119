"""The parameter-server (PS) job model of the Chic simulation (Chic §2.1, §6.1; issue 16).

A PS job trains with ``w`` workers and ``p`` parameter servers, synchronously: per iteration each
worker computes on ``batch / w`` samples, pushes its gradients to the ``p`` servers (each holds
``1/p`` of the parameters), and pulls the update back. Time per iteration is Optimus' form
(Peng et al., EuroSys 2018, §3.2, written from its description)::

    g(w, p) = t_sample * batch / w + t_fixed + t_comm * w / p + t_worker * w + t_ps * p

(forward/backward over ``w`` workers; transfer over ``p`` servers, which each see traffic from
all ``w`` workers; per-task overheads). A job with no worker or no server makes no progress
(``g = inf``). The all-reduce variant (``chic-ar``) drops the servers: ring all-reduce moves
``2 (w - 1) / w`` of the model per worker, ``g(w) = t_sample batch / w + t_fixed +
t_comm 2 (w - 1) / w + t_worker w``.

Per-role resources (GPU, CPU cores, GB memory) are Chic §6.1's. The coefficients are ours
(docs/chic.md, *PS model*): chosen from the published shapes (VGG-16 holds about 5x ResNet-50's
parameters and so pays most for transfer; ResNeXt-110 on CIFAR is compute-bound) and scaled so
one iteration on one worker and one server takes 20-40 s, which with Chic's 100-200 iterations
per job gives completion times of the order of the paper's Fig. 4. They are not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BATCH = 32  # Chic §6.1: the batch size of a gradient update
Resources = tuple[float, float, float]  # (GPUs, CPU cores, GB memory)
CHIC_CLUSTER: Resources = (10.0, 120.0, 600.0)  # Chic §6.1: 10 GPUs, 120 cores, 600 GB


@dataclass(frozen=True)
class PsModel:
    """One model's per-role demands and its ``g(w, p)`` coefficients (seconds)."""

    name: str
    worker: Resources
    ps: Resources
    t_sample: float
    t_fixed: float
    t_comm: float
    t_worker: float
    t_ps: float

    def iteration_time(self, workers: int, servers: int) -> float:
        """g(w, p) of the module docstring; inf without a worker or a server."""
        if workers <= 0 or servers <= 0:
            return math.inf
        return (
            self.t_sample * BATCH / workers
            + self.t_fixed
            + self.t_comm * workers / servers
            + self.t_worker * workers
            + self.t_ps * servers
        )

    def allreduce_time(self, workers: int) -> float:
        """The all-reduce form of the module docstring; inf without a worker."""
        if workers <= 0:
            return math.inf
        ring = 2.0 * (workers - 1) / workers
        return (
            self.t_sample * BATCH / workers
            + self.t_fixed
            + self.t_comm * ring
            + self.t_worker * workers
        )


# Chic §6.1 resources; coefficients ours (module docstring)
MODELS: tuple[PsModel, ...] = (
    PsModel("resnet50", (1, 2, 8), (0, 3, 9), 0.9, 1.0, 3.0, 0.3, 0.2),
    PsModel("vgg16", (1, 2, 10), (0, 4, 10), 1.0, 1.0, 6.0, 0.3, 0.3),
    PsModel("resnext110", (1, 2, 10), (0, 3, 10), 0.7, 0.5, 1.5, 0.2, 0.2),
)


def model_index(name: str) -> int:
    """The index of a model in :data:`MODELS`; ValueError naming the valid ones."""
    for i, model in enumerate(MODELS):
        if model.name == name:
            return i
    raise ValueError(f"unknown PS model {name!r}; valid: {', '.join(m.name for m in MODELS)}")
