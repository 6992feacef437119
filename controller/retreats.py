"""The controller's half of :mod:`controller.policy.retreat`: when it applies a suspension that
answers an overload request with no other host, it records on the job the nodes the job
leaves, its measured load per task on each (the agents' latest load reports, as
``snapshot.resource_usage`` reads them) and the time (``Job.overload_retreat``, persisted with
the job; cleared by its next launch). Caller holds ``state.lock``, before the suspension (the
tasks are still live)."""

from __future__ import annotations

from controller.snapshot import reported_demands
from controller.state import ControllerState
from mlsched.model import Job, OverloadRetreat


def record_retreat(state: ControllerState, job: Job) -> None:
    """Set ``job.overload_retreat`` from its live tasks (module docstring); the suspension that
    follows saves the job."""
    tasks = state.live_tasks(job.id)
    nodes = tuple(dict.fromkeys(t.node_id for t in tasks))
    demand: dict[str, dict[str, float]] = {}
    for node_id in nodes:
        reported = reported_demands(state, [t for t in tasks if t.node_id == node_id])
        if not reported:
            continue
        total: dict[str, float] = {}
        for shares in reported:
            for resource, share in shares.items():
                total[resource] = total.get(resource, 0.0) + share
        demand[node_id] = {res: share / len(reported) for res, share in total.items()}
    job.overload_retreat = OverloadRetreat(nodes=nodes, demand=demand, at=state.clock.now())
