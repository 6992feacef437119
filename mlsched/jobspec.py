"""Job specifications in YAML: parsing and validation with messages that name the field.

Example::

    name: mlp
    command: python examples/mlp_classifier.py --lr 0.1   # a string (shell words) or a list
    gpus: 2
    class: soft-slo               # best-effort (default) | strict-slo | soft-slo
    deadlines:                    # strict: exactly one; soft: one or more, later = smaller reward
      - {after: 30m, reward: 100}
      - {after: 45m, reward: 50}
    stop: {iterations: 3000}      # or {metric: accuracy, target: 0.9, max_iterations: 5000}
"""

from __future__ import annotations

import itertools
import math
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlsched.model import (
    Deadline,
    IterationStop,
    JobClass,
    JobSpec,
    MetricGoal,
    StoppingCriterion,
    TargetMetricStop,
)

MAX_GPUS = 1024
MAX_ITERATIONS = 10**12
STRICT_SLO_DEFAULT_REWARD = 100.0  # UniSched §III-C2: a strict SLO job met on time earns 100
_TOP_FIELDS = {
    "name",
    "command",
    "gpus",
    "gpus_per_process",
    "working_dir",
    "env",
    "class",
    "deadlines",
    "stop",
    "max_retries",
    "batch_size",
}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class SpecError(ValueError):
    """A job specification is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid job spec:\n" + "\n".join(f"  - {p}" for p in problems))
        self.problems = problems


def load_spec_file(path: str | Path) -> JobSpec:
    """Read and validate a YAML job spec; relative working dirs resolve against its folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"cannot read {path}: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        raise SpecError([f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}"]) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError([f"{path}: malformed YAML: {exc}"]) from exc
    return parse_spec(data, base_dir=path.resolve().parent)


def parse_spec(data: Any, base_dir: Path | None = None) -> JobSpec:
    """Validate a decoded YAML document and build a :class:`JobSpec`."""
    if not isinstance(data, Mapping):
        raise SpecError(["the spec must be a mapping of fields (name, command, gpus, ...)"])
    problems: list[str] = []
    unknown = sorted(set(map(str, data)) - _TOP_FIELDS)
    if unknown:
        problems.append(
            f"unknown field(s): {', '.join(unknown)}; valid: {', '.join(sorted(_TOP_FIELDS))}"
        )
    name = _name(data.get("name"), problems)
    command = _command(data.get("command"), problems)
    gpus = _int_field(data, "gpus", problems, required=True, low=1, high=MAX_GPUS)
    per_process = _int_field(data, "gpus_per_process", problems, default=1, low=1, high=MAX_GPUS)
    if gpus and per_process and gpus % per_process:
        problems.append(f"gpus ({gpus}) must be a multiple of gpus_per_process ({per_process})")
    job_class = _job_class(data.get("class", JobClass.BEST_EFFORT.value), problems)
    deadlines = _deadlines(data.get("deadlines"), job_class, problems)
    stopping = _stopping(data.get("stop"), problems)
    max_retries = _int_field(data, "max_retries", problems, default=0, low=0, high=100)
    batch_size = _int_field(data, "batch_size", problems, default=0, low=0, high=10**7)
    env = _env(data.get("env"), problems)
    working_dir = _working_dir(data.get("working_dir"), base_dir, problems)
    if problems:
        raise SpecError(problems)
    assert stopping is not None and job_class is not None
    return JobSpec(
        name=name,
        command=command,
        gpus=gpus,
        gpus_per_process=per_process,
        stopping=stopping,
        job_class=job_class,
        deadlines=deadlines,
        working_dir=working_dir,
        env=env,
        max_retries=max_retries,
        batch_size=batch_size,
    )


def validate_spec(spec: JobSpec) -> None:
    """Check a spec built elsewhere (e.g. decoded from the wire) by the same rules."""
    document: dict[str, Any] = {
        "name": spec.name,
        "command": list(spec.command),
        "gpus": spec.gpus,
        "gpus_per_process": spec.gpus_per_process,
        "class": spec.job_class.value,
        "deadlines": [
            {"after": d.seconds_after_submit, "reward": d.reward} for d in spec.deadlines
        ],
        "stop": stopping_to_dict(spec.stopping),
        "max_retries": spec.max_retries,
        "batch_size": spec.batch_size,
        "env": dict(spec.env),
    }
    if spec.working_dir:
        document["working_dir"] = spec.working_dir
    parse_spec(document)


