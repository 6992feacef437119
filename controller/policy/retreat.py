"""Keeping a job that an overload request sent back to the queue off the nodes it left (MLFS
§3.3.2-3.3.3; ``docs/overload.md``, *No ping-pong*).

A node agent asks to move a task off its overloaded server; when no other server can take it,
the policy sends the job back to the queue (a :class:`Suspend` whose reason is in
:data:`RETREAT_REASONS`) and the controller records on the job the nodes it left, its
measured load per task on each and when (``JobView.overload_retreat``). Without a rule the
next cycle resumes it on the same node, which overloads again: a ping-pong of suspensions.

**The rule.** A marked job's launch may put ``k`` of its tasks on a node ``n`` it left only if,
for every resource type ``r`` of its measured per-task load ``d`` there,
``u_{n,r} + k * d_r <= h_r`` (§3.3.2: a host must stay within ``h_r``; ``u`` is the node's
utilisation as its agent reports it). Where the job's load there or the node's utilisation was
never measured, it is kept off ``n`` for ``hold_s`` after it left (:data:`HOLD_S`, the agent's
``--migration-cooldown`` default). Nodes it did not leave may take it at once.

**Where it applies.** :func:`keep_off` wraps a policy's cycle (the
:class:`~controller.policy.overload.AnswersOverloadRequests` mixin, MLF-H, MLF-RL and MLFS):

1. The policy decides on the snapshot. A launch of a marked job that breaks the rule is taken
   out, the job is held out of the queue for this cycle and the policy decides again without
   it (its GPUs may go to other jobs, as if it had not been queued), until no launch breaks
   the rule: at most one more decision per marked job, and none when no job is marked.
2. Each held job, in queue order, is placed on the GPUs the final decision leaves free, on
   nodes the rule allows, with the shape of its dropped launch (tasks x GPUs per task,
   ``place_job``) and that launch's lease. One that fits nowhere stays queued: no launch, no
   GPU claimed, nothing lost; a later cycle looks again.

Pure: the snapshot (and the policy's decisions) in, a decision out; time is ``snapshot.now``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from operator import attrgetter

from controller.placement import TaskPlacement, place_job, without
from controller.policy.base import ClusterSnapshot, Decision, JobView, Launch, NodeView
from mlsched.model import OverloadRetreat

NO_HOST = "overloaded server; no host to move to"  # an agent's request found no host
LEFT_QUEUED = "overloaded server; queued"  # MLF-RL's movers the chooser left in the queue
RETREAT_REASONS = frozenset({NO_HOST, LEFT_QUEUED})
HOLD_S = 60.0  # no measurement to judge by: the agent's --migration-cooldown default
_EPS = 1e-9  # the rounding allowance of MLFS' threshold tests (hosts.py)
_RETREAT = attrgetter("overload_retreat")  # an OverloadRetreat (always true) or None

Decide = Callable[[ClusterSnapshot], Decision]


def keep_off(
    decide: Decide, snapshot: ClusterSnapshot, h_r: float, hold_s: float = HOLD_S
) -> Decision:
    """``decide(snapshot)`` with no marked job launched onto a node it left that cannot take
    it (module docstring)."""
    decision = decide(snapshot)
    if not decision.launch or not any(map(_RETREAT, snapshot.queued)):  # the common cases:
        return decision  # no launch to check, or no job marked (a scan in C)
    marked = {v.id: v for v in snapshot.queued if v.overload_retreat is not None}
    nodes = {n.id: n for n in snapshot.nodes}
    held: dict[str, Launch] = {}
    priorities: dict[str, float] = {}
    while True:  # each round holds at least one more marked job, so it ends
        broken = [
            item
            for item in decision.launch
            if item.job_id in marked
            and not allowed(marked[item.job_id], item.placement, nodes, snapshot.now, h_r, hold_s)
        ]
        if not broken:
            break
        for item in broken:
            held[item.job_id] = item
            if item.job_id in decision.priorities:
                priorities[item.job_id] = decision.priorities[item.job_id]
        rest = tuple(v for v in snapshot.queued if v.id not in held)
        decision = decide(replace(snapshot, queued=rest))
    order = [v for v in snapshot.queued if v.id in held]
    return _place_held(snapshot, decision, order, held, priorities, h_r, hold_s)


def allowed(
    view: JobView,
    placement: Iterable[TaskPlacement],
    nodes: Mapping[str, NodeView],
    now: float,
    h_r: float,
    hold_s: float = HOLD_S,
) -> bool:
    """Whether the rule lets ``placement`` hold ``view``'s tasks (module docstring)."""
    retreat = view.overload_retreat
    if retreat is None:
        return True
    counts = Counter(p.node_id for p in placement if p.node_id in retreat.nodes)
    return all(
        _node_takes(retreat, nodes.get(node_id), node_id, count, now, h_r, hold_s)
        for node_id, count in counts.items()
    )


def _node_takes(
    retreat: OverloadRetreat,
    node: NodeView | None,
    node_id: str,
    count: int,
    now: float,
    h_r: float,
    hold_s: float,
) -> bool:
    """u_{n,r} + k d_r <= h_r for every resource type r of the job's load on the node it
    left (§3.3.2); not measured (either side): only ``hold_s`` after it left."""
    demand = retreat.demand.get(node_id)
    if not demand or node is None or not node.utilization:
        return now >= retreat.at + hold_s
    return all(node.utilization.get(r, 0.0) + count * d <= h_r + _EPS for r, d in demand.items())


def _place_held(
    snapshot: ClusterSnapshot,
    decision: Decision,
    order: Sequence[JobView],
    held: Mapping[str, Launch],
    priorities: Mapping[str, float],
    h_r: float,
    hold_s: float,
) -> Decision:
    """Step 2 of the module docstring: the held jobs placed where the rule allows, if they
    fit on the GPUs ``decision`` leaves free."""
    claimed = [
        p
        for item in (*decision.launch, *decision.migrate, *decision.resize)
        for p in item.placement
    ]
    free = without(snapshot.free_gpus(), tuple(claimed))
    nodes = {n.id: n for n in snapshot.nodes}
    launches = list(decision.launch)
    placed: dict[str, float] = {}
    for view in order:
        dropped = held[view.id]
        per_task = max(1, len(dropped.placement[0].gpu_indices)) if dropped.placement else 1
        tasks = max(1, len(dropped.placement))
        open_nodes = {
            node_id: ids
            for node_id, ids in free.items()
            if allowed(view, (TaskPlacement(0, node_id, ()),), nodes, snapshot.now, h_r, hold_s)
        }
        placement = place_job(open_nodes, tasks * per_task, per_task)
        if placement is None or not allowed(view, placement, nodes, snapshot.now, h_r, hold_s):
            continue
        launches.append(Launch(view.id, placement, dropped.lease_s))
        free = without(free, placement)
        if view.id in priorities:
            placed[view.id] = priorities[view.id]
    if len(launches) == len(decision.launch):
        return decision
    return replace(decision, launch=tuple(launches), priorities={**decision.priorities, **placed})
