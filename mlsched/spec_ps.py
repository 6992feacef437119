"""The ``ps`` section of a job spec (issue 16): a job in the parameter-server architecture,
whose worker and PS counts the scheduler chooses. Every problem names its field.

Example::

    ps:
      workers: {min: 1, max: 8}
      servers: {min: 1, max: 4}
      worker: {gpus: 1, cpus: 2, memory_gb: 8}    # per worker (Chic §6.1, ResNet-50)
      server: {gpus: 0, cpus: 3, memory_gb: 9}    # per PS

Rules: ``1 <= min <= max <= 1024`` for both roles; every resource a number ``>= 0``; a worker
needs at least one GPU or CPU. In a job spec (``mlsched.jobspec``, :func:`job_problems`) a worker
holds exactly ``gpus_per_process`` GPUs, a PS none (PS tasks are CPU processes), ``gpus`` (where
the job starts) is ``min..max`` workers' GPUs, and ``elastic`` does not apply. The simulator's
PS jobs (``simulator.ps``) carry the same fields (docs/chic.md).
"""

from __future__ import annotations

from typing import Any

from mlsched.model import PsSpec, RoleResources
from mlsched.spec_section import FieldDoc, open_section

__all__ = ["PsSpec", "RoleResources", "job_problems", "parse_ps", "ps_to_dict"]

PS_FIELDS = ("workers", "servers", "worker", "server")
RANGE_FIELDS = ("min", "max")
RESOURCE_FIELDS = ("gpus", "cpus", "memory_gb")
MAX_TASKS = 1024
# docs/spec-reference.md (python -m mlsched.spec_reference)
PS_FIELD_DOCS = {
    "workers": FieldDoc(
        "mapping (section `ps.workers`)", "required", "how many workers the scheduler may choose"
    ),
    "servers": FieldDoc(
        "mapping (section `ps.servers`)",
        "required",
        "how many parameter servers the scheduler may choose",
    ),
    "worker": FieldDoc(
        "mapping (section `ps.worker`)",
        "required",
        "one worker's resources; its `gpus` equals `gpus_per_process`",
    ),
    "server": FieldDoc(
        "mapping (section `ps.server`)",
        "required",
        "one parameter server's resources; its `gpus` is 0 (CPU processes)",
    ),
}
RANGE_FIELD_DOCS = {
    "min": FieldDoc(f"integer, 1 to {MAX_TASKS}", "required", "the fewest tasks of the role"),
    "max": FieldDoc(
        f"integer, 1 to {MAX_TASKS}, at least `min`", "required", "the most tasks of the role"
    ),
}
RESOURCE_FIELD_DOCS = {
    "gpus": FieldDoc("number >= 0", "0", "GPUs of one task of the role"),
    "cpus": FieldDoc("number >= 0", "0", "CPUs of one task of the role"),
    "memory_gb": FieldDoc("number >= 0", "0", "memory of one task of the role, in GB"),
}


def parse_ps(value: Any, problems: list[str]) -> PsSpec:
    """The validated section (``PsSpec()`` when absent or wrong, the problems appended)."""
    before = len(problems)
    value = open_section("ps", value, PS_FIELDS, problems)
    if value is None:
        return PsSpec()
    workers = _range(value.get("workers"), "ps.workers", problems)
    servers = _range(value.get("servers"), "ps.servers", problems)
    worker = _resources(value.get("worker"), "ps.worker", problems)
    server = _resources(value.get("server"), "ps.server", problems)
    if worker is not None and worker.gpus == 0 and worker.cpus == 0:
        problems.append("ps.worker: needs gpus or cpus above 0")
    if len(problems) > before or None in (workers, servers, worker, server):
        return PsSpec()
    assert workers and servers and worker and server
    return PsSpec(*workers, *servers, worker, server)


def job_problems(ps: PsSpec, gpus: int, per_process: int, elastic: bool) -> list[str]:
    """What a job spec's other fields must satisfy for its ``ps`` section (module docstring);
    ``gpus`` / ``per_process`` are 0 when already found wrong."""
    if not ps.enabled:
        return []
    problems = []
    if per_process and ps.worker.gpus != per_process:
        problems.append(
            f"ps.worker.gpus ({ps.worker.gpus:g}) must equal gpus_per_process ({per_process})"
        )
    if ps.server.gpus != 0:
        problems.append(f"ps.server.gpus: a PS runs on CPUs only, got {ps.server.gpus:g}")
    low, high = ps.min_workers * per_process, ps.max_workers * per_process
    if gpus and per_process and not low <= gpus <= high:
        problems.append(f"gpus ({gpus}) must lie within ps.workers' GPUs ({low}..{high})")
    if elastic:
        problems.append("elastic and ps exclude each other (a PS job's workers are chosen by ps)")
    return problems


def ps_to_dict(spec: PsSpec) -> dict[str, Any]:
    """The YAML form, every field spelled out."""
    return {
        "workers": {"min": spec.min_workers, "max": spec.max_workers},
        "servers": {"min": spec.min_servers, "max": spec.max_servers},
        "worker": dict(zip(RESOURCE_FIELDS, spec.worker.vector(), strict=True)),
        "server": dict(zip(RESOURCE_FIELDS, spec.server.vector(), strict=True)),
    }


def _range(value: Any, name: str, problems: list[str]) -> tuple[int, int] | None:
    if value is None:
        problems.append(f"{name}: required")
        return None
    section = open_section(name, value, RANGE_FIELDS, problems)
    if section is None:
        return None
    bounds = []
    for key in RANGE_FIELDS:
        raw = section.get(key)
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= MAX_TASKS:
            problems.append(f"{name}.{key}: an integer between 1 and {MAX_TASKS}, got {raw!r}")
            return None
        bounds.append(raw)
    if bounds[0] > bounds[1]:
        problems.append(f"{name}.min ({bounds[0]}) must not exceed {name}.max ({bounds[1]})")
        return None
    return bounds[0], bounds[1]


def _resources(value: Any, name: str, problems: list[str]) -> RoleResources | None:
    if value is None:
        problems.append(f"{name}: required")
        return None
    section = open_section(name, value, RESOURCE_FIELDS, problems)
    if section is None:
        return None
    amounts: dict[str, float] = {}
    for key in RESOURCE_FIELDS:
        raw = section.get(key, 0)
        if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not raw >= 0:
            problems.append(f"{name}.{key}: a number >= 0, got {raw!r}")
            return None
        amounts[key] = float(raw)
    return RoleResources(**amounts)
