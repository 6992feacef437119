"""Size limits of a submitted job spec: a spec is small; anything bigger is refused whole."""

from __future__ import annotations

from controller.errors import InvalidArgument
from mlsched.model import JobSpec

MAX_JOB_NAME = 128
MAX_ARGS = 256
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_VARS = 128
MAX_ENV_KEY = 256
MAX_ENV_BYTES = 64 * 1024
MAX_WORKING_DIR = 4096


def check_spec(spec: JobSpec) -> None:
    """InvalidArgument naming the first limit ``spec`` exceeds."""
    if len(spec.name) > MAX_JOB_NAME:
        raise InvalidArgument(f"the job name is longer than {MAX_JOB_NAME} characters")
    if len(spec.command) > MAX_ARGS:
        raise InvalidArgument(f"the command has more than {MAX_ARGS} arguments")
    if sum(len(a.encode()) for a in spec.command) > MAX_COMMAND_BYTES:
        raise InvalidArgument(f"the command is longer than {MAX_COMMAND_BYTES} bytes")
    if len(spec.working_dir) > MAX_WORKING_DIR:
        raise InvalidArgument(f"the working directory is longer than {MAX_WORKING_DIR} characters")
    if len(spec.env) > MAX_ENV_VARS:
        raise InvalidArgument(f"the environment has more than {MAX_ENV_VARS} variables")
    if any(len(key) > MAX_ENV_KEY for key, _ in spec.env):
        raise InvalidArgument(f"an environment variable name is longer than {MAX_ENV_KEY}")
    if sum(len(k.encode()) + len(v.encode()) for k, v in spec.env) > MAX_ENV_BYTES:
        raise InvalidArgument(f"the environment is larger than {MAX_ENV_BYTES} bytes")
