"""One MLF-RL scheduling cycle with the choices left to a *chooser* (MLFS §3.4).

The paper's action gives every waiting task, and every task selected to move off an overloaded
server, a destination: a node or the queue. mlsched launches a job's tasks together, so the
unit here is the job, and the action is factorised into a sequence of steps:

1. The candidates are the queued jobs and the *movers*: jobs with tasks chosen to leave an
   overloaded server by MLF-H's Euclidean rule (:func:`~controller.policy.mlfs.euclid.
   choose_migrations`, or a node agent's ``migration_requested``). Their load leaves the server
   at once (queued virtually, §3.3.3).
2. At each step the chooser sees every candidate that the underloaded servers can still take
   whole by free GPUs and load (``HostPool.capacity``; :class:`Step`) and answers one of them or
   *hold*. A chosen queued job is placed task by task on MLF-H's Euclidean host
   (:class:`~controller.policy.mlfs.hosts.HostPool`, §3.3.2) and launched, a chosen mover's
   leaving tasks likewise (a :class:`Migrate`). One that does not fit after all stays queued (a
   mover goes back to the queue, :class:`Suspend`). The steps go on until the chooser holds,
   no candidate fits or no underloaded server has a free GPU; what is left stays in the queue
   (movers: back to it, as §3.3.3 does with unassigned migration tasks).
3. Like MLF-H by default, no running job is preempted: every expired lease is renewed, except
   a mover's (its Migrate or Suspend answers it). With ``load_control`` MLF-C's stops come
   first and those jobs take no further part (§3.5).

So the chooser decides *which job goes next and when to stop*; the host is the Euclidean
choice. The chooser that always answers the candidate with the highest MLF-H priority
(:class:`MlfhChooser`) reproduces :class:`~controller.policy.mlfs.policy.MlfhPolicy` (with its
default, no lease-boundary preemption; a test holds the two together); MLF-RL's network is
another chooser. Candidates are offered in MLF-H's order (priority, then id). Steps 1-2 use
MLF-H's own rules (:mod:`controller.policy.mlfs.moves`), so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from controller.policy.base import (
    ClusterSnapshot,
    Decision,
    Launch,
    Migrate,
    Renew,
    Stop,
    Suspend,
)
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.jobs import job_features, task_demand
from controller.policy.mlfs.moves import (
    find_movers,
    hot_servers,
    place_mover,
    place_queued,
    queued_demand,
    unload_busy,
    unload_movers,
)
from controller.policy.mlfs.priority import task_priorities
from controller.policy.mlfs.rl.features import (
    Candidate,
    candidate_matrix,
    context_row,
    job_priorities,
    job_rows,
    step_rows,
)


@dataclass(frozen=True)
class Step:
    """What a chooser sees: the candidates that fit by count (MLF-H order), their network
    input (``features.CANDIDATE_FEATURES`` per row), the context row and their MLF-H ``P``.
    The answer is an index into ``candidates``, or ``len(candidates)`` to hold."""

    candidates: tuple[Candidate, ...]
    features: np.ndarray
    context: np.ndarray
    priorities: np.ndarray

    @property
    def hold(self) -> int:
        return len(self.candidates)


class Chooser(Protocol):
    """Makes a cycle's choices: an index into ``step.candidates``, or ``step.hold``."""

    def choose(self, step: Step) -> int: ...


class MlfhChooser:
    """MLF-H's choice: the candidate with the highest priority (the first of equals)."""

    def choose(self, step: Step) -> int:
        return int(np.argmax(step.priorities))


