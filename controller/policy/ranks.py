"""Task priorities for node agents (``Decision.priorities``; ``docs/overload.md``).

An agent whose server is overloaded chooses the task to move out by MLFS' Euclidean rule, and
the rule spares high-priority tasks (§3.3.3: the lowest-priority ``p_s`` of an overloaded GPU's
tasks; near-ties go to the lowest priority). So every policy tells the agents its order:

- **MLF-H, MLF-RL, MLFS**: Eq. 6's priority of each job that the decision launches or moves and
  of each active job it looked at (on an overloaded server or asked to move), from the same
  :class:`~controller.policy.mlfs.book.PriorityBook` arithmetic (:class:`Eq6Priorities`;
  MLF-RL's cycle gives the jobs it launches or moves the values it ranked them by, and
  :class:`Eq6Priorities` computes only the others).
- **Every other policy** (the policy-neutral rule, :func:`queue_priorities`): the order in
  which the queue offered the jobs, the one order every policy shares: a job that joined the
  queue earlier ranks higher. The value is ``-queued_since`` (seconds) at the job's launch, so
  the rank it encodes among the running jobs does not change while a job runs: it is given
  with the launch only (the controller resends it to a later attempt, after a migration),
  which keeps every other cycle free of it (a simulated FIFO cycle over a thousand running
  jobs would otherwise pay for them all). This is FIFO's own order; for SRTF, Tiresias, EDF,
  Themis, Chronus, SLAQ, fair and UniSched it is a stand-in until a policy fills
  ``Decision.priorities`` itself (it then takes precedence).

Higher is more important in both; values are compared only among one node's tasks under one
policy. Pure functions of the snapshot and the decision.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from operator import attrgetter

from controller.policy.base import ClusterSnapshot, Decision, JobView, NodeView
from controller.policy.mlfs.book import PriorityBook
from controller.policy.mlfs.config import MlfsConfig

_ID = attrgetter("id")


def leaving(snapshot: ClusterSnapshot, decision: Decision) -> set[str]:
    """Active jobs the decision takes off their GPUs: suspended, stopped, or with an expired
    lease it does not renew (migrated jobs keep running, elsewhere)."""
    renewed = {r.job_id for r in decision.renew}
    migrated = {m.job_id for m in decision.migrate}
    return {
        *(s.job_id for s in decision.suspend if s.job_id not in migrated),
        *(s.job_id for s in decision.stop),
        *(v.id for v in snapshot.expired() if v.id not in renewed and v.id not in migrated),
    }


def queue_priorities(snapshot: ClusterSnapshot, decision: Decision) -> dict[str, float]:
    """The policy-neutral rule (module docstring): ``-queued_since`` of each job the decision
    launches. A running job's value does not change, so it is given once, at its launch (the
    controller resends it to a later attempt); no cycle pays for the jobs already running."""
    launched = {item.job_id for item in decision.launch}
    found: dict[str, float] = {}
    for view in snapshot.queued:  # queue order: FIFO's launches are found first
        if len(found) == len(launched):
            break
        if view.id in launched:
            found[view.id] = -view.queued_since
    return found


def with_queue_priorities(snapshot: ClusterSnapshot, decision: Decision) -> Decision:
    """``decision`` with the policy-neutral priorities, unless the policy gave its own."""
    if decision.priorities:
        return decision
    priorities = queue_priorities(snapshot, decision)
    return replace(decision, priorities=priorities) if priorities else decision


def involved(snapshot: ClusterSnapshot, decision: Decision, h_r: float) -> list[JobView]:
    """The jobs whose Eq. 6 priority the agents are told this cycle: those launched or
    migrated, and active ones kept that an agent asked to move or that run on a server
    measured above ``h_r``."""
    active, queued = _involved(snapshot, decision, h_r)
    return active + queued


def _hot(node: NodeView, h_r: float) -> bool:
    """Whether the node is measured above ``h_r`` on some resource type."""
    return any(u > h_r for u in node.utilization.values())


def _involved(
    snapshot: ClusterSnapshot,
    decision: Decision,
    h_r: float,
    hot: set[str] | None = None,
    known: Collection[str] = (),
) -> tuple[list[JobView], list[JobView]]:
    """:func:`involved`'s active jobs (in the snapshot's order) and queued ones (in queue
    order; the scan of the queue stops once every named job is found). ``hot``: the nodes
    above ``h_r``, if known; ``known``: jobs to leave out (their priority is at hand)."""
    if hot is None:
        hot = {n.id for n in snapshot.nodes if _hot(n, h_r)}
    named = {item.job_id for item in (*decision.launch, *decision.migrate)}
    named.difference_update(known)
    gone = leaving(snapshot, decision)
    active = [
        v
        for v in snapshot.active
        if v.id not in gone
        and v.id not in known
        and (
            v.id in named
            or v.migration_requested
            or (hot and any(p.node_id in hot for p in v.placement))
        )
    ]
    queued: list[JobView] = []
    wanted = set(named)
    if decision.migrate:  # migrated jobs are active; a job is active or queued, not both
        wanted -= {v.id for v in snapshot.active}
    if wanted:  # each named job's first place in the queue, found by list.index (in C)
        ids = list(map(_ID, snapshot.queued))
        places = []
        for job_id in wanted:
            try:
                places.append(ids.index(job_id))
            except ValueError:
                continue  # not queued
        queued = [snapshot.queued[i] for i in sorted(places)]
    return active, queued


class Eq6Priorities:
    """Eq. 6 job priorities for the agents (module docstring), with a book of its own so the
    policy's book (kept for the policy's own job set) is not disturbed."""

    def __init__(self, config: MlfsConfig) -> None:
        self.config = config
        self._book = PriorityBook(config)
        # per node id: the latest node view and whether it is above h_r (views are immutable)
        self._nodes: dict[str, tuple[NodeView, bool]] = {}

    def _hot_nodes(self, nodes: Iterable[NodeView]) -> set[str]:
        """The nodes above ``h_r`` (:func:`_hot`), kept per node view between cycles."""
        h_r, kept, now = self.config.h_r, self._nodes, {}
        for n in nodes:
            held = kept.get(n.id)
            if held is None or held[0] is not n:
                held = (n, _hot(n, h_r))
            now[n.id] = held
        self._nodes = now
        return {i for i, (_, hot) in now.items() if hot}

    def of(self, snapshot: ClusterSnapshot, decision: Decision) -> dict[str, float]:
        """Each :func:`involved` job's priority: the largest of its tasks' (as MLF-H's queue),
        except those ``decision`` already gives (a policy computed them with the same Eq. 6
        arithmetic, as MLF-RL's cycle does for the jobs it launches or moves)."""
        hot = self._hot_nodes(snapshot.nodes)
        active, queued = _involved(
            snapshot, decision, self.config.h_r, hot, known=decision.priorities.keys()
        )
        if not active and not queued:
            return {}
        result = self._book.priorities(queued, active, snapshot.now)
        return dict(result.job)

    def add_to(self, snapshot: ClusterSnapshot, decision: Decision) -> Decision:
        """``decision`` with :meth:`of` as its priorities (what it gave itself kept)."""
        found = self.of(snapshot, decision)
        if not found:
            return decision
        return replace(decision, priorities={**found, **decision.priorities})


def for_agents(
    job_priority: Mapping[str, float], decision: Decision, looked_at: Iterable[JobView]
) -> Decision:
    """``decision`` with the priorities a policy computed (``job_priority``) of the jobs it
    launches or migrates and of the active jobs it ``looked_at`` that it does not suspend or
    stop, for a policy that has them at hand (MLF-H: its involved jobs; no scan of the
    snapshot)."""
    gone = {s.job_id for s in decision.suspend} | {s.job_id for s in decision.stop}
    ids = [item.job_id for item in (*decision.launch, *decision.migrate)]
    ids += [v.id for v in looked_at if v.id not in gone]
    found = {i: job_priority[i] for i in ids if i in job_priority}
    return replace(decision, priorities={**found, **decision.priorities}) if found else decision
