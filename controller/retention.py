"""Retention (issue 12 #3): finished jobs and old events leave the live state.

A job that ended more than ``ControllerSettings.retain_finished_s`` ago moves, with its tasks,
to the store's archive and out of memory; events older than that move to the events archive.
Archived jobs are still found by ``get`` and listed (``JobOperations``); archived events are
still returned by ``events_after``. A job with a fenced LOST task is kept until its fence
ends (its GPUs are still held for it).
"""

from __future__ import annotations

from controller.state import ControllerState

# Jobs moved per store transaction (bounds the time the state lock is held).
ARCHIVE_BATCH = 500


def archive_finished(state: ControllerState) -> int:
    """Move what is past retention to the archive; returns how many jobs moved. Caller holds
    ``state.lock``."""
    retain_s = state.settings.retain_finished_s
    if retain_s is None:
        return 0
    cutoff = state.clock.now() - retain_s
    fenced = state.fences.jobs()
    old = [
        job.id
        for job in state.jobs.values()
        if job.state.terminal
        and job.end_time is not None
        and job.end_time < cutoff
        and job.id not in fenced
    ][:ARCHIVE_BATCH]
    with state.store.transaction(durable=False):
        if old:
            state.store.archive_jobs(old)
        state.store.archive_events(cutoff)
    for job_id in old:
        del state.jobs[job_id]
        state.tasks.pop(job_id, None)
    return len(old)
