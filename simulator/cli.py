"""The ``mlsched simulate`` command: run policies over a trace and report their metrics."""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from controller.policy import available_policies, make_policy
from controller.policy.mlfs.config import MlfsConfig, add_mlfs_param_option, parse_mlfs_params
from controller.policy.names import RL_POLICIES
from mlsched.gctune import tune_for_cycles
from mlsched.jsonflag import add_json_options
from mlsched.progress import Progress
from simulator.elastic import LOADERS, ElasticJobModel, data_folder
from simulator.engine import PRESETS, ClusterShape, SimConfig, Simulation
from simulator.interference import Interference, load_interference
from simulator.jobmodel import TraceJobModel, UnknownModel
from simulator.metrics import compute_metrics
from simulator.report import (
    SPEED_MODEL_KEY,
    format_table,
    json_text,
    plot,
    underload_warning,
    write_json,
)
from simulator.rlsetting import setting_differences
from simulator.trace import ColumnMapping, TraceError, load_csv, load_philly
from simulator.types import SimResult, TraceJob
from simulator.workload import (
    MODEL_PARALLEL_FRACTION,
    assign_mlfs_features,
    assign_slo,
    assign_stopping,
    scale_density,
)


def add_simulate_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("simulate", help="simulate policies over a job trace")
    p.add_argument("--trace", type=Path, required=True, help="trace file (CSV)")
    p.add_argument(
        "--policy",
        default="fifo",
        help=f"comma-separated policies: {', '.join(available_policies())}",
    )
    p.add_argument(
        "--ablations",
        action="store_true",
        help="also run UniSched's ablations: " + ", ".join(UNISCHED_ABLATIONS),
    )
    p.add_argument(
        "--cluster",
        default="C120",
        help="C120 (120x8 GPUs), C96 (96x8) or NODESxGPUS [%(default)s]",
    )
    p.add_argument(
        "--density",
        type=float,
        default=1.0,
        help="job density scaling, 0.8-1.6 as in UniSched Fig. 6c [%(default)s]",
    )
    add_cell_options(p)
    p.add_argument(
        "--interference",
        nargs="?",
        const="default",
        metavar="PATH",
        help="slow jobs by the CPU, memory, bandwidth and GPU load of their servers' other jobs "
        "(simulator/interference.py); PATH: curves to use instead of the fitted default. "
        "Off by default (the UniSched/Chronus comparisons assume none)",
    )
    add_mlfs_param_option(p)
    p.add_argument(
        "--mlfs-model",
        type=Path,
        metavar="PATH",
        help="the network mlf-rl and mlfs load (`mlsched mlfs-train --out`) instead of the "
        "shipped one, which was trained on 10x8 GPUs with MLFS features (docs/mlfs.md)",
    )
    add_json_options(p, "the metrics")
    p.add_argument("--plot", type=Path, help="write a PNG (JCT CDF, utilisation) here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)


# The options of one simulation besides its trace, cluster, density and policy, with their
# defaults: `mlsched simulate` and `mlsched sweep` (simulator/sweep.py) share them.
CELL_DEFAULTS: dict[str, object] = {
    "format": "philly",
    "columns": None,
    "zero_gpu": "one",
    "model_info": None,
    "default_model": None,
    "lease_seconds": 300.0,
    "cycle_seconds": 60.0,
    "assign_slo": None,
    "performance_fraction": 0.0,
    "mlfs_features": False,
    "mlfs_model_parallel": MODEL_PARALLEL_FRACTION,
    "seed": 0,
    "limit": None,
    "check_invariants": False,
}


def add_cell_options(
    p: argparse.ArgumentParser, defaults: bool = True
) -> dict[str, argparse.Action]:
    """Add the :data:`CELL_DEFAULTS` options to ``p``; with ``defaults=False`` an option not
    given is None (so a caller can tell it was not given). Returns the actions by dest."""
    actions: dict[str, argparse.Action] = {}

    def option(flag: str, **kwargs: object) -> None:
        dest = flag.removeprefix("--").replace("-", "_")
        help_text = str(kwargs.pop("help", ""))
        if not defaults:
            help_text = help_text.replace("%(default)s", str(CELL_DEFAULTS[dest]))
        default = CELL_DEFAULTS[dest] if defaults else None
        actions[dest] = p.add_argument(flag, default=default, help=help_text, **kwargs)

    option(
        "--format",
        choices=("philly", "csv", "ones", "pollux"),
        help="philly: the Chronus Philly-derived format; csv: generic; ones: the ONES trace; "
        "pollux: a Pollux workload (both elastic, with the measured tables of the data folder "
        "above them) [%(default)s]",
    )
    option(
        "--columns",
        help="generic CSV column mapping, e.g. "
        "submit=submit_time,duration=duration,gpus=num_gpu,time_unit=m",
    )
    option(
        "--zero-gpu",
        choices=("one", "skip", "error"),
        help="Philly rows asking for 0 GPUs (CPU jobs) [%(default)s]",
    )
    option(
        "--model-info",
        type=Path,
        help="per-model placement speeds (default: model_info.json beside the trace)",
    )
    option(
        "--default-model",
        help="model-table row for jobs whose model the table lacks (generic traces)",
    )
    option("--lease-seconds", type=float, help="[%(default)s]")
    option("--cycle-seconds", type=float, help="least time between triggered cycles [%(default)s]")
    option(
        "--assign-slo",
        metavar="STRICT,SOFT",
        help="give fractions of jobs strict/soft SLOs (UniSched §IV-B), e.g. 0.3,0.3",
    )
    option(
        "--performance-fraction",
        type=float,
        help="fraction of jobs that stop at a target metric (paper: 0.2)",
    )
    option(
        "--mlfs-features",
        action="store_true",
        help="give jobs MLFS features: urgency, model-parallel graphs, required accuracy, "
        "per-task CPU/memory/bandwidth load (server overload) and communication volumes",
    )
    option(
        "--mlfs-model-parallel",
        type=float,
        help="with --mlfs-features: fraction of multi-GPU jobs that are model-parallel "
        "[%(default)s]",
    )
    option("--seed", type=int)
    option("--limit", type=int, help="only the first N jobs")
    option(
        "--check-invariants",
        action="store_true",
        help="verify the simulator's invariants every cycle (slower)",
    )
    return actions


def parse_cluster(text: str) -> ClusterShape:
    if text.upper() in PRESETS:
        return PRESETS[text.upper()]
    nodes, sep, gpus = text.lower().partition("x")
    if sep and nodes.isdigit() and gpus.isdigit() and int(nodes) > 0 and int(gpus) > 0:
        return ClusterShape(int(nodes), int(gpus))
    raise ValueError(f"unknown cluster {text!r}; use {', '.join(PRESETS)} or NODESxGPUS")


# UniSched without its SR-aware estimator, without its iteration estimator, with Chronus'
# round-up placement, with a static profiler, with a feasibility-only objective; and the
# oracle bound (docs/unisched.md).
UNISCHED_ABLATIONS = (
    "unisched-no-sr",
    "unisched-no-iter",
    "unisched-roundup",
    "unisched-static-profiler",
    "unisched-feasible",
    "oracle",
)


def parse_policies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in available_policies()]
    if unknown or not names:
        raise ValueError(
            f"unknown policy {', '.join(unknown) or '(none)'}; "
            f"valid: {', '.join(available_policies())}"
        )
    return names


