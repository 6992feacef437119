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
    mlfs:                         # optional, MLFS features (every field optional)
      urgency: 5                  # L^J from 1 (default, least urgent) to 10
      partitions: [0.5, 0.5]      # S_k / S^J per process (model partition), summing to 1
      dependencies: [[0, 1]]      # [parent, child] partition indices, a DAG
      stop_option: opt-stop       # iterations (default) | opt-stop | required-accuracy
      system_may_switch: true     # under overload MLF-C may switch to a cheaper option
      required_accuracy: 0.8      # needed by required-accuracy
    elastic: {min_gpus: 1, max_gpus: 4, batch: fixed-per-gpu}   # optional (mlsched.spec_elastic)
    ps: {workers: {min: 1, max: 2}, servers: {min: 1, max: 2}, worker: {gpus: 1}, server: {cpus: 1}}
                                  # optional: a parameter-server job (mlsched.spec_ps)
    launcher: torchrun            # optional: the command runs torchrun (mlsched.spec_launcher)
    suspend_grace: 2m             # optional: a suspension's wait for the checkpoint (default:
                                  # the controller's --suspend-grace), then SIGTERM, then SIGKILL

MLFS choices (§3.1, §3.5): urgency is a number in [1, 10], the range §4.1 draws from (the paper
allows [0, m], but an urgency of 0 zeroes Eq. 2's ML priority). ``partitions`` has one entry per
process (``gpus / gpus_per_process``): a process holds one model partition; empty means a plain
data-parallel job. ``required_accuracy`` is in the units of the metric MLF-C watches: the
``stop.metric`` of a target-metric job, else ``accuracy`` (a fraction, so within [0, 1]).
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
    ElasticSpec,
    IterationStop,
    JobClass,
    JobSpec,
    Launcher,
    MetricGoal,
    MlfsSpec,
    StopOption,
    StoppingCriterion,
    TargetMetricStop,
)
from mlsched.spec_elastic import elastic_to_dict, parse_elastic
from mlsched.spec_launcher import launcher_problems, parse_launcher
from mlsched.spec_ps import job_problems, parse_ps, ps_to_dict
from mlsched.spec_section import FieldDoc, open_section

MAX_GPUS = 1024
MAX_ITERATIONS = 10**12
MAX_SUSPEND_GRACE_S = 3600.0  # a suspension may wait this long for a checkpoint, no longer
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
    "mlfs",
    "elastic",
    "ps",
    "launcher",
    "suspend_grace",
}
_MLFS_FIELDS = (
    "urgency",
    "partitions",
    "dependencies",
    "stop_option",
    "system_may_switch",
    "required_accuracy",
)
MIN_URGENCY, MAX_URGENCY = 1.0, 10.0
_PARTITION_SUM_TOLERANCE = 1e-6
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")
_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}

