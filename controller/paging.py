"""Paging of ``ListJobs`` (issue 12 #3): page sizes, cursors and a byte budget per page.

A cursor is the last listed job's (submit time, id), as an opaque URL-safe token; a page ends
at ``page_size`` jobs or before its encoded jobs pass ``MAX_PAGE_BYTES``, far below gRPC's
4 MiB message limit (one job alone always fits: a submit that large is refused at 4 MiB).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from controller.errors import InvalidArgument
from controller.store.base import JobKey
from mlsched.model import Job, Task

DEFAULT_PAGE_SIZE = 500
MAX_PAGE_SIZE = 1000
MAX_PAGE_BYTES = 1 << 20


class Sized(Protocol):
    def ByteSize(self) -> int: ...


M = TypeVar("M", bound=Sized)


def page_size(requested: int) -> int:
    if requested < 0:
        raise InvalidArgument("page_size must not be negative")
    return min(requested or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def encode_token(key: JobKey) -> str:
    return base64.urlsafe_b64encode(json.dumps([key[0], key[1]]).encode()).decode()


def decode_token(token: str) -> JobKey | None:
    """None for the first page; a token this module did not make is an InvalidArgument."""
    if not token:
        return None
    try:
        submit_time, job_id = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(job_id, str) or isinstance(submit_time, bool):
            raise TypeError(job_id)
        return (float(submit_time), job_id)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"page_token {token[:40]!r} is not one this server made") from exc


def fill(
    jobs: Sequence[tuple[Job, list[Task]]], size: int, to_msg: Callable[[Job, list[Task]], M]
) -> tuple[list[M], str]:
    """The page's messages from ``jobs`` (up to ``size + 1`` listed: one more tells whether
    another page follows) and the next page's token ("" after the last page)."""
    msgs: list[M] = []
    total = 0
    for job, tasks in jobs[:size]:
        msg = to_msg(job, tasks)
        total += msg.ByteSize() + 8  # the field's tag and length
        if msgs and total > MAX_PAGE_BYTES:
            break
        msgs.append(msg)
    if len(msgs) == len(jobs):
        return msgs, ""
    last = jobs[len(msgs) - 1][0]
    return msgs, encode_token((last.submit_time, last.id))