def load_workload(args: argparse.Namespace, model: TraceJobModel | None = None) -> list[TraceJob]:
    """The trace with the workload steps the flags ask for; ``model`` gives the accuracies
    the MLFS required accuracy is drawn from (none without it)."""
    if args.format == "philly":
        jobs = load_philly(args.trace, zero_gpu=args.zero_gpu)
    elif args.format in LOADERS:
        jobs = LOADERS[args.format](args.trace, data_folder(args.trace))
    else:
        if not args.columns:
            raise ValueError(
                f"--columns is required for --format csv; keys: {', '.join(ColumnMapping.keys())}"
            )
        jobs = load_csv(args.trace, ColumnMapping.parse(args.columns))
    if args.limit:
        jobs = jobs[: args.limit]
    rng = random.Random(args.seed)
    if args.density != 1.0:
        jobs = scale_density(jobs, args.density, rng)
    if args.assign_slo:
        strict, _, soft = args.assign_slo.partition(",")
        jobs = assign_slo(jobs, rng, float(strict), float(soft or 0))
    if args.performance_fraction:
        jobs = assign_stopping(jobs, rng, args.performance_fraction)
    if getattr(args, "mlfs_features", False):
        jobs = assign_mlfs_features(
            jobs,
            rng,
            model_parallel_fraction=args.mlfs_model_parallel,
            accuracy_at=None if model is None else model.metric_at,
        )
    return jobs


MODEL_INFO_NAME = "model_info.json"


def model_info_path(args: argparse.Namespace) -> Path | None:
    """The scaling table a run uses, decided here for every entry point: ``--model-info``
    (an error unless it is a file), else for a Philly trace the ``model_info.json`` beside it
    if there is one; None: UniSched Eq. 2 with default costs."""
    if args.model_info is not None:
        if not args.model_info.is_file():
            problem = "not a file" if args.model_info.exists() else "no such file"
            raise ValueError(f"--model-info {args.model_info}: {problem}")
        return args.model_info
    beside = args.trace.with_name(MODEL_INFO_NAME)
    return beside if args.format == "philly" and beside.is_file() else None