# What docs/spec-reference.md says of each field (python -m mlsched.spec_reference).
_DURATION = "seconds, or a duration: 90s, 30m, 2h, 1.5d"
TOP_FIELD_DOCS = {
    "name": FieldDoc(
        "string: 1-63 letters, digits, `.`, `_`, `-`, starting alphanumeric",
        "required",
        "the job's name in listings",
    ),
    "command": FieldDoc(
        "string (split into shell words, not run by a shell) or list of strings",
        "required",
        "what each task runs, in `working_dir`",
    ),
    "gpus": FieldDoc(
        f"integer, 1 to {MAX_GPUS}",
        "required",
        "GPUs the job runs on (where an elastic or parameter-server job starts)",
    ),
    "gpus_per_process": FieldDoc(
        f"integer, 1 to {MAX_GPUS}, dividing `gpus`",
        "1 (`gpus` with `launcher: torchrun`)",
        "GPUs of one task (a training process, or one torchrun launcher); "
        "the job has `gpus / gpus_per_process` tasks",
    ),
    "working_dir": FieldDoc(
        "path",
        "the spec file's folder (`submit -- CMD`: the current folder)",
        "the tasks' working directory; a relative path is taken from the spec file's folder",
    ),
    "env": FieldDoc(
        "mapping of variable names to values",
        "none",
        "extra environment variables of the tasks; names starting `MLSCHED_` are reserved",
    ),
    "class": FieldDoc(
        "one of " + ", ".join(c.value for c in JobClass),
        JobClass.BEST_EFFORT.value,
        "service class: best-effort has no deadline, strict-slo exactly one, soft-slo one or more",
    ),
    "deadlines": FieldDoc(
        "list of mappings (section `deadlines[]`)",
        "none",
        "the SLO deadlines, in increasing order of `after`",
    ),
    "stop": FieldDoc(
        "mapping (section `stop`)", "required", "when the job is done (section `stop`)"
    ),
    "max_retries": FieldDoc(
        "integer, 0 to 100",
        "0",
        "task failures the job survives: each of the first `max_retries` requeues it, "
        "one more fails it",
    ),
    "batch_size": FieldDoc(
        "integer, 0 to 10000000",
        "0 (none)",
        "the global batch size on `gpus` GPUs, given to the tasks as `MLSCHED_BATCH_SIZE`; "
        "required by `elastic`",
    ),
    "mlfs": FieldDoc("mapping (section `mlfs`)", "none", "MLFS scheduling features"),
    "elastic": FieldDoc(
        "mapping (section `elastic`)", "none (a fixed size)", "how far the job may be resized"
    ),
    "ps": FieldDoc(
        "mapping (section `ps`)", "none", "a parameter-server job (workers and servers)"
    ),
    "launcher": FieldDoc(
        "one of " + ", ".join(launcher.value for launcher in Launcher),
        Launcher.AGENT.value,
        "who starts the training processes: the agent, one per task, or torchrun, one "
        "launcher per task starting a process per GPU (not with `elastic` or `ps`)",
    ),
    "suspend_grace": FieldDoc(
        f"{_DURATION}; at most {MAX_SUSPEND_GRACE_S:g} s",
        "the controller's `--suspend-grace` (30 s unless set)",
        "how long a suspension waits for the checkpoint before SIGTERM (and again before SIGKILL)",
    ),
}
DEADLINE_FIELD_DOCS = {
    "after": FieldDoc(_DURATION, "required", "the deadline, counted from submission"),
    "reward": FieldDoc(
        "number >= 0",
        f"{STRICT_SLO_DEFAULT_REWARD:g}",
        "what meeting this deadline is worth; a later deadline may not pay more",
    ),
}
STOP_FIELD_DOCS = {
    "iterations": FieldDoc(
        f"integer, 1 to {MAX_ITERATIONS}",
        "required, alone (or give `metric`)",
        "the job is done after this many iterations",
    ),
    "metric": FieldDoc(
        "string", "required (or give `iterations`)", "the metric the job reports to reach"
    ),
    "target": FieldDoc("number", "required with `metric`", "the value of `metric` to reach"),
    "goal": FieldDoc(
        "one of " + ", ".join(g.value for g in MetricGoal),
        MetricGoal.MAXIMIZE.value,
        "max: done at or above `target`; min: at or below",
    ),
    "max_iterations": FieldDoc(
        f"integer, 1 to {MAX_ITERATIONS}",
        "required with `metric`",
        "the iteration budget if `target` is not reached",
    ),
}
MLFS_FIELD_DOCS = {
    "urgency": FieldDoc(
        f"number, {MIN_URGENCY:g} to {MAX_URGENCY:g}",
        f"{MlfsSpec.urgency:g}",
        "how urgent the job is (10: most urgent)",
    ),
    "partitions": FieldDoc(
        "list of positive numbers summing to 1, one per task",
        "none (plain data parallel)",
        "each task's share of the model (model partitions)",
    ),
    "dependencies": FieldDoc(
        "list of [parent, child] partition indices, without cycles",
        "none",
        "which partitions depend on which (needs `partitions`)",
    ),
    "stop_option": FieldDoc(
        "one of " + ", ".join(o.value for o in StopOption),
        StopOption.ITERATIONS.value,
        "how MLFS may end the job: run the iterations asked for, stop near the predicted "
        "best accuracy, or stop at `required_accuracy`",
    ),
    "system_may_switch": FieldDoc(
        "true or false", "false", "under overload MLFS may switch the job to a cheaper option"
    ),
    "required_accuracy": FieldDoc(
        "number (a fraction from 0 to 1 for an `iterations` job)",
        "none (required by required-accuracy)",
        "the accuracy that is enough, in the units of the watched metric",
    ),
}


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
    launcher = parse_launcher(data.get("launcher"), problems)
    one_launcher = gpus if launcher is Launcher.TORCHRUN and gpus else 1  # mlsched.spec_launcher
    per_process = _int_field(
        data, "gpus_per_process", problems, default=one_launcher, low=1, high=MAX_GPUS
    )
    if gpus and per_process and gpus % per_process:
        problems.append(f"gpus ({gpus}) must be a multiple of gpus_per_process ({per_process})")
    job_class = _job_class(data.get("class", JobClass.BEST_EFFORT.value), problems)
    deadlines = _deadlines(data.get("deadlines"), job_class, problems)
    stopping = _stopping(data.get("stop"), problems)
    max_retries = _int_field(data, "max_retries", problems, default=0, low=0, high=100)
    batch_size = _int_field(data, "batch_size", problems, default=0, low=0, high=10**7)
    env = _env(data.get("env"), problems)
    working_dir = _working_dir(data.get("working_dir"), base_dir, problems)
    processes = gpus // per_process if gpus and per_process and not gpus % per_process else 0
    mlfs = _mlfs(data.get("mlfs"), processes, stopping, problems)
    fine = gpus if processes else 0
    elastic = parse_elastic(data.get("elastic"), fine, per_process, batch_size, problems)
    ps = parse_ps(data.get("ps"), problems)  # issue 16: a parameter-server job
    problems += job_problems(ps, fine, per_process or 0, "elastic" in data)
    problems += launcher_problems(launcher, data)
    suspend_grace_s = _grace(data.get("suspend_grace"), problems)
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
        mlfs=mlfs,
        elastic=elastic,
        ps=ps,
        launcher=launcher,
        suspend_grace_s=suspend_grace_s,
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
    if spec.mlfs != MlfsSpec():
        document["mlfs"] = mlfs_to_dict(spec.mlfs)
    if spec.elastic != ElasticSpec():
        document["elastic"] = elastic_to_dict(spec.elastic)
    if spec.ps.enabled:
        document["ps"] = ps_to_dict(spec.ps)
    if spec.launcher is not Launcher.AGENT:
        document["launcher"] = spec.launcher.value
    if spec.suspend_grace_s:
        document["suspend_grace"] = spec.suspend_grace_s
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


