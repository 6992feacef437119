"""The static-profiler ablation (UniSched Fig. 9a): a fixed set of nodes only profiles.

The paper compares its unified profiling (profiler jobs planned in the MILP with every other
job, §III-C) with "a system that statically allocates a fixed number of compute nodes (2 in
our experiments) for job profiling". Here the last ``count`` nodes by id are those nodes, but
never more than a third of the cluster (our bound, so that a small cluster still runs its
jobs; C120 sets 2 aside as the paper does); profiling jobs wait for them first come first
served, and the MILP plans the rest of the cluster without them.
"""

from __future__ import annotations

from dataclasses import replace

from controller.policy.base import ClusterSnapshot, Decision, JobView


def reserved_nodes(snapshot: ClusterSnapshot, count: int) -> frozenset[str]:
    """The ids of the profiling nodes: the last ``count`` by id, at most a third of them."""
    ids = sorted(n.id for n in snapshot.nodes)
    count = min(count, len(ids) // 3)
    return frozenset(ids[len(ids) - count :]) if count else frozenset()


def on_nodes(view: JobView, nodes: frozenset[str]) -> bool:
    return any(p.node_id in nodes for p in view.placement)


def execution_part(
    snapshot: ClusterSnapshot, reserved: frozenset[str], profiling: tuple[JobView, ...]
) -> ClusterSnapshot:
    """The snapshot without the profiling nodes, the jobs on them, and the jobs waiting to be
    profiled."""
    waiting = {v.id for v in profiling}
    return replace(
        snapshot,
        nodes=tuple(n for n in snapshot.nodes if n.id not in reserved),
        queued=tuple(v for v in snapshot.queued if v.id not in waiting),
        active=tuple(v for v in snapshot.active if not on_nodes(v, reserved)),
        busy=tuple(v for v in snapshot.busy if not on_nodes(v, reserved)),
    )


def merge(first: Decision, second: Decision) -> Decision:
    """Both parts' orders in one decision (they concern disjoint jobs)."""
    return Decision(
        launch=first.launch + second.launch,
        renew=first.renew + second.renew,
        suspend=first.suspend + second.suspend,
        estimates={**first.estimates, **second.estimates},
        migrate=first.migrate + second.migrate,
        stop=first.stop + second.stop,
    )
