"""The ``mlsched sweep`` command: a grid of (trace, cluster, density, policy) simulations.

Every cell is one simulation, run by :func:`simulator.cli.run_cell` (the code ``mlsched
simulate`` runs), in a process pool on this machine or as Ray tasks on a Ray cluster. Each
finished cell is written to ``OUT/<key>.json`` (atomically) as soon as it ends; a cell whose file
says it finished is skipped by the next run, so an interrupted sweep resumes where it stopped.
At the end ``OUT/table.md`` and ``OUT/table.csv`` hold one row per cell of the grid.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from simulator.cli import (
    CELL_DEFAULTS,
    UNISCHED_ABLATIONS,
    add_cell_options,
    job_model,
    parse_cluster,
    parse_policies,
    run_cell,
    warn_missing_table,
)
from simulator.engine import PRESETS
from simulator.jobmodel import UnknownModel
from simulator.report import HOURS, MINUTES, MISSING, PERCENT, PLAIN, Format, fmt_scaled, lookup

PROG = "mlsched sweep"
OK, FAILED = "ok", "failed"
TABLE_MD, TABLE_CSV = "table.md", "table.csv"
GRID_KEYS = ("traces", "clusters", "densities", "policies", "ablations", "options")

Record = dict[str, object]
OnDone = Callable[["Cell", Record], None]


class SweepError(ValueError):
    """Bad grid or options: the command exits with status 2."""


# --- The grid ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One simulation of the grid."""

    trace: Path  # absolute
    cluster: str
    density: float
    policy: str
    name: str = field(default="", compare=False)  # the trace's name in tables (trace_names)

    @property
    def trace_name(self) -> str:
        return self.name or self.trace.stem

    def label(self) -> str:
        return f"{self.trace_name} {self.cluster} density={self.density} {self.policy}"


@dataclass(frozen=True)
class Grid:
    """The axes of a sweep and the simulate options every cell shares."""

    traces: tuple[Path, ...]
    clusters: tuple[str, ...]
    densities: tuple[float, ...]
    policies: tuple[str, ...]
    options: dict[str, object] = field(default_factory=lambda: dict(CELL_DEFAULTS))

    def cells(self) -> list[Cell]:
        """Every cell, traces outermost and policies innermost."""
        names = trace_names(self.traces)
        axes = (self.traces, self.clusters, self.densities, self.policies)
        return [Cell(*values, name=names[values[0]]) for values in itertools.product(*axes)]


def trace_names(traces: Sequence[Path]) -> dict[Path, str]:
    """Each trace's file name without its suffix, led by as many of its folders as it takes to
    tell traces of the same name apart (``a/trace``, ``b/trace``)."""
    names = {}
    for trace in traces:
        parts = (*trace.parent.parts, trace.stem)
        for depth in range(1, len(parts) + 1):
            name = "/".join(parts[-depth:])
            others = [t for t in traces if t != trace]
            if all("/".join((*t.parent.parts, t.stem)[-depth:]) != name for t in others):
                break
        names[trace] = name
    return names


def jsonable(options: Mapping[str, object]) -> dict[str, object]:
    """``options`` with paths as strings, keys sorted."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in sorted(options.items())}


def cell_key(cell: Cell, options: Mapping[str, object]) -> str:
    """A file-name-safe key, stable across runs: readable parameters and a hash of all of them
    (the options included, so a sweep with other options never reuses these results)."""
    params = {
        "trace": str(cell.trace),
        "cluster": cell.cluster,
        "density": cell.density,
        "policy": cell.policy,
        "options": jsonable(options),
    }
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    parts = (cell.trace_name, cell.cluster, f"d{cell.density}", cell.policy, digest)
    return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", part) for part in parts)


def split_list(values: Iterable[object]) -> list[str]:
    """Items of ``values``, each a comma-separated string or a scalar, flattened."""
    return [p.strip() for v in values for p in str(v).split(",") if p.strip()]


def parse_densities(values: Iterable[object]) -> tuple[float, ...]:
    densities = []
    for text in split_list(values):
        try:
            density = float(text)
        except ValueError:
            raise SweepError(f"density {text!r} is not a number") from None
        if density <= 0:
            raise SweepError(f"density {text!r} must be positive")
        densities.append(density)
    return tuple(dict.fromkeys(densities))


def parse_clusters(values: Iterable[object]) -> tuple[str, ...]:
    clusters = [c.upper() if c.upper() in PRESETS else c.lower() for c in split_list(values)]
    for cluster in clusters:
        parse_cluster(cluster)  # raises ValueError naming the valid shapes
    return tuple(dict.fromkeys(clusters))


def grid_policies(values: Iterable[object], ablations: bool) -> tuple[str, ...]:
    policies = parse_policies(",".join(split_list(values)))
    if ablations:
        policies += [name for name in UNISCHED_ABLATIONS if name not in policies]
    return tuple(dict.fromkeys(policies))


def as_list(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else [value]


# --- Reading the grid: a YAML file and the command line ----------------------------------------


def cell_actions() -> dict[str, argparse.Action]:
    """The simulate options' argparse actions (types and choices) by dest."""
    return add_cell_options(argparse.ArgumentParser(add_help=False))