def mlfs_to_dict(mlfs: MlfsSpec) -> dict[str, Any]:
    """The YAML form of an MLFS section, every field spelled out."""
    return {
        "urgency": mlfs.urgency,
        "partitions": list(mlfs.partitions),
        "dependencies": [[parent, child] for parent, child in mlfs.dependencies],
        "stop_option": mlfs.stop_option.value,
        "system_may_switch": mlfs.system_may_switch,
        "required_accuracy": mlfs.required_accuracy,
    }


def watched_metric(spec: JobSpec) -> tuple[str, MetricGoal]:
    """The metric MLF-C watches for a job (§3.5): a target-metric job's own metric, else
    ``accuracy`` (to maximise), the metric the paper's accuracies are."""
    stop = spec.stopping
    if isinstance(stop, TargetMetricStop):
        return stop.metric, stop.goal
    return "accuracy", MetricGoal.MAXIMIZE


def tracked_metric(spec: JobSpec) -> str | None:
    """The metric whose history the controller keeps for a job: a target-metric job's (the
    iteration estimator's input), else ``accuracy`` for a job MLF-C may stop early (an option
    other than (i), or one the system may switch); None for any other job."""
    mlfs = spec.mlfs
    if isinstance(spec.stopping, TargetMetricStop) or (
        mlfs.stop_option is not StopOption.ITERATIONS or mlfs.system_may_switch
    ):
        return watched_metric(spec)[0]
    return None


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


# ASCII control characters other than tab and newline (NUL included): a NUL cannot reach
# execve at all (Popen raises ValueError), the others only garble logs and terminals.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _control_problem(field: str, value: str) -> str | None:
    """A problem naming ``field`` when ``value`` holds a control character, else None."""
    match = _CONTROL_RE.search(value)
    if match is None:
        return None
    char = "NUL byte" if match.group() == "\0" else f"control character {match.group()!r}"
    return f"{field}: must not contain a {char} (at position {match.start()})"


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
    bad = [p for i, w in enumerate(words) if (p := _control_problem(f"command[{i}]", w))]
    if bad:
        problems.extend(bad)
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


