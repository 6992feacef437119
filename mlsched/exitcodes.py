"""The ``mlsched`` client commands' exit codes, one per class of error (docs/cli.md).

Scripts can tell "no such job" from "not allowed" from "controller unreachable" without reading
messages; ``submit --wait`` exits with the job's outcome.
"""

from __future__ import annotations

import grpc

from mlsched.model import JobState

OK = 0
ERROR = 1  # anything unexpected (INTERNAL, UNKNOWN, ...)
INVALID = 2  # a usage error, a bad spec, INVALID_ARGUMENT
NOT_FOUND = 3
PERMISSION_DENIED = 4
UNAUTHENTICATED = 5  # no or a bad credential bundle, or the controller refused it
FAILED_PRECONDITION = 6  # the job's state does not allow it (already ended, ...)
RESOURCE_EXHAUSTED = 7  # a limit: requests per second, streams, a full state disk
UNAVAILABLE = 8  # the controller cannot be reached (or did not answer in time)
JOB_FAILED = 10  # submit --wait: the job ended FAILED
JOB_CANCELLED = 11  # submit --wait: the job ended CANCELLED
INTERRUPTED = 130  # Ctrl-C

_BY_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: INVALID,
    grpc.StatusCode.OUT_OF_RANGE: INVALID,
    grpc.StatusCode.NOT_FOUND: NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED: UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION: FAILED_PRECONDITION,
    grpc.StatusCode.ALREADY_EXISTS: FAILED_PRECONDITION,
    grpc.StatusCode.ABORTED: FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED: RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE: UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: UNAVAILABLE,
}

_BY_OUTCOME = {
    JobState.COMPLETED: OK,
    JobState.FAILED: JOB_FAILED,
    JobState.CANCELLED: JOB_CANCELLED,
}


def for_status(code: grpc.StatusCode | None) -> int:
    """The exit code of a refused RPC."""
    return _BY_STATUS.get(code, ERROR) if code is not None else ERROR


def for_outcome(state: JobState) -> int:
    """The exit code of ``submit --wait`` for a job that ended in ``state``."""
    return _BY_OUTCOME.get(state, ERROR)
