"""``chic`` live: Chic's worker and PS counts for parameter-server jobs on a real cluster, with
all-reduce jobs beside them as ``chic-ar`` places them (issue 16, docs/chic.md *Live*).

Reschedules only when the set of jobs changes (an arrival or a completion, Chic §4.2). PS jobs
(``spec.ps``) get a share of the GPUs by their share of the jobs (ours, as ``chic-ar``'s
windows) and the whole cluster's cores and memory; the shipped ``ps`` network fills them window
by window from zero allocation (§4.2), one worker or one PS per action, within the spec's
ranges. The GPUs the PS jobs leave go to the other jobs through ``chic-ar``'s network. A job
whose counts change is suspended (checkpoint) and launched again with the new counts: a resize
through suspend and resume. Ours, for lack of measurements of live jobs: ``g(w, p)`` is the
simulator's model (``simulator.ps``) named in the job's name (``resnet50`` otherwise), and
``s^B`` is the fraction of the job's iterations left times 200 (Chic §6.1's largest job).

State (documented, as ``base`` allows): the last job set and its targets.
"""

from __future__ import annotations

import numpy as np

from controller.placement import place_job, without
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, Renew, Suspend
from controller.policy.chic.ar import ChicArPolicy
from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet
from controller.policy.chic.phase import B_SCALE, Phase, SlotJob
from controller.ps_placement import headroom, place_ps_job, role_counts
from mlsched.model import IterationStop
from simulator.ps import MODELS

LEASE_S = 120.0
UNKNOWN = 1e9  # a node's cores or memory when its agent did not say


class ChicLivePolicy:
    needs_job_truth = False

    def __init__(self, lease_s: float = LEASE_S, name: str = "chic") -> None:
        self.net = ArrayNet.load(DEFAULT_MODELS["ps"])
        self.ar = ChicArPolicy(lease_s=lease_s)
        self.lease_s, self.name = lease_s, name
        self._jobs: frozenset[str] = frozenset()
        self._targets: dict[str, tuple[int, int]] = {}  # (workers or GPUs, servers)

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        running = sorted(snapshot.active, key=lambda j: (j.submit_time, j.id))
        # a job being suspended (busy) is still in the system: a resize must not look like a
        # departure, else the others are re-planned without it for the length of its save
        ending = sorted(snapshot.busy, key=lambda j: (j.submit_time, j.id))
        order = running + ending + list(snapshot.queued)
        ids = frozenset(j.id for j in order)
        if ids != self._jobs:
            self._targets = self.allocate(snapshot, order, {j.id for j in running})
            self._jobs = ids
        return self.apply(snapshot, running, list(snapshot.queued))

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: list[JobView], running: set[str]
    ) -> dict[str, tuple[int, int]]:
        """Targets per job: (workers, servers) for PS jobs, (GPUs, 0) for the others."""
        total = sum(len(n.gpu_indices) for n in snapshot.nodes)
        cpus = sum(n.cpus or UNKNOWN for n in snapshot.nodes)
        memory = sum(n.memory_gb or UNKNOWN for n in snapshot.nodes)
        ps_jobs = [j for j in jobs if j.spec.ps.enabled]
        others = [j for j in jobs if not j.spec.ps.enabled]
        share = total if not others else total * len(ps_jobs) // len(jobs)
        targets: dict[str, tuple[int, int]] = {}
        used = np.zeros(3)
        slots = self.net.slots
        for start in range(0, len(ps_jobs), slots):
            window = ps_jobs[start : start + slots]
            phase = Phase("ps", slots, [_slot(j) for j in window], (share, cpus, memory), used)
            backlog = len(ps_jobs) - start - len(window)
            while not phase.finished():
                z = self.net.logits(phase.encode(backlog))
                action = next(int(a) for a in np.argsort(-z, kind="stable") if phase.valid(int(a)))
                phase.apply(action)
            for job, w, p in zip(window, phase.workers, phase.servers, strict=True):
                ps = job.spec.ps
                p = min(p, ps.max_servers)  # ours: the phase bounds workers only
                fits = w >= ps.min_workers and p >= ps.min_servers
                targets[job.id] = (w, p) if fits else (0, 0)
            used = phase.used
        ps_gpus = sum(w * j.spec.gpus_per_process for j in ps_jobs for w in [targets[j.id][0]])
        if others:
            gpus = self.ar.allocate(others, total - ps_gpus, running)
            targets.update({j.id: (gpus.get(j.id, 0), 0) for j in others})
        return targets

    def apply(
        self, snapshot: ClusterSnapshot, running: list[JobView], queued: list[JobView]
    ) -> Decision:
        """Suspend jobs whose counts changed, renew the others, launch queued targets."""
        renew, suspend, launch = [], [], []
        expired = {j.id for j in snapshot.expired()}
        for job in running:
            target = self._targets.get(job.id, (0, 0))
            if not any(p.rank == 0 for p in job.placement):
                continue  # its chief has ended: the job is ending, nothing to resize
            if _counts(job) != target:
                suspend.append(Suspend(job.id, f"chic: resize to {_describe(job, target)}"))
            elif job.id in expired:
                renew.append(Renew(job.id, self.lease_s))
        free = snapshot.free_gpus()
        capacity = {n.id: (n.cpus or UNKNOWN, n.memory_gb or UNKNOWN) for n in snapshot.nodes}
        held = [(j.spec, j.placement) for j in (*snapshot.active, *snapshot.busy)]
        room = headroom(capacity, held)
        for job in queued:
            w, p = self._targets.get(job.id, (0, 0))
            if w == 0:
                continue
            if job.spec.ps.enabled:
                placement = place_ps_job(free, room, job.spec, w, p)
                if placement is not None:
                    room = headroom(room, [(job.spec, placement)])
            else:
                placement = place_job(free, w, job.spec.gpus_per_process)
            if placement is None:
                continue  # GPUs still held by a job being suspended: a later cycle
            free = without(free, placement)
            launch.append(Launch(job.id, placement, self.lease_s))
        return Decision(launch=tuple(launch), renew=tuple(renew), suspend=tuple(suspend))


def _counts(job: JobView) -> tuple[int, int]:
    if job.spec.ps.enabled:
        return role_counts(job.spec, job.placement)
    return sum(len(p.gpu_indices) for p in job.placement), 0


def _describe(job: JobView, target: tuple[int, int]) -> str:
    if job.spec.ps.enabled:
        return f"{target[0]} workers, {target[1]} PS"
    return f"{target[0]} GPUs"


def _slot(job: JobView) -> SlotJob:
    """The job as Chic's phase sees it (module docstring for what is ours)."""
    name = (job.model or job.spec.name).lower()
    model = next((m for m in MODELS if m.name in name), MODELS[0])
    onehot = tuple(1.0 if m is model else 0.0 for m in MODELS)
    stop = job.spec.stopping
    total = stop.iterations if isinstance(stop, IterationStop) else stop.max_iterations
    left = max(0.0, 1.0 - job.iteration / total) if total else 1.0
    ps = job.spec.ps
    return SlotJob(
        onehot,
        max(1.0, left * B_SCALE),
        ps.worker.vector(),
        ps.server.vector(),
        model.iteration_time,
        ps.max_workers,
    )