def _grace(value: Any, problems: list[str]) -> float:
    """``suspend_grace``: seconds or a duration, at most MAX_SUSPEND_GRACE_S; 0 when absent."""
    if value is None:
        return 0.0
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        problems.append(f"suspend_grace: {exc}")
        return 0.0
    if seconds > MAX_SUSPEND_GRACE_S:
        problems.append(f"suspend_grace: at most {MAX_SUSPEND_GRACE_S:g} s, got {seconds:g} s")
        return 0.0
    return seconds


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
    elif bad := _control_problem("stop.metric", metric):
        problems.append(bad)
        ok = False
    if _number(target) is None:
        problems.append(f"stop.target: a finite number, got {target!r}")
        ok = False
    try:
        goal = MetricGoal(value.get("goal", "max"))
    except ValueError:
        problems.append(f"stop.goal: 'max' or 'min', got {value.get('goal')!r}")
        ok = False
    maximum = value.get("max_iterations")
    if (
        isinstance(maximum, bool)
        or not isinstance(maximum, int)
        or not 1 <= maximum <= MAX_ITERATIONS
    ):
        problems.append(
            f"stop.max_iterations: required integer from 1 to {MAX_ITERATIONS}, got {maximum!r}"
        )
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
        elif bad := _control_problem(f"env.{key}", str(val)):
            problems.append(bad)
        else:
            pairs.append((key, str(val)))
    return tuple(sorted(pairs))


def _working_dir(value: Any, base_dir: Path | None, problems: list[str]) -> str:
    if value is None:
        return str(base_dir) if base_dir is not None else ""
    if not isinstance(value, str) or not value:
        problems.append(f"working_dir: a path, got {value!r}")
        return ""
    if bad := _control_problem("working_dir", value):
        problems.append(bad)
        return ""
    path = Path(value)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    return str(path)