def job_model(args: argparse.Namespace) -> TraceJobModel:
    """The job model with the table :func:`model_info_path` picks; its ``speed_model`` says
    which speed model that is."""
    if args.format in LOADERS:
        tables = data_folder(args.trace) / "pollux" / "traces"
        return ElasticJobModel(source=str(tables), seed=args.seed)
    path = model_info_path(args)
    if path is None:
        return TraceJobModel(seed=args.seed)
    return TraceJobModel.from_model_info(path, seed=args.seed, default_model=args.default_model)


def missing_table_warning(args: argparse.Namespace, model: TraceJobModel) -> str | None:
    """For a Philly trace run without a scaling table, a warning naming the file looked for
    and ``--model-info``; None otherwise (generic CSV traces only use a table when given one)."""
    if args.format != "philly" or model.speed_model.kind == "table":
        return None
    expected = args.trace.with_name(MODEL_INFO_NAME).resolve()
    return (
        f"warning: no model_info table for this Philly trace ({expected} does not exist): "
        f"job speeds use {model.speed_model.describe()}; put the trace's {MODEL_INFO_NAME} "
        "there or pass --model-info PATH"
    )


def warn_missing_table(args: argparse.Namespace, model: TraceJobModel, prog: str) -> None:
    """Print :func:`missing_table_warning` on stderr as ``<prog>: warning: ...``, if any."""
    warning = missing_table_warning(args, model)
    if warning is not None:
        print(f"{prog}: {warning}", file=sys.stderr)


def philly_job_model(trace: Path, prog: str) -> TraceJobModel:
    """The job model ``mlsched simulate`` picks for a Philly trace with default options (the
    table beside it, else Eq. 2 defaults with the warning): for scripts that load traces
    themselves."""
    args = argparse.Namespace(
        trace=trace, model_info=None, format="philly", seed=0, default_model=None
    )
    model = job_model(args)
    warn_missing_table(args, model, prog)
    return model


