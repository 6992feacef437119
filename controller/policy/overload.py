"""Node agents' migration requests answered by MLFS' rules, for policies that do not act on
them themselves (MLFS §3.3.2-3.3.3; ``docs/policies.md``, *Overload requests*).

A node agent that finds its server overloaded names the task MLFS' Euclidean rule picks and
the controller marks its job (``JobView.migration_requested``). MLF-H, MLF-RL and MLFS answer
such requests in their own cycle. Every other policy gets them answered here, by the same code
(:mod:`controller.policy.mlfs.moves`, :mod:`controller.policy.mlfs.hosts`):

1. The jobs asked for are the active jobs with ``migration_requested`` that the policy's
   decision neither suspends, migrates nor stops, nor lets expire unrenewed (those leave their
   server anyway).
2. The servers are the snapshot's nodes with the GPUs that decision launches or migrates onto
   taken out, and the load of the jobs leaving (``snapshot.busy``, the jobs the decision
   suspends, stops or lets expire) taken off. A server whose measured utilisation is above
   ``h_r`` is overloaded.
3. On an overloaded server the requested jobs' tasks leave; a requested job whose servers do not
   look overloaded here moves all its tasks (the agent measured more recently than the
   snapshot). Jobs whose tasks could not all run within ``h_r`` even on the idle cluster are
   never moved (:func:`~controller.policy.mlfs.moves.oversized`). Nothing is moved that no agent
   asked for.
4. Each job asked for, by job id, gets its leaving tasks placed on the Euclidean host
   (§3.3.2: closest to the ideal virtual host among the underloaded servers that stay within
   ``h_r``, never the server left) and a :class:`Migrate`; one that finds no host goes back to
   the queue (:class:`Suspend`), as §3.3.3 moves unassigned migration tasks back. The moved
   job's renewal, if any, is dropped: its lease is given with the migration (the renewal's
   length, else what is left of its lease, else the policy's lease).
5. A job sent back so is not resumed on a node it left while that node cannot take it
   (:mod:`controller.policy.retreat`: §3.3.2's ``h_r`` with the job's measured load).

Pure: snapshot and decision in, decision out; no state, time from ``snapshot.now``. The
Euclidean choices need no priorities here: the agent chose the task, and host choice does not
read them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from controller.placement import TaskPlacement
from controller.policy.base import ClusterSnapshot, Decision, JobView, Migrate, NodeView, Suspend
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import DEFAULT_RESOURCES
from controller.policy.mlfs.hosts import HostPool
from controller.policy.mlfs.moves import (
    find_movers,
    hot_servers,
    place_mover,
    unload_busy,
    unload_movers,
)
from controller.policy.ranks import with_queue_priorities
from controller.policy.retreat import HOLD_S, NO_HOST, keep_off


@dataclass(frozen=True)
class OverloadMoves:
    """What answers the requests: jobs moved to a new host, jobs sent back to the queue."""

    migrate: tuple[Migrate, ...] = ()
    suspend: tuple[Suspend, ...] = ()


@dataclass(frozen=True)
class OverloadRules:
    """The MLFS parameters the answers use (``h_r`` and the resource types compared)."""

    config: MlfsConfig = field(default_factory=MlfsConfig)
    resources: tuple[str, ...] = DEFAULT_RESOURCES


def requested(snapshot: ClusterSnapshot, decision: Decision | None = None) -> list[JobView]:
    """The active jobs an agent asked to move that ``decision`` leaves where they are."""
    if not any(v.migration_requested for v in snapshot.active):
        return []  # the common case, and every simulated cycle: nothing more to look at
    handled = _handled(snapshot, decision or Decision())
    return [v for v in snapshot.active if v.migration_requested and v.id not in handled]


def overload_moves(
    snapshot: ClusterSnapshot,
    decision: Decision | None = None,
    rules: OverloadRules | None = None,
    lease_s: float | None = None,
) -> OverloadMoves:
    """The moves that answer the pending requests, given the policy's ``decision`` (None:
    an empty one) (module docstring). ``lease_s``: the policy's lease (None:
    ``snapshot.default_lease_s``)."""
    decision = decision or Decision()
    rules = rules or OverloadRules()
    asked = requested(snapshot, decision)
    if not asked:
        return OverloadMoves()
    handled = _handled(snapshot, decision)
    migrated = {m.job_id for m in decision.migrate}
    leaving = [*snapshot.busy, *(v for v in snapshot.active if v.id in handled - migrated)]
    pool = HostPool(_nodes_after(snapshot.nodes, decision), rules.resources, rules.config)
    unload_busy(pool, leaving, rules.resources)
    staying = [v for v in snapshot.active if v.id not in handled]
    asked_on = {p.node_id for v in asked for p in v.placement}
    hot = hot_servers(pool, staying, rules.config.h_r) & asked_on  # requests only
    movers = find_movers(hot, staying, pool, {}, rules.config, rules.resources)
    unload_movers(pool, movers.values(), rules.resources)
    renewals = {r.job_id: r.lease_s for r in decision.renew}
    migrations: list[Migrate] = []
    suspensions: list[Suspend] = []
    for job_id in sorted(movers):
        mover = movers[job_id]
        placement = place_mover(mover, pool, {}, rules.resources)
        if placement is None:
            suspensions.append(Suspend(job_id, NO_HOST))
            continue
        lease = _lease(mover.view, snapshot, renewals.get(job_id), lease_s)
        reason = f"moved off overloaded {', '.join(sorted(mover.sources))} on its agent's request"
        migrations.append(Migrate(job_id, placement, lease, reason))
    return OverloadMoves(tuple(migrations), tuple(suspensions))


def answer_requests(
    snapshot: ClusterSnapshot,
    decision: Decision,
    rules: OverloadRules | None = None,
    lease_s: float | None = None,
) -> Decision:
    """``decision`` with the pending requests answered (:func:`overload_moves`): its
    migrations and suspensions added, the moved jobs' renewals dropped. The same decision
    when no request is pending."""
    moves = overload_moves(snapshot, decision, rules, lease_s)
    if not moves.migrate and not moves.suspend:
        return decision
    moved = {m.job_id for m in moves.migrate} | {s.job_id for s in moves.suspend}
    return replace(
        decision,
        renew=tuple(r for r in decision.renew if r.job_id not in moved),
        suspend=(*decision.suspend, *moves.suspend),
        migrate=(*decision.migrate, *moves.migrate),
    )


class AnswersOverloadRequests:
    """Mixin for a policy class that does not act on migration requests: its decisions get
    them answered by :func:`answer_requests` (``class P(AnswersOverloadRequests, Base)``), a
    job such an answer sent back to the queue is kept off the nodes it left while they cannot
    take it (:func:`~controller.policy.retreat.keep_off`, for ``retreat_hold_s`` where nothing
    was measured) and, unless the policy gives its own, the policy-neutral priorities for the
    node agents (:func:`~controller.policy.ranks.with_queue_priorities`).
    ``overload_rules`` and ``retreat_hold_s`` may be overridden per class or instance."""

    overload_rules: OverloadRules = OverloadRules()
    retreat_hold_s: float = HOLD_S

    def decide(self, snapshot: ClusterSnapshot) -> Decision:
        inner = super().decide  # type: ignore[misc]
        lease: Any = getattr(self, "lease_s", None)
        rules = self.overload_rules

        def answered(view: ClusterSnapshot) -> Decision:
            return answer_requests(view, inner(view), rules, lease)

        decision = keep_off(answered, snapshot, rules.config.h_r, self.retreat_hold_s)
        return with_queue_priorities(snapshot, decision)  # the agents' order (ranks.py)


def _handled(snapshot: ClusterSnapshot, decision: Decision) -> set[str]:
    """The active jobs the decision moves or ends: suspended, migrated, stopped, or with an
    expired lease it does not renew (the controller suspends those)."""
    renewed = {r.job_id for r in decision.renew}
    return {
        *(s.job_id for s in decision.suspend),
        *(m.job_id for m in decision.migrate),
        *(s.job_id for s in decision.stop),
        *(v.id for v in snapshot.expired() if v.id not in renewed),
    }


def _nodes_after(nodes: Sequence[NodeView], decision: Decision) -> list[NodeView]:
    """The nodes with the GPUs the decision launches or migrates onto no longer free."""
    taken: dict[str, set[int]] = {}
    targets: Iterable[TaskPlacement] = (
        p for item in (*decision.launch, *decision.migrate) for p in item.placement
    )
    for p in targets:
        taken.setdefault(p.node_id, set()).update(p.gpu_indices)
    if not taken:
        return list(nodes)
    return [
        replace(n, free_gpu_indices=tuple(g for g in n.free_gpu_indices if g not in taken[n.id]))
        if n.id in taken
        else n
        for n in nodes
    ]


def _lease(
    view: JobView, snapshot: ClusterSnapshot, renewal: float | None, lease_s: float | None
) -> float:
    """The moved job's lease: its renewal's, else what is left of its lease, else the
    policy's (module docstring)."""
    if renewal is not None:
        return renewal
    left = None if view.lease_expires_at is None else view.lease_expires_at - snapshot.now
    if left is not None and left > 0:
        return left
    return lease_s or snapshot.default_lease_s