def _number(value: Any) -> float | None:
    """A finite int or float (not a boolean), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _mlfs(
    value: Any, processes: int, stopping: StoppingCriterion | None, problems: list[str]
) -> MlfsSpec:
    """The ``mlfs`` section; ``processes`` is 0 when the GPU fields are already wrong."""
    before = len(problems)
    value = open_section("mlfs", value, _MLFS_FIELDS, problems)
    if value is None:
        return MlfsSpec()
    urgency = _urgency(value.get("urgency"), problems)
    partitions = _partitions(value.get("partitions"), processes, problems)
    dependencies = _dependencies(value.get("dependencies"), len(partitions), problems)
    option = _stop_option(value.get("stop_option"), problems)
    may_switch = value.get("system_may_switch", False)
    if not isinstance(may_switch, bool):
        problems.append(f"mlfs.system_may_switch: true or false, got {may_switch!r}")
    required = _required_accuracy(value.get("required_accuracy"), option, stopping, problems)
    if len(problems) > before:
        return MlfsSpec()
    return MlfsSpec(
        urgency=urgency,
        partitions=partitions,
        dependencies=dependencies,
        stop_option=option,
        system_may_switch=may_switch,
        required_accuracy=required,
    )


def _urgency(value: Any, problems: list[str]) -> float:
    if value is None:
        return MlfsSpec.urgency
    urgency = _number(value)
    if urgency is None or not MIN_URGENCY <= urgency <= MAX_URGENCY:
        problems.append(
            f"mlfs.urgency: a number from {MIN_URGENCY:g} (least urgent) to {MAX_URGENCY:g} "
            f"(most urgent), got {value!r}"
        )
        return MlfsSpec.urgency
    return urgency


def _partitions(value: Any, processes: int, problems: list[str]) -> tuple[float, ...]:
    if value is None or value == []:
        return ()  # a plain data-parallel job
    if not isinstance(value, list):
        problems.append(f"mlfs.partitions: a list of positive shares summing to 1, got {value!r}")
        return ()
    shares = [_number(v) for v in value]
    bad = [i for i, share in enumerate(shares) if share is None or share <= 0]
    if bad:
        problems.append(
            f"mlfs.partitions[{bad[0]}]: a positive number (a share of the model), "
            f"got {value[bad[0]]!r}"
        )
        return ()
    total = math.fsum(s for s in shares if s is not None)
    if abs(total - 1.0) > _PARTITION_SUM_TOLERANCE:
        problems.append(f"mlfs.partitions: the shares must sum to 1, they sum to {total:g}")
        return ()
    if processes and len(shares) != processes:
        problems.append(
            f"mlfs.partitions: one per process, {processes} (gpus / gpus_per_process); "
            f"got {len(shares)}"
        )
        return ()
    return tuple(s for s in shares if s is not None)


def _dependencies(value: Any, partitions: int, problems: list[str]) -> tuple[tuple[int, int], ...]:
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        problems.append(f"mlfs.dependencies: a list of [parent, child] pairs, got {value!r}")
        return ()
    if not partitions:
        problems.append("mlfs.dependencies: needs mlfs.partitions (they are partition indices)")
        return ()
    edges: list[tuple[int, int]] = []
    for i, item in enumerate(value):
        where = f"mlfs.dependencies[{i}]"
        if isinstance(item, Mapping) and set(map(str, item)) == {"parent", "child"}:
            pair = [item["parent"], item["child"]]
        elif isinstance(item, list) and len(item) == 2:
            pair = item
        else:
            problems.append(f"{where}: a [parent, child] pair of partition indices, got {item!r}")
            return ()
        if any(isinstance(v, bool) or not isinstance(v, int) for v in pair):
            problems.append(f"{where}: partition indices are integers, got {item!r}")
            return ()
        parent, child = pair
        if not (0 <= parent < partitions and 0 <= child < partitions):
            problems.append(
                f"{where}: partition indices are 0 to {partitions - 1}, got [{parent}, {child}]"
            )
            return ()
        if parent == child:
            problems.append(f"{where}: partition {parent} cannot depend on itself")
            return ()
        if (parent, child) in edges:
            problems.append(f"{where}: [{parent}, {child}] is listed twice")
            return ()
        edges.append((parent, child))
    cycle = _find_cycle(edges, partitions)
    if cycle:
        problems.append(
            "mlfs.dependencies: must not form a cycle; found " + " -> ".join(str(n) for n in cycle)
        )
        return ()
    return tuple(edges)


def _find_cycle(edges: list[tuple[int, int]], nodes: int) -> list[int]:
    """A cycle of the directed graph as its nodes (first repeated at the end); [] if none."""
    children: dict[int, list[int]] = {n: [] for n in range(nodes)}
    for parent, child in edges:
        children[parent].append(child)
    colour = dict.fromkeys(range(nodes), 0)  # 0 unvisited, 1 on the path, 2 done
    for root in range(nodes):
        if colour[root]:
            continue
        path, stack = [root], [iter(children[root])]
        colour[root] = 1
        while stack:
            child = next(stack[-1], None)
            if child is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour[child] == 1:
                return [*path[path.index(child) :], child]
            elif colour[child] == 0:
                colour[child] = 1
                path.append(child)
                stack.append(iter(children[child]))
    return []


def _stop_option(value: Any, problems: list[str]) -> StopOption:
    if value is None:
        return StopOption.ITERATIONS
    try:
        return StopOption(value)
    except ValueError:
        valid = ", ".join(o.value for o in StopOption)
        problems.append(f"mlfs.stop_option: one of {valid}; got {value!r}")
        return StopOption.ITERATIONS


def _required_accuracy(
    value: Any, option: StopOption, stopping: StoppingCriterion | None, problems: list[str]
) -> float | None:
    if value is None:
        if option is StopOption.REQUIRED:
            problems.append(
                f"mlfs.required_accuracy: required with stop_option {StopOption.REQUIRED.value}"
            )
        return None
    required = _number(value)
    if required is None:
        problems.append(f"mlfs.required_accuracy: a finite number, got {value!r}")
        return None
    if isinstance(stopping, IterationStop) and not 0.0 <= required <= 1.0:
        problems.append(
            f"mlfs.required_accuracy: an accuracy between 0 and 1 (the job reports "
            f"'accuracy' as a fraction), got {value!r}"
        )
        return None
    return required