def stopping_to_dict(stopping: StoppingCriterion) -> dict[str, Any]:
    if isinstance(stopping, IterationStop):
        return {"iterations": stopping.iterations}
    return {
        "metric": stopping.metric,
        "target": stopping.target,
        "goal": stopping.goal.value,
        "max_iterations": stopping.max_iterations,
    }


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``90s``, ``30m``, ``2h``, ``1.5d``."""
    if isinstance(value, bool):
        raise ValueError("a duration, not a boolean")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        raise ValueError(f"expected seconds or a duration like 30m, got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    return seconds


def _name(value: Any, problems: list[str]) -> str:
    if value is None:
        problems.append("name: required")
        return ""
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        problems.append(
            f"name: 1-63 letters, digits, '.', '_' or '-', starting alphanumeric; got {value!r}"
        )
        return ""
    return value


def _command(value: Any, problems: list[str]) -> tuple[str, ...]:
    if value is None:
        problems.append("command: required (a string or a list of arguments)")
        return ()
    if isinstance(value, str):
        try:
            words = shlex.split(value)
        except ValueError as exc:
            problems.append(f"command: cannot split into words: {exc}")
            return ()
    elif isinstance(value, list) and all(isinstance(w, str | int | float) for w in value):
        words = [str(w) for w in value]
    else:
        problems.append(f"command: a string or a list of strings, got {type(value).__name__}")
        return ()
    if not words or not words[0].strip():
        problems.append("command: must not be empty")
        return ()
    return tuple(words)


def _int_field(
    data: Mapping[str, Any],
    key: str,
    problems: list[str],
    *,
    required: bool = False,
    default: int = 0,
    low: int,
    high: int,
) -> int:
    if key not in data or data[key] is None:
        if required:
            problems.append(f"{key}: required")
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"{key}: must be an integer, got {value!r}")
        return default
    if not low <= value <= high:
        problems.append(f"{key}: must be between {low} and {high}, got {value}")
        return default
    return value


def _job_class(value: Any, problems: list[str]) -> JobClass | None:
    try:
        return JobClass(value)
    except ValueError:
        valid = ", ".join(c.value for c in JobClass)
        problems.append(f"class: must be one of {valid}; got {value!r}")
        return None


def _deadlines(value: Any, job_class: JobClass | None, problems: list[str]) -> tuple[Deadline, ...]:
    if value is None:
        value = []
    if not isinstance(value, list):
        problems.append("deadlines: must be a list of {after, reward}")
        return ()
    parsed: list[Deadline] = []
    for i, item in enumerate(value):
        where = f"deadlines[{i}]"
        if not isinstance(item, Mapping) or not set(item) <= {"after", "reward"}:
            problems.append(f"{where}: must be a mapping with 'after' and optional 'reward'")
            continue
        try:
            after = parse_duration(item.get("after"))
        except ValueError as exc:
            problems.append(f"{where}.after: {exc}")
            continue
        reward = item.get("reward", STRICT_SLO_DEFAULT_REWARD)
        if (
            isinstance(reward, bool)
            or not isinstance(reward, int | float)
            or not math.isfinite(reward)
            or reward < 0
        ):
            problems.append(f"{where}.reward: must be a finite non-negative number, got {reward!r}")
            continue
        parsed.append(Deadline(after, float(reward)))
    _check_deadlines_for_class(parsed, job_class, problems)
    return tuple(parsed)


def _check_deadlines_for_class(
    deadlines: list[Deadline], job_class: JobClass | None, problems: list[str]
) -> None:
    if job_class is JobClass.BEST_EFFORT and deadlines:
        problems.append("deadlines: a best-effort job has none (use class strict-slo or soft-slo)")
    if job_class is JobClass.STRICT_SLO and len(deadlines) != 1:
        problems.append(f"deadlines: a strict-slo job has exactly one, got {len(deadlines)}")
    if job_class is JobClass.SOFT_SLO and not deadlines:
        problems.append("deadlines: a soft-slo job needs at least one")
    for earlier, later in itertools.pairwise(deadlines):
        if later.seconds_after_submit <= earlier.seconds_after_submit:
            problems.append("deadlines: must be in increasing order of 'after'")
            break
        if later.reward > earlier.reward:
            problems.append("deadlines: a later deadline cannot pay a larger reward")
            break


def _stopping(value: Any, problems: list[str]) -> StoppingCriterion | None:
    if not isinstance(value, Mapping):
        problems.append("stop: required, {iterations: N} or {metric, target, goal, max_iterations}")
        return None
    keys = set(map(str, value))
    if keys == {"iterations"}:
        n = value["iterations"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ITERATIONS:
            problems.append(f"stop.iterations: a positive integer, got {n!r}")
            return None
        return IterationStop(n)
    allowed = {"metric", "target", "goal", "max_iterations"}
    if "metric" not in keys or not keys <= allowed:
        problems.append(
            "stop: either {iterations: N} or {metric, target, goal, max_iterations}; "
            f"got fields {sorted(keys)}"
        )
        return None
    return _target_stop(value, problems)


def _target_stop(value: Mapping[str, Any], problems: list[str]) -> StoppingCriterion | None:
    metric, target = value.get("metric"), value.get("target")
    ok = True
    if not isinstance(metric, str) or not metric:
        problems.append(f"stop.metric: a metric name such as accuracy, got {metric!r}")
        ok = False
    if isinstance(target, bool) or not isinstance(target, int | float):
        problems.append(f"stop.target: a number, got {target!r}")
        ok = False
    try:
        goal = MetricGoal(value.get("goal", "max"))
    except ValueError:
        problems.append(f"stop.goal: 'max' or 'min', got {value.get('goal')!r}")
        ok = False
    maximum = value.get("max_iterations")
    if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1:
        problems.append(f"stop.max_iterations: required positive integer, got {maximum!r}")
        ok = False
    if not ok:
        return None
    return TargetMetricStop(metric, float(target), goal, maximum)


def _env(value: Any, problems: list[str]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        problems.append("env: must be a mapping of variable names to values")
        return ()
    pairs = []
    for key, val in value.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            problems.append(f"env: invalid variable name {key!r}")
        elif key.startswith("MLSCHED_"):
            problems.append(f"env: {key} is reserved for mlsched")
        else:
            pairs.append((key, str(val)))
    return tuple(sorted(pairs))


def _working_dir(value: Any, base_dir: Path | None, problems: list[str]) -> str:
    if value is None:
        return str(base_dir) if base_dir is not None else ""
    if not isinstance(value, str) or not value:
        problems.append(f"working_dir: a path, got {value!r}")
        return ""
    path = Path(value)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)
