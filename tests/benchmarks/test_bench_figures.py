"""The figure-printing paths of ``benchmarks/bench_mlfh.py --phases``,
``benchmarks/milp_replay.py`` and ``benchmarks/mlfrl_vs_mlfh.py`` on tiny inputs: the structure
of what they print, never a speed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
PHASES = ("place", "priorities", "movers")


def run_json(script: str, *args: str) -> dict:
    """The script's ``--json`` object."""
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(proc.stdout)


def load_script(name: str) -> ModuleType:
    """A benchmark script as a module (``benchmarks/`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_trace() -> Path:
    env = os.environ.get("MLSCHED_DATA")
    data = Path(env) if env else REPO.parent / "shared" / "data"
    path = (data / "chronus_philly" / "trace_job_Philly_MIX2.csv").resolve()
    if not path.is_file():
        pytest.skip(f"shared trace {path} not found (set MLSCHED_DATA)")
    return path


def test_bench_mlfh_phases_on_one_snapshot():
    args = ("--phases", "--snapshots", "1", "--repeats", "1", "--tasks", "50")
    row = run_json("bench_mlfh.py", *args)
    phases = row["phases"]
    for key in (*(f"{p}_ms" for p in PHASES), "rest_ms", "total_ms", "place_us_per_task"):
        assert phases[key] >= 0, key
    assert sum(phases[f"{p}_ms"] for p in PHASES) <= phases["total_ms"] + 0.05  # rounding
    assert phases["total_ms"] == pytest.approx(row["first_p50_ms"], abs=0.01)
    # every wrapped name was reached: the policy still calls what the benchmark wraps
    assert phases["priorities_calls"] == phases["movers_calls"] == 1
    assert phases["place_calls"] >= 1 and phases["tasks_placed"] >= 1


def test_phase_clock_times_only_the_outermost_call_and_restores():
    bench = load_script("bench_mlfh")
    clock = bench.PhaseClock()
    inner = clock.wrap("place", lambda: [1, 2, 3], counts=True)
    outer = clock.wrap("place", lambda: inner() and (), counts=False)
    assert outer() == ()
    assert clock.calls["place"] == 1 and clock.tasks == 3
    targets = [(owner, name) for owner, name, _ in bench.PHASE_TARGETS]
    originals = [getattr(owner, name) for owner, name in targets]
    with clock.installed():
        assert not any(getattr(o, n) is f for (o, n), f in zip(targets, originals, strict=True))
    assert all(getattr(o, n) is f for (o, n), f in zip(targets, originals, strict=True))


def test_milp_replay_on_a_slice(tmp_path):
    trace = shared_trace()
    args = ("--trace", str(trace), "--limit", "100", "--cluster", "8x8", "--every", "4")
    saved = tmp_path / "models.pkl"
    report = run_json("milp_replay.py", *args, "--sets", "code,presolve-off", "--save", str(saved))
    assert report["captured"] == math.ceil(report["milps"] / 4) > 0
    assert list(report["sets"]) == ["run", "code", "presolve-off"]
    for row in report["sets"].values():
        assert row["models"] == report["captured"]
        assert row["same"] + row["better"] + row["worse"] + row["none"] == row["models"]
        assert row["solve_s"] >= 0 and row["p95_ms"] >= row["p50_ms"] >= 0
    # the code's own settings again reach the run's objective on every model
    assert report["sets"]["code"]["same"] == report["captured"]
    # the saved models replay without a simulation (and without a trace), to the same objectives
    again = run_json("milp_replay.py", "--trace", "/nonexistent", "--load", str(saved))
    assert again["captured"] == report["captured"] and again["milps"] == report["milps"]
    assert again["sets"]["run"] == report["sets"]["run"]
    assert again["sets"]["code"]["same"] == report["captured"]
    # only the solver's tail: no MILP of this slice takes the worker 1000 s (its limit is 1 s)
    tail = run_json("milp_replay.py", *args, "--slower-than", "1000", "--sets", "limit-0.3s")
    assert tail["milps"] == report["milps"] and tail["captured"] == 0
    assert tail["sets"]["limit-0.3s"]["models"] == 0 and tail["sets"]["run"]["lost"] == 0


def test_mlfrl_against_mlfh_on_a_slice():
    """The shipped model and the same file under another label run over the same jobs as
    MLF-H: the MLF-RL rows agree to the digit (a deterministic simulator), and so do those
    without a window on candidates (60 jobs never queue beyond the model's 200)."""
    from controller.policy.mlfs.rl.network import DEFAULT_MODEL_PATH

    trace = shared_trace()
    proc = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "mlfrl_vs_mlfh.py"),
            "--model",
            f"again={DEFAULT_MODEL_PATH}",
            "--candidates",
            "default,all",
            "--json",
            "--",
            "--trace",
            str(trace),
            "--limit",
            "60",
            "--cluster",
            "2x8",
            "--quiet",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(proc.stdout)
    assert out["jobs"] == 60
    rows = out["rows"]
    assert list(rows) == [
        "mlf-h",
        "mlf-rl (shipped)",
        "mlf-rl (shipped, all a step)",
        "mlf-rl (again)",
        "mlf-rl (again, all a step)",
    ]
    keys = {"jct_min", "r_slo", "eq7", "g1", "g2", "g3", "g4", "g5", "wall_s"}
    for row in rows.values():
        assert set(row) == keys and all(math.isfinite(v) for v in row.values())
        assert row["eq7"] == pytest.approx(
            sum(b * row[f"g{i + 1}"] for i, b in enumerate((0.5, 0.55, 0.25, 0.15, 0.15)))
        )
    same = {k: v for k, v in rows["mlf-rl (shipped)"].items() if k != "wall_s"}
    for label in list(rows)[2:]:
        assert same == {k: v for k, v in rows[label].items() if k != "wall_s"}


def test_ablation_grid_puts_each_cell_under_its_setting(tmp_path):
    grid = load_script("ablation_grid")

    def record(folder: str, trace: str, policy: str, r_slo: float, be_jct_s: float) -> None:
        metrics = {"r_slo": r_slo, "jct_s": {"best_effort": {"avg": be_jct_s}}}
        body = {"trace_name": f"trace_job_Philly_{trace}", "policy": policy, "status": "ok"}
        path = tmp_path / folder / f"{trace}_{policy}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({**body, "metrics": metrics}))

    record("sweep_c120_ablations", "MIX1", "unisched", 0.0138, 19572.0)  # 326.2 min
    record("sweep_c96_d16", "MIX1", "unisched-feasible", 0.0723, 66816.0)  # 1,113.6 min
    lines = grid.table(grid.read_cells(tmp_path)).splitlines()
    assert lines[0] == "| trace | variant | C120 d1.0 | C96 d1.0 | C120 d1.6 | C96 d1.6 |"
    assert lines[2] == "| MIX1 | unisched | 1.38 % / 326.2 | - | - | - |"
    assert lines[7] == "| MIX1 | feasible | - | - | - | 7.23 % / 1,113.6 |"
    assert len(lines) == 2 + 7  # one trace, every variant
