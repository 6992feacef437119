"""The dashboard's read-only JSON views of the state: overview, job list, one job, events.

What any user may see of any job (``controller.auth.visibility``): never a job's environment,
its command's arguments or lines of its log."""

from __future__ import annotations

from typing import Any

from controller.auth.visibility import visible, visible_event
from controller.state import ControllerState
from mlsched.model import Event, Job
from mlsched.security.names import USER, Identity

# The dashboard is nobody in particular: it shows what every user may see.
VIEWER = Identity(kind=USER, name="")
EVENT_PAGE = 200


def overview(state: ControllerState, policy: str) -> dict[str, Any]:
    """Nodes with their GPUs (busy by which job, utilisation, memory) and job counts."""
    with state.lock:
        now = state.clock.now()
        holder = {
            (t.node_id, g): t.job_id
            for tasks in state.tasks.values()
            for t in tasks
            if t.state.value in ("LAUNCHING", "RUNNING", "SUSPENDING")
            for g in t.gpu_indices
        }
        nodes = [_node(n, holder, n.id in state.connected) for _, n in sorted(state.nodes.items())]
        counts: dict[str, int] = {}
        for job in state.jobs.values():
            counts[job.state.value] = counts.get(job.state.value, 0) + 1
    gpus = [g for n in nodes for g in n["gpus"]]
    return {
        "time": now,
        "policy": policy,
        "nodes": nodes,
        "jobs_by_state": counts,
        "gpus_total": len(gpus),
        "gpus_busy": sum(1 for g in gpus if g["job_id"]),
    }


def _node(node: Any, holder: dict[tuple[str, int], str], connected: bool) -> dict[str, Any]:
    usage = {g.index: g for g in node.metrics.gpus} if node.metrics is not None else {}
    gpus = []
    for gpu in node.gpus:
        used = usage.get(gpu.index)
        gpus.append(
            {
                "index": gpu.index,
                "name": gpu.name,
                "virtual": gpu.virtual,
                "job_id": holder.get((node.id, gpu.index), ""),
                "utilization": used.utilization_percent / 100.0 if used else None,
                "memory_used_bytes": used.memory_used_bytes if used else None,
                "memory_total_bytes": used.memory_total_bytes if used else gpu.memory_total_bytes,
            }
        )
    return {
        "id": node.id,
        "up": node.alive and connected,
        "gpus": gpus,
        "cpu_utilization": node.metrics.cpu_percent / 100.0 if node.metrics else None,
    }


def job_row(job: Job, now: float) -> dict[str, Any]:
    """A job as the list shows it: state, class, slack to its first deadline, estimate."""
    estimate = job.estimate
    remaining = estimate.remaining_s if estimate is not None else None
    slack = None
    if job.spec.deadlines and not job.state.terminal:
        # Slack: time left to the first deadline minus the predicted remaining time (if any).
        due = job.submit_time + job.spec.deadlines[0].seconds_after_submit
        slack = due - now - (remaining or 0.0)
    return {
        "id": job.id,
        "name": job.spec.name,
        "user": job.user,
        "state": job.state.value,
        "job_class": job.spec.job_class.value,
        "gpus": job.spec.gpus,
        "submit_time": job.submit_time,
        "iteration": job.iteration,
        "suspensions": job.suspensions,
        "deadline_slack_s": slack,
        "estimate_remaining_s": remaining,
        "estimate_reward": estimate.reward if estimate is not None else None,
        "message": job.message,
    }


def jobs(state: ControllerState) -> dict[str, Any]:
    with state.lock:
        now = state.clock.now()
        shown = [visible(VIEWER, j, [])[0] for j in state.jobs.values()]
    shown.sort(key=lambda j: j.submit_time, reverse=True)
    return {"time": now, "jobs": [job_row(j, now) for j in shown]}


def job_page(state: ControllerState, job_id: str) -> dict[str, Any] | None:
    """One job: its row, tasks, estimate, metric curve and timeline (its events)."""
    with state.lock:
        now = state.clock.now()
        job = state.job(job_id)
        if job is None:
            return None
        job, tasks = visible(VIEWER, job, list(state.job_tasks(job_id)))
    timeline = [event_row(e) for e in state.store.events_after(0, job_id, limit=1000)]
    estimate = job.estimate
    return {
        "time": now,
        "job": job_row(job, now),
        "tasks": [
            {
                "rank": t.rank,
                "attempt": t.attempt,
                "node_id": t.node_id,
                "gpus": list(t.gpu_indices),
                "state": t.state.value,
            }
            for t in tasks
        ],
        "estimate": None
        if estimate is None
        else {
            "phase": estimate.phase,
            "iterations": estimate.iterations,
            "iteration_time_s": estimate.iteration_time_s,
            "remaining_s": estimate.remaining_s,
            "reward": estimate.reward,
            "allocation": estimate.allocation,
        },
        "metric_history": [[i, v] for i, v in job.metric_history],
        "timeline": timeline,
    }


def event_row(event: Event) -> dict[str, Any]:
    seen = visible_event(VIEWER, event)
    return {
        "seq": seen.seq,
        "time": seen.time,
        "kind": seen.kind,
        "message": seen.message,
        "job_id": seen.job_id,
        "node_id": seen.node_id,
    }


def events(state: ControllerState, after: int) -> dict[str, Any]:
    """Events after ``after`` (a page); ``after`` < 0 means the last page."""
    if after < 0:
        with state.lock:
            after = max(0, state.last_event_seq - EVENT_PAGE)
    page = state.store.events_after(after, "", limit=EVENT_PAGE)
    return {"events": [event_row(e) for e in page]}