def option_value(action: argparse.Action, value: object, base: Path) -> object:
    """A grid file's value for ``action``, converted as the command line would convert it;
    relative paths are taken from ``base`` (the grid file's folder)."""
    if value is None:
        return None
    if action.nargs == 0:  # a store_true flag
        if not isinstance(value, bool):
            raise SweepError(f"option {action.dest}: expected true or false, got {value!r}")
        return value
    try:
        converted = action.type(value) if callable(action.type) else str(value)
    except (TypeError, ValueError):
        raise SweepError(f"option {action.dest}: bad value {value!r}") from None
    if action.choices is not None and converted not in action.choices:
        raise SweepError(f"option {action.dest}: {value!r} not one of {', '.join(action.choices)}")
    if isinstance(converted, Path) and not converted.is_absolute():
        converted = base / converted
    return converted


def read_grid_file(path: Path) -> dict[str, object]:
    """The grid file's keys (see docs/simulator.md), options converted; paths made absolute."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SweepError(f"--grid {path}: {exc}") from None
    if not isinstance(data, dict):
        raise SweepError(f"--grid {path}: expected a mapping with keys {', '.join(GRID_KEYS)}")
    unknown = sorted(set(data) - set(GRID_KEYS))
    if unknown:
        raise SweepError(f"--grid {path}: unknown keys {unknown}; valid: {', '.join(GRID_KEYS)}")
    base = path.resolve().parent
    grid = {k: as_list(v) for k, v in data.items() if k not in ("options", "ablations")}
    grid["traces"] = [(base / str(t)).resolve() for t in grid.get("traces", [])]
    grid["ablations"] = bool(data.get("ablations", False))
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise SweepError(f"--grid {path}: options must be a mapping")
    actions = cell_actions()
    grid["options"] = {}
    for name, value in options.items():
        dest = str(name).replace("-", "_")
        if dest not in actions:
            raise SweepError(f"--grid {path}: unknown option {name!r}; valid: {', '.join(actions)}")
        grid["options"][dest] = option_value(actions[dest], value, base)
    return grid


def build_grid(args: argparse.Namespace) -> Grid:
    """The grid from ``--grid`` and the command line: an axis given on the command line replaces
    the file's, an option given on the command line wins over the file's."""
    file = read_grid_file(args.grid) if args.grid else {}
    traces = [t.resolve() for t in args.trace] or file.get("traces") or []
    if not traces:
        raise SweepError("no trace: give --trace (repeatable) or traces: in --grid")
    options = dict(CELL_DEFAULTS)
    options.update(file.get("options", {}))
    options.update({k: getattr(args, k) for k in CELL_DEFAULTS if getattr(args, k) is not None})
    return Grid(
        traces=tuple(dict.fromkeys(Path(t) for t in traces)),
        clusters=parse_clusters(args.cluster or file.get("clusters") or ["C120"]),
        densities=parse_densities(args.density or file.get("densities") or [1.0]),
        policies=grid_policies(
            args.policy or file.get("policies") or ["fifo"],
            args.ablations or bool(file.get("ablations")),
        ),
        options=options,
    )


def cell_namespace(cell: Cell, options: Mapping[str, object]) -> argparse.Namespace:
    """The arguments ``mlsched simulate`` would have for this cell."""
    return argparse.Namespace(
        **options, trace=cell.trace, cluster=cell.cluster, density=cell.density
    )


def check_traces(grid: Grid) -> None:
    """Fail early on a trace or ``--model-info`` that is not there; print the missing-table
    warning once per trace, as ``mlsched simulate`` does."""
    for trace in grid.traces:
        if not trace.is_file():
            raise SweepError(f"trace {trace}: no such file")
        args = cell_namespace(Cell(trace, grid.clusters[0], 1.0, grid.policies[0]), grid.options)
        warn_missing_table(args, job_model(args), PROG)


# --- Running cells ----------------------------------------------------------------------------


def run_cell_task(cell: Cell, options: Mapping[str, object]) -> Record:
    """Run one cell; never raises: ``status`` ok with the metrics, or failed with the error.
    ``wall_s`` is the whole cell's wall time (loading the trace included)."""
    start = time.perf_counter()
    try:
        metrics = run_cell(cell_namespace(cell, options), cell.policy)
    except Exception as exc:
        return {
            "status": FAILED,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "wall_s": time.perf_counter() - start,
        }
    return {"status": OK, "metrics": metrics, "wall_s": time.perf_counter() - start}