def trace_script_args(description: str, default_trace: Path) -> argparse.Namespace | None:
    """``--trace``, ``--cluster`` and ``--limit`` for scripts that run one Philly trace (the
    benchmarks); None, with the reason on stderr, when the trace does not exist."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trace", type=Path, default=default_trace)
    parser.add_argument("--cluster", default="C120")
    parser.add_argument("--limit", type=int, help="only the first N jobs")
    args = parser.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (set MLSCHED_DATA or pass --trace)", file=sys.stderr)
        return None
    return args


@dataclass(frozen=True)
class PreparedRun:
    """What every policy of one (trace, cluster, density) run shares."""

    jobs: list[TraceJob]
    model: TraceJobModel
    shape: ClusterShape
    config: SimConfig
    mlfs: MlfsConfig | None = None  # MLF-H / MLF-RL / MLFS parameters; None: the paper's
    mlfs_model: Path | None = None  # MLF-RL's network file; None: the shipped one


def prepare_run(args: argparse.Namespace) -> PreparedRun:
    """The cluster, job model, workload and engine settings ``args`` asks for; raises
    TraceError, UnknownModel, ValueError or OSError on bad input."""
    shape = parse_cluster(args.cluster)
    mlfs_model = getattr(args, "mlfs_model", None)
    if mlfs_model is not None and not Path(mlfs_model).is_file():
        raise ValueError(f"--mlfs-model: no such file: {mlfs_model}")
    model = job_model(args)
    jobs = load_workload(args, model)
    model.check_jobs(jobs)
    config = SimConfig(
        lease_s=args.lease_seconds,
        cycle_s=args.cycle_seconds,
        check_invariants=args.check_invariants,
        interference=interference_model(getattr(args, "interference", None)),
    )
    params = getattr(args, "mlfs_param", None)
    return PreparedRun(
        jobs,
        model,
        shape,
        config,
        parse_mlfs_params(params) if params else None,
        mlfs_model,
    )


def mlfs_model_warning(
    run: PreparedRun, policies: Sequence[str], mlfs_features: bool
) -> str | None:
    """A warning when ``policies`` run an MLF-RL network (mlf-rl, mlfs) trained for another
    setting than this run's (``simulator.rlsetting``); None otherwise. Raises ModelError for
    a model file that cannot be loaded."""
    running = [p for p in policies if p in RL_POLICIES]
    if not running:
        return None
    from controller.policy.mlfs.rl.network import load_model  # imports torch

    _, meta = load_model(run.mlfs_model)
    differences = _model_differences(meta, run, mlfs_features)
    if not differences:
        return None
    which = "the shipped model" if run.mlfs_model is None else f"model {run.mlfs_model}"
    verb = "runs" if len(running) == 1 else "run"
    return (
        f"{' and '.join(running)} {verb} {which}, {'; '.join(differences)}: it may order jobs "
        "worse than MLF-H here; `mlsched mlfs-train` makes one for this setting and "
        "--mlfs-model runs it (docs/mlfs.md, *A model per setting*)"
    )


def with_setting_model(
    run: PreparedRun, policies: Sequence[str], mlfs_features: bool
) -> PreparedRun:
    """``run`` with the shipped MLF-RL model trained for exactly its setting (cluster, MLFS
    features, parameters) when ``policies`` run an MLF-RL network and no ``--mlfs-model`` was
    given; else ``run`` as it is (the default model, or the file asked for). Raises ModelError
    for a shipped file that cannot be loaded."""
    if run.mlfs_model is not None or not any(p in RL_POLICIES for p in policies):
        return run
    from controller.policy.mlfs.rl.network import SETTING_MODEL_PATHS, load_model  # torch

    for path in SETTING_MODEL_PATHS:
        _, meta = load_model(path)
        if not _model_differences(meta, run, mlfs_features):
            return replace(run, mlfs_model=path)
    return run


def _model_differences(meta: dict, run: PreparedRun, mlfs_features: bool) -> list[str]:
    try:
        trained_shape = parse_cluster(str(meta["cluster"])) if "cluster" in meta else None
    except ValueError:
        trained_shape = None
    return setting_differences(meta, run.shape, trained_shape, mlfs_features, run.mlfs)


def interference_model(option: str | None) -> Interference | None:
    """``--interference``: None when not given, the fitted default for ``"default"``, else the
    curves in the file named."""
    if option is None:
        return None
    return load_interference(None if option == "default" else option)


def run_policy(
    run: PreparedRun, policy: str, progress: Callable[[int, int], None] | None = None
) -> SimResult:
    """Simulate ``policy`` over the prepared run."""
    return Simulation(
        run.jobs,
        make_policy(policy, run.mlfs, run.mlfs_model),
        run.shape,
        run.model,
        run.config,
        progress,
    ).run()


def run_cell(args: argparse.Namespace, policy: str) -> dict:
    """One (trace, cluster, density, policy) cell as ``mlsched simulate`` runs it: the
    :func:`compute_metrics` dict, plus ``"speed_model"`` (which speed model ran)."""
    run = with_setting_model(prepare_run(args), [policy], getattr(args, "mlfs_features", False))
    metrics = compute_metrics(run_policy(run, policy))
    metrics[SPEED_MODEL_KEY] = run.model.speed_model.to_json()
    return metrics


def run_simulate(args: argparse.Namespace) -> int:
    try:
        policies = parse_policies(args.policy)
        if args.ablations:
            policies += [name for name in UNISCHED_ABLATIONS if name not in policies]
        run = with_setting_model(prepare_run(args), policies, args.mlfs_features)
        model_warning = mlfs_model_warning(run, policies, args.mlfs_features)
    except (TraceError, UnknownModel, ValueError, OSError) as exc:  # ModelError: a ValueError
        print(f"mlsched simulate: {exc}", file=sys.stderr)
        return 2
    model, jobs, shape = run.model, run.jobs, run.shape
    if model_warning is not None:
        print(f"mlsched simulate: {model_warning}", file=sys.stderr)
    warn_missing_table(args, model, "mlsched simulate")
    tune_for_cycles()  # the trace is loaded: what the collector walks from now on is the run's
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("mlsched simulate: --plot needs matplotlib: pip install -e '.[sim]'", file=sys.stderr)
        return 2
    results: dict[str, SimResult] = {}
    for name in policies:
        progress = None if args.quiet else Progress(name, "jobs")
        results[name] = run_policy(run, name, progress)
        if progress is not None:
            progress.close()
    metrics = {name: compute_metrics(result) for name, result in results.items()}
    warning = underload_warning(metrics)
    if args.json:  # the JSON alone on stdout; the warning goes to stderr
        sys.stdout.write(json_text(metrics, speed_model=model.speed_model.to_json()))
        if warning is not None:
            print(f"mlsched simulate: {warning}", file=sys.stderr)
    else:
        print(f"{len(jobs)} jobs on {shape.nodes}x{shape.gpus_per_node} GPUs")
        print(f"speed model: {model.speed_model.describe()}")
        print(format_table(metrics))
        if warning is not None:  # part of the report, below its table
            print(warning)
    if args.json_out:
        write_json(metrics, args.json_out, speed_model=model.speed_model.to_json())
    if args.plot:
        plot(results, args.plot)
    return 0
