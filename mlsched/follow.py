"""Following a job from the command line: ``submit --wait`` and ``logs -f``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from mlsched.model import Job, JobState

LOG_POLL_S = 1.0  # how often ``logs -f`` fetches the tail (the log is on the job's node)
OVERLAP_CHARS = 4096  # how much of the last output identifies where the next fetch continues
MIN_ANCHOR_CHARS = 64  # less than this in common: the reads do not overlap


def wait_for_job(client: Any, job_id: str, out: TextIO) -> Job:
    """Print the job's state changes as they happen; return the job once it has ended."""
    job, _ = client.get(job_id)
    if job.state.terminal:
        return job
    for event in client.events(job_id=job_id, follow=True):
        if event.kind != "job_state":
            continue
        print(f"{job_id}: {event.message}", file=out, flush=True)
        job, _ = client.get(job_id)
        if job.state.terminal:
            return job
    return client.get(job_id)[0]  # the stream ended (the controller went away and came back)


def new_output(previous: str, current: str) -> tuple[str, bool]:
    """What ``current`` (a fresh tail of the log) adds to ``previous`` (the last tail shown),
    and whether output was lost in between (the tail moved on by more than its length).

    The end of ``previous`` is found in ``current`` as the longest suffix of it (at most
    OVERLAP_CHARS, at least MIN_ANCHOR_CHARS or all of it) that ``current`` contains: a suffix
    that occurs implies every shorter one does, so a binary search finds it."""
    if not previous:
        return current, False
    if current == previous:
        return "", False
    low, high = min(len(previous), MIN_ANCHOR_CHARS), min(len(previous), OVERLAP_CHARS)
    if previous[-low:] not in current:
        return current, True
    while low < high:  # invariant: the suffix of length ``low`` occurs in ``current``
        middle = (low + high + 1) // 2
        if previous[-middle:] in current:
            low = middle
        else:
            high = middle - 1
    anchor = previous[-low:]
    return current[current.rfind(anchor) + len(anchor) :], False


def follow_logs(
    client: Any,
    job_id: str,
    rank: int,
    max_bytes: int,
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> JobState:
    """Print the log of one task as it grows until the job ends; returns its final state."""
    shown = ""
    while True:
        job, _ = client.get(job_id)
        logs = client.logs(job_id, rank=rank, max_bytes=max_bytes)
        text, gap = new_output(shown, logs.content)
        if gap:
            out.write("\n[... output skipped: more than the tail arrived between two reads ...]\n")
        out.write(text)
        out.flush()
        shown = logs.content
        if job.state.terminal:  # read after the job ended: nothing more will come
            return job.state
        sleep(LOG_POLL_S)