def failure(exc: BaseException) -> Record:
    """The record of a cell whose task died outside :func:`run_cell_task` (a lost worker)."""
    return {"status": FAILED, "error": f"{type(exc).__name__}: {exc}", "wall_s": None}


def run_local(
    cells: Sequence[Cell], options: Mapping[str, object], workers: int, on_done: OnDone
) -> None:
    """Run ``cells`` in a pool of ``workers`` processes (in this process if one)."""
    if workers <= 1 or len(cells) <= 1:
        for cell in cells:
            on_done(cell, run_cell_task(cell, options))
        return
    with ProcessPoolExecutor(max_workers=min(workers, len(cells))) as pool:
        pending = {pool.submit(run_cell_task, cell, options): cell for cell in cells}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    cell = pending.pop(future)
                    exc = future.exception()
                    on_done(cell, failure(exc) if exc else future.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def run_ray(
    cells: Sequence[Cell], options: Mapping[str, object], address: str, on_done: OnDone
) -> None:
    """Run ``cells`` as Ray tasks (one CPU each) on the cluster at ``address`` ("auto": the
    one this machine belongs to); a Ray already initialised in this process is used as it is."""
    try:
        import ray
    except ImportError:
        raise SweepError("--ray needs Ray: pip install -c constraints.txt -e '.[sweep]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address)
        except Exception as exc:  # no cluster there, a version mismatch...
            raise SweepError(f"--ray {address}: {type(exc).__name__}: {exc}") from None
    try:
        task = ray.remote(num_cpus=1)(run_cell_task)
        pending = {task.remote(cell, options): cell for cell in cells}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            cell = pending.pop(done[0])
            try:
                record = ray.get(done[0])
            except Exception as exc:  # the task's worker or node died
                record = failure(exc)
            on_done(cell, record)
    finally:
        if started:
            ray.shutdown()


# --- Results on disk --------------------------------------------------------------------------


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def cell_record(cell: Cell, key: str, options: Mapping[str, object], result: Record) -> Record:
    """What ``OUT/<key>.json`` holds: the cell's parameters and its result."""
    return {
        "key": key,
        "trace": str(cell.trace),
        "trace_name": cell.trace_name,
        "cluster": cell.cluster,
        "density": cell.density,
        "policy": cell.policy,
        "options": jsonable(options),
        **result,
    }


def read_record(path: Path) -> Record | None:
    """A cell's record, or None if there is none (or it cannot be read)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def finished(path: Path) -> bool:
    """True if the cell's file records a finished run (failed cells run again)."""
    record = read_record(path)
    return record is not None and record.get("status") == OK


# --- The table --------------------------------------------------------------------------------

SECONDS = fmt_scaled(1, 1)

# (header, path into the record, format); metrics paths start with "metrics".
COLUMNS: list[tuple[str, tuple[str, ...], Format | None]] = [
    ("trace", ("trace_name",), None),
    ("cluster", ("cluster",), None),
    ("density", ("density",), str),
    ("policy", ("policy",), None),
    ("status", ("status",), None),
    ("jobs", ("metrics", "jobs_total"), str),
    ("R^slo (%)", ("metrics", "r_slo"), PERCENT),
    ("deadline miss (%)", ("metrics", "deadline_miss_rate"), PERCENT),
    ("BE JCT avg (min)", ("metrics", "jct_s", "best_effort", "avg"), MINUTES),
    ("BE JCT median (min)", ("metrics", "jct_s", "best_effort", "median"), MINUTES),
    ("preemptions / job", ("metrics", "preemptions_per_job"), PLAIN),
    ("makespan (h)", ("metrics", "makespan_s"), HOURS),
    ("cell wall (s)", ("wall_s",), SECONDS),
]
TEXT_COLUMNS = 5  # left-aligned in markdown


def table_rows(records: Sequence[Record]) -> list[list[str]]:
    """One row of formatted values per record; ``-`` where there is no value."""
    rows = []
    for record in records:
        row = []
        for _, path, fmt in COLUMNS:
            value = lookup(record, path)
            row.append(MISSING if value is None else (fmt or str)(value))
        rows.append(row)
    return rows


def markdown_table(records: Sequence[Record]) -> str:
    """The markdown table, then the error of each failed cell."""
    headers = [header for header, _, _ in COLUMNS]
    align = [":--" if i < TEXT_COLUMNS else "--:" for i in range(len(headers))]
    lines = ["| " + " | ".join(row) + " |" for row in [headers, align, *table_rows(records)]]
    failed = [r for r in records if r.get("status") != OK]
    if failed:
        lines += ["", "Failed cells:", ""]
        lines += [f"- `{r['key']}`: {r.get('error', 'not run')}" for r in failed]
    return "\n".join(lines) + "\n"


def csv_table(records: Sequence[Record]) -> str:
    """The same columns as CSV, with each cell's key and error."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([header for header, _, _ in COLUMNS] + ["key", "error"])
    for record, row in zip(records, table_rows(records), strict=True):
        writer.writerow([*row, record["key"], record.get("error", "")])
    return out.getvalue()


def write_tables(out: Path, records: Sequence[Record]) -> str:
    """Write ``table.md`` and ``table.csv`` into ``out``; returns the markdown."""
    markdown = markdown_table(records)
    write_atomic(out / TABLE_MD, markdown)
    write_atomic(out / TABLE_CSV, csv_table(records))
    return markdown


# --- The command ------------------------------------------------------------------------------


def add_sweep_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="simulate a grid of (trace, cluster, density, policy) cells in parallel",
        description="Run every (trace, cluster, density, policy) cell of a grid as "
        "`mlsched simulate` runs it, in parallel; finished cells are kept in --out and "
        "skipped when the sweep runs again. Writes OUT/table.md and OUT/table.csv.",
    )
    p.add_argument("--grid", type=Path, help="YAML grid file (docs/simulator.md)")
    p.add_argument("--trace", type=Path, action="append", default=[], help="(repeatable)")
    p.add_argument("--cluster", action="append", help="comma-separated, e.g. C120,C96 [C120]")
    p.add_argument("--density", action="append", help="comma-separated, e.g. 1.0,1.6 [1.0]")
    p.add_argument("--policy", action="append", help="comma-separated policies [fifo]")
    p.add_argument("--ablations", action="store_true", help="add " + ", ".join(UNISCHED_ABLATIONS))
    p.add_argument("--out", type=Path, required=True, help="results folder (resumable)")
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="processes on this machine [%(default)s]",
    )
    p.add_argument("--ray", metavar="ADDRESS", help="run cells on this Ray cluster ('auto')")
    add_cell_options(p, defaults=False)
    p.set_defaults(func=run_sweep)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run_sweep(args: argparse.Namespace) -> int:
    try:
        grid = build_grid(args)
        check_traces(grid)
    except (SweepError, UnknownModel, ValueError, OSError) as exc:
        say(f"{PROG}: {exc}")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    cells = grid.cells()
    keys = {cell: cell_key(cell, grid.options) for cell in cells}
    todo = []
    for cell in cells:
        if finished(args.out / f"{keys[cell]}.json"):
            say(f"skipped (finished): {cell.label()}")
        else:
            todo.append(cell)
    where = f"Ray at {args.ray}" if args.ray else f"{min(args.workers, len(todo))} worker(s)"
    say(f"{len(cells)} cells: {len(cells) - len(todo)} finished before, {len(todo)} to run")
    if todo:
        say(f"running on {where}")
    done_count = 0

    def on_done(cell: Cell, result: Record) -> None:
        nonlocal done_count
        done_count += 1
        record = cell_record(cell, keys[cell], grid.options, result)
        write_atomic(args.out / f"{keys[cell]}.json", json.dumps(record, indent=2) + "\n")
        status = (
            f"{result['wall_s']:.1f} s" if result["status"] == OK else f"FAILED: {result['error']}"
        )
        say(f"[{done_count}/{len(todo)}] {cell.label()}: {status}")

    start = time.perf_counter()
    try:
        if args.ray and todo:
            run_ray(todo, grid.options, args.ray, on_done)
        elif todo:
            run_local(todo, grid.options, args.workers, on_done)
    except SweepError as exc:
        say(f"{PROG}: {exc}")
        return 2
    except KeyboardInterrupt:
        say(f"{PROG}: interrupted after {done_count} cell(s); run it again to resume")
        return 130
    records = [
        read_record(args.out / f"{keys[c]}.json") or cell_record(c, keys[c], grid.options, {})
        for c in cells
    ]
    print(write_tables(args.out, records), end="")
    failed = sum(r.get("status") != OK for r in records)
    say(
        f"{len(todo)} cell(s) run in {time.perf_counter() - start:.1f} s; {failed} failed; "
        f"tables: {args.out / TABLE_MD}, {args.out / TABLE_CSV}"
    )
    return 1 if failed else 0