def plan(
    snapshot: ClusterSnapshot,
    chooser: Chooser,
    config: MlfsConfig,
    *,
    resources: tuple[str, ...] = DEFAULT_RESOURCES,
    lease_s: float | None = None,
    load_control: bool = False,
) -> Decision:
    """The cycle's decision with ``chooser`` making the choices (module docstring)."""
    lease = lease_s or snapshot.default_lease_s
    stops: tuple[Stop, ...] = ()
    if load_control:
        from controller.policy.mlfs.loadcontrol import load_control as mlf_c  # MLF-C, §3.5

        stops = tuple(mlf_c(snapshot, config))
    stopped = {s.job_id for s in stops}
    active = [v for v in snapshot.active if v.id not in stopped]
    now = snapshot.now
    pool = HostPool(snapshot.nodes, resources, config)
    unload_busy(pool, snapshot.busy, resources)
    hot = hot_servers(pool, active, config.h_r)
    involved = [
        v for v in active if v.migration_requested or any(p.node_id in hot for p in v.placement)
    ]
    per_job = {v.id: job_features(v, now, queued=True) for v in snapshot.queued}
    per_job.update((v.id, job_features(v, now, queued=False)) for v in involved)
    by_task = task_priorities([f for fs in per_job.values() for f in fs], now, config)
    by_job = job_priorities(by_task)
    totals = {k: p.total for k, p in by_task.items()}
    movers = find_movers(hot, active, pool, totals, config, resources)
    unload_movers(pool, movers.values(), resources)

    candidates = [Candidate(v) for v in snapshot.queued] + [
        Candidate(m.view, True, m.sources, m.ranks) for m in movers.values()
    ]
    candidates.sort(key=lambda c: (-by_job[c.view.id].total, c.view.id))
    demands = [
        task_demand(c.view, resources) if c.moving else queued_demand(c.view, pool, resources)
        for c in candidates
    ]
    total_gpus = sum(len(n.gpu_indices) for n in snapshot.nodes)
    firsts = {job_id: fs[0] for job_id, fs in per_job.items()}
    rows = job_rows(candidates, by_job, now, total_gpus, config, firsts)
    p_job = np.array([by_job[c.view.id].total for c in candidates], dtype=np.float64)

    launches: list[Launch] = []
    migrations: list[Migrate] = []
    suspends: list[Suspend] = []
    remaining = list(range(len(candidates)))
    while remaining and pool.room(1) > 0:
        eligible = [i for i in remaining if _fits(pool, candidates[i], demands[i])]
        if not eligible:
            break
        offered = tuple(candidates[i] for i in eligible)
        context = np.asarray(context_row(pool, total_gpus, len(eligible)), dtype=np.float32)
        step = Step(
            candidates=offered,
            features=candidate_matrix(
                rows[eligible], step_rows(offered, p_job[eligible], pool), context
            ),
            context=context,
            priorities=p_job[eligible],
        )
        choice = chooser.choose(step)
        if not 0 <= choice <= step.hold:
            raise ValueError(f"chooser answered {choice}; valid: 0..{step.hold}")
        if choice == step.hold:
            break
        index = eligible[choice]
        remaining.remove(index)
        chosen = candidates[index]
        if chosen.moving:
            placement = place_mover(movers[chosen.view.id], pool, totals, resources)
            if placement is None:
                suspends.append(Suspend(chosen.view.id, "overloaded server; no host to move to"))
            else:
                reason = f"moved off overloaded {', '.join(sorted(chosen.sources))}"
                migrations.append(Migrate(chosen.view.id, placement, lease, reason))
        else:
            placement = place_queued(chosen.view, demands[index], pool, totals)
            if placement is not None:
                launches.append(Launch(chosen.view.id, placement, lease))
    for index in remaining:
        if candidates[index].moving:
            suspends.append(Suspend(candidates[index].view.id, "overloaded server; queued"))
    expired = [v for v in snapshot.expired() if v.id not in movers and v.id not in stopped]
    return Decision(
        launch=tuple(launches),
        renew=tuple(Renew(v.id, lease) for v in expired),
        suspend=tuple(suspends),
        migrate=tuple(migrations),
        stop=stops,
    )


# --- placement (§3.3.2): the rules are MLF-H's, in controller.policy.mlfs.moves ----------


def _fits(pool: HostPool, candidate: Candidate, demand: tuple[float, ...]) -> bool:
    """Whether the underloaded servers can take the candidate's tasks whole (a pre-check:
    placing them has the last word)."""
    tasks = candidate.tasks
    per_task = candidate.view.spec.gpus_per_process
    return tasks >= 1 and pool.capacity(demand, per_task, candidate.sources) >= tasks
