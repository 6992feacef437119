"""Reading job traces into :class:`~simulator.types.TraceJob` lists.

Two readers, both returning jobs sorted by submission time (ties keep file order) and both
raising :class:`TraceError` -- naming the file, the 1-based line (the header is line 1) and the
column -- on the first malformed row:

``load_philly(path)``
    The Chronus Philly-derived format (ChronusArtifact ``code/data/exp/trace_job_Philly_*.csv``)::

        job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,
        expect_time_list,expect_value_list,best_effort,job_type

    Times are in minutes and become seconds. ``expect_time_list`` / ``expect_value_list`` are
    '-'-separated deadlines, in minutes *after submission* (in the shared MIX files every first
    deadline is 1.1-5x the duration), and their rewards. ``job_type`` ``strict`` / ``soft`` /
    ``best`` gives the class; best-effort jobs get no deadlines (their files repeat the
    submission time as ``expect_time_list``). ``best_effort`` must agree with ``job_type``;
    ``interval`` is not used. Model names are not checked here (the job model does that).

``load_csv(path, mapping)``
    Any CSV with a header, its columns named by a :class:`ColumnMapping`:

    ============  ========  ==========================================================
    key           required  column content
    ============  ========  ==========================================================
    submit        yes       submission time (``time_unit``), >= 0
    duration      yes       run time at ``gpus`` GPUs on one node (``time_unit``), > 0
    gpus          yes       requested GPU count, a positive integer
    model         no        model name (default "")
    deadline      no        deadline(s) after submission (``time_unit``); several are
                            '-'-separated and earn 100, 80, 50, 20 (UniSched §IV-B);
                            empty: none
    user          no        user name (default "")
    id            no        job id (default: the data-row index "0", "1", ...)
    job_class     no        strict / soft / best (or strict-slo, soft-slo, best-effort),
                            any case; default: by the row's deadlines, none: best-effort,
                            one: strict, several: soft
    time_unit     no        "s" (default), "m" or "h": unit of submit, duration, deadline
    ============  ========  ==========================================================

    On the command line the mapping is written ``key=value`` pairs separated by commas, e.g.
    ``--columns submit=time,duration=runtime,gpus=num_gpus,time_unit=m``
    (:meth:`ColumnMapping.parse`).
"""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from mlsched.model import Deadline, JobClass
from simulator.types import TraceJob

PHILLY_COLUMNS = (
    "job_id",
    "user",
    "num_gpu",
    "submit_time",
    "iterations",
    "model_name",
    "duration",
    "interval",
    "expect_time_list",
    "expect_value_list",
    "best_effort",
    "job_type",
)

TIME_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}

# UniSched §IV-B: a soft-SLO job's deadlines earn 100 (the first, like a strict deadline), then
# 80, 50 and 20; Chronus writes the same values divided by ten (10-8-5-2).
DEFAULT_REWARDS = (100.0, 80.0, 50.0, 20.0)

_PHILLY_CLASSES = {
    "strict": JobClass.STRICT_SLO,
    "soft": JobClass.SOFT_SLO,
    "best": JobClass.BEST_EFFORT,
}
_CLASS_NAMES = {
    "strict": JobClass.STRICT_SLO,
    "strict-slo": JobClass.STRICT_SLO,
    "soft": JobClass.SOFT_SLO,
    "soft-slo": JobClass.SOFT_SLO,
    "best": JobClass.BEST_EFFORT,
    "best-effort": JobClass.BEST_EFFORT,
}


class TraceError(ValueError):
    """A malformed trace: ``<file>:<line>: column '<name>': <what is wrong>``."""

    def __init__(self, path: str | Path, line: int, column: str | None, message: str):
        self.path = str(path)
        self.line = line
        self.column = column
        where = f"{self.path}:{line}: "
        if column is not None:
            where += f"column {column!r}: "
        super().__init__(where + message)


# --- cell parsers: each returns the value or raises ValueError with the explanation ---------


def _positive_int(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise ValueError(f"expected a positive integer, got {text!r}")
    return int(value)


def _nonnegative_int(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0 and value == int(value)):
        raise ValueError(f"expected a non-negative integer, got {text!r}")
    return int(value)


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"expected a non-negative number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"expected a positive number, got {text!r}")
    return value


def _number_list(text: str) -> list[float]:
    try:
        values = [float(p) for p in text.split("-")]
    except ValueError:
        values = [math.nan]
    if not (min(values) > 0 and math.isfinite(sum(values))):  # (sum catches nan and inf)
        raise ValueError(f"expected positive numbers separated by '-', got {text!r}")
    return values


class _Rows:
    """CSV rows with a checked header; ``cell`` converts one cell or raises a TraceError."""

    def __init__(self, path: Path, required: tuple[str, ...], f):
        self.path = path
        self._reader = csv.reader(f)
        header = next(self._reader, None)
        if header is None:
            raise TraceError(path, 1, None, "empty file, expected a header")
        self.header = [h.strip() for h in header]
        missing = [c for c in required if c not in self.header]
        if missing:
            raise TraceError(
                path,
                1,
                None,
                f"missing column(s) {', '.join(map(repr, missing))}; "
                f"header has {', '.join(map(repr, self.header))}",
            )
        self.index = {name: i for i, name in enumerate(self.header)}
        self.line = 1

    def __iter__(self) -> Iterator[list[str]]:
        width = len(self.header)
        for row in self._reader:
            self.line = self._reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if len(row) < width:
                raise TraceError(
                    self.path,
                    self.line,
                    self.header[len(row)],
                    f"missing (row has {len(row)} fields, header has {width})",
                )
            if len(row) > width:
                raise TraceError(
                    self.path, self.line, None, f"row has {len(row)} fields, header has {width}"
                )
            yield row

    def cell(
        self,
        row: list[str],
        column: str,
        parse: Callable[[str], object],
        whole: str | None = None,
    ):
        """``parse`` the cell of ``column``; with ``whole``, ``row`` is a one-item list holding
        a part of the cell, and an error quotes the ``whole`` cell."""
        text = (row[0] if whole is not None else row[self.index[column]]).strip()
        try:
            return parse(text)
        except ValueError as e:
            if whole is not None:
                e = ValueError(f"{e} in {whole!r}")
            raise TraceError(self.path, self.line, column, str(e)) from None

    def fail(self, column: str | None, message: str) -> TraceError:
        return TraceError(self.path, self.line, column, message)


def _check_unique(rows: _Rows, seen: dict[str, int], job_id: str, column: str) -> None:
    if not job_id:
        raise rows.fail(column, "empty job id")
    if job_id in seen:
        raise rows.fail(column, f"duplicate job id {job_id!r} (first on line {seen[job_id]})")
    seen[job_id] = rows.line


def load_philly(
    path: str | Path,
    *,
    zero_gpu: Literal["skip", "one", "error"] = "skip",
    reward_scale: float = 10.0,
) -> list[TraceJob]:
    """Read a Chronus Philly-derived trace (format in the module docstring).

    ``zero_gpu``: what to do with ``num_gpu`` 0 rows (CPU-only Philly jobs; 184 in MIX1, 194 in
    MIX2): ``"skip"`` them as the Chronus artifact's loader does (the default), count them as
    ``"one"``-GPU jobs, or treat them as an ``"error"``.
    ``reward_scale`` multiplies the rewards: Chronus writes 10 / 8-5-2, UniSched's 100 / 80,
    50, 20 (§IV-B, ``W_max = 100`` in Eq. 15), hence 10 by default.
    """
    if zero_gpu not in ("skip", "one", "error"):
        raise ValueError(f"zero_gpu must be 'skip', 'one' or 'error', not {zero_gpu!r}")
    path = Path(path)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    inf = math.inf
    best, strict = JobClass.BEST_EFFORT, JobClass.STRICT_SLO
    cache: dict[tuple[str, str], Deadline] = {}  # deadlines repeat: share the objects
    gpu_parser = _positive_int if zero_gpu == "error" else _nonnegative_int
    with path.open(newline="") as f:
        rows = _Rows(path, PHILLY_COLUMNS, f)
        ix = rows.index
        i_id, i_user, i_gpu = ix["job_id"], ix["user"], ix["num_gpu"]
        i_submit, i_iter, i_model = ix["submit_time"], ix["iterations"], ix["model_name"]
        i_dur = ix["duration"]
        i_flag, i_type = ix["best_effort"], ix["job_type"]
        # Fast paths parse the common well-formed cell directly; anything unusual goes through
        # the validating parsers, which produce the error message.
        for row in rows:
            job_id = row[i_id].strip()
            _check_unique(rows, seen, job_id, "job_id")
            try:
                gpus = int(row[i_gpu])
            except ValueError:
                gpus = -1
            if gpus < (1 if zero_gpu == "error" else 0):
                gpus = rows.cell(row, "num_gpu", gpu_parser)
            if gpus == 0:
                if zero_gpu == "skip":
                    continue
                gpus = 1
            try:
                submit_min = float(row[i_submit])
            except ValueError:
                submit_min = -1.0
            if not 0 <= submit_min < inf:
                submit_min = rows.cell(row, "submit_time", _nonnegative_float)
            try:
                duration_min = float(row[i_dur])
            except ValueError:
                duration_min = -1.0
            if not 0 < duration_min < inf:
                duration_min = rows.cell(row, "duration", _positive_float)
            try:
                iterations = int(row[i_iter])
            except ValueError:
                iterations = -1
            if iterations < 0:
                iterations = rows.cell(row, "iterations", _nonnegative_int)
            kind = row[i_type].strip()
            job_class = _PHILLY_CLASSES.get(kind)
            if job_class is None:
                raise rows.fail(
                    "job_type", f"expected one of 'strict', 'soft', 'best', got {kind!r}"
                )
            flag = row[i_flag].strip()
            if flag != ("1" if job_class is best else "0"):
                raise rows.fail(
                    "best_effort",
                    f"expected {int(job_class is best)} for job_type {kind!r}, got {flag!r}",
                )
            deadlines: tuple[Deadline, ...] = ()
            if job_class is not best:
                deadlines = _philly_deadlines(rows, row, cache, reward_scale)
                if job_class is strict and len(deadlines) != 1:
                    raise rows.fail(
                        "expect_time_list", f"a strict job has one deadline, got {len(deadlines)}"
                    )
            jobs.append(
                TraceJob(
                    job_id,
                    row[i_user].strip(),
                    submit_min * 60.0,
                    duration_min * 60.0,
                    gpus,
                    row[i_model].strip(),
                    iterations,
                    job_class,
                    deadlines,
                )
            )
    jobs.sort(key=lambda j: j.submit_s)
    return jobs


def _philly_deadlines(
    rows: _Rows, row: list[str], cache: dict[tuple[str, str], Deadline], reward_scale: float
) -> tuple[Deadline, ...]:
    """The deadlines of a Chronus row: minutes after submission, '-'-separated, with rewards."""
    times_text = row[rows.index["expect_time_list"]]
    values_text = row[rows.index["expect_value_list"]]
    times, values = times_text.split("-"), values_text.split("-")
    if len(times) != len(values):
        raise rows.fail(
            "expect_value_list", f"{len(times)} deadline(s) but {len(values)} reward(s)"
        )
    deadlines = []
    for t, v in zip(times, values, strict=True):
        d = cache.get((t, v))
        if d is None:
            minutes = rows.cell([t], "expect_time_list", _positive_float, times_text)
            reward = rows.cell([v], "expect_value_list", _positive_float, values_text)
            d = cache[(t, v)] = Deadline(minutes * 60.0, reward * reward_scale)
        if deadlines and d.seconds_after_submit <= deadlines[-1].seconds_after_submit:
            raise rows.fail("expect_time_list", f"deadlines must increase, got {times_text!r}")
        deadlines.append(d)
    return tuple(deadlines)


def _deadlines(
    rows: _Rows,
    column: str,
    times: list[float],
    values: list[float],
    unit_s: float,
    reward_scale: float,
) -> tuple[Deadline, ...]:
    """Deadlines from times (in units of ``unit_s`` seconds) and rewards; ``column`` names the
    column of the times, for errors."""
    if len(times) != len(values):
        raise rows.fail(column, f"{len(times)} deadline(s) but {len(values)} reward(s)")
    if len(times) == 1:
        return (Deadline(times[0] * unit_s, values[0] * reward_scale),)
    if any(b <= a for a, b in itertools.pairwise(times)):
        raise rows.fail(column, f"deadlines must increase, got {times}")
    return tuple(
        [Deadline(t * unit_s, v * reward_scale) for t, v in zip(times, values, strict=True)]
    )


@dataclass(frozen=True)
class ColumnMapping:
    """Which columns of a generic CSV hold what (see the module docstring)."""

    submit: str
    duration: str
    gpus: str
    model: str | None = None
    deadline: str | None = None
    user: str | None = None
    id: str | None = None
    job_class: str | None = None
    time_unit: str = "s"

    def __post_init__(self) -> None:
        if self.time_unit not in TIME_UNITS:
            raise ValueError(
                f"time_unit must be one of {', '.join(map(repr, TIME_UNITS))}, "
                f"not {self.time_unit!r}"
            )

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def parse(cls, text: str) -> ColumnMapping:
        """Parse ``key=value,key=value,...``; ``submit``, ``duration`` and ``gpus`` required."""
        valid = cls.keys()
        hint = f"valid keys: {', '.join(valid)}"
        values: dict[str, str] = {}
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep:
                raise ValueError(f"expected key=value, got {part!r} ({hint})")
            if key not in valid:
                raise ValueError(f"unknown key {key!r} ({hint})")
            if key in values:
                raise ValueError(f"key {key!r} given twice")
            if not value:
                raise ValueError(f"empty value for key {key!r}")
            values[key] = value
        missing = [k for k in ("submit", "duration", "gpus") if k not in values]
        if missing:
            raise ValueError(f"missing required key(s) {', '.join(missing)} ({hint})")
        return cls(**values)

    def columns(self) -> dict[str, str]:
        """Role -> column name, for the columns that are mapped."""
        return {
            k: getattr(self, k)
            for k in self.keys()
            if k != "time_unit" and getattr(self, k) is not None
        }


def load_csv(path: str | Path, mapping: ColumnMapping) -> list[TraceJob]:
    """Read a generic CSV trace whose columns are named by ``mapping``."""
    path = Path(path)
    unit = TIME_UNITS[mapping.time_unit]
    cols = mapping.columns()
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    with path.open(newline="") as f:
        rows = _Rows(path, tuple(dict.fromkeys(cols.values())), f)
        for ordinal, row in enumerate(rows):

            def text(role: str, row: list[str] = row) -> str:
                return row[rows.index[cols[role]]].strip() if role in cols else ""

            if "id" in cols:
                job_id = text("id")
                _check_unique(rows, seen, job_id, cols["id"])
            else:
                job_id = str(ordinal)
            submit_s = rows.cell(row, cols["submit"], _nonnegative_float) * unit
            duration_s = rows.cell(row, cols["duration"], _positive_float) * unit
            gpus = rows.cell(row, cols["gpus"], _positive_int)
            deadlines: tuple[Deadline, ...] = ()
            if text("deadline"):
                times = rows.cell(row, cols["deadline"], _number_list)
                if len(times) > len(DEFAULT_REWARDS):
                    raise rows.fail(cols["deadline"], f"at most {len(DEFAULT_REWARDS)} deadlines")
                deadlines = _deadlines(
                    rows, cols["deadline"], times, list(DEFAULT_REWARDS[: len(times)]), unit, 1.0
                )
            if "job_class" in cols:
                name = text("job_class").lower()
                if name not in _CLASS_NAMES:
                    raise rows.fail(
                        cols["job_class"],
                        f"expected one of {', '.join(map(repr, _CLASS_NAMES))}, got {name!r}",
                    )
                job_class = _CLASS_NAMES[name]
            else:
                job_class = (
                    JobClass.BEST_EFFORT
                    if not deadlines
                    else JobClass.STRICT_SLO
                    if len(deadlines) == 1
                    else JobClass.SOFT_SLO
                )
            if job_class is JobClass.BEST_EFFORT:
                deadlines = ()
            elif not deadlines:
                column = cols.get("deadline", cols["job_class"])
                raise rows.fail(column, f"a {job_class.value} job needs a deadline")
            elif job_class is JobClass.STRICT_SLO and len(deadlines) != 1:
                raise rows.fail(
                    cols["deadline"], f"a strict job has one deadline, got {len(deadlines)}"
                )
            jobs.append(
                TraceJob(
                    id=job_id,
                    user=text("user"),
                    submit_s=submit_s,
                    duration_s=duration_s,
                    gpus=gpus,
                    model=text("model"),
                    job_class=job_class,
                    deadlines=deadlines,
                )
            )
    jobs.sort(key=lambda j: j.submit_s)
    return jobs
