"""``mlsched sweep``: grid expansion, resuming, failed cells, the table, the process pool, a YAML
grid file and (when Ray is installed) Ray tasks, on small traces written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import simulator.sweep as sweep
from mlsched.cli import build_parser, main
from simulator.cli import UNISCHED_ABLATIONS
from simulator.sweep import Cell, build_grid, cell_key

HEADER = (
    "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,"
    "expect_time_list,expect_value_list,best_effort,job_type\n"
)
# Chronus Philly rows (minutes): every class, enough overlap on 2x8 GPUs to queue and preempt.
ROWS = (
    "0,u1,8,0,1000,resnet50,30,5,0,0,1,best",
    "1,u2,4,1,800,vgg16,20,5,60,10,0,strict",
    "2,u1,2,2,500,resnet50,10,5,15-25-35-45,10-8-5-2,0,soft",
    "3,u3,8,3,900,vgg16,40,5,3,0,1,best",
    "4,u2,1,5,100,resnet50,5,5,12,10,0,strict",
    "5,u3,16,6,2000,vgg16,15,5,6,0,1,best",
)
MODEL_INFO = {
    "resnet50": {"2": {"1": 1.0, "2": 0.9}, "8": {"1": 1.0, "2": 0.8}},
    "vgg16": {"4": {"1": 1.0, "2": 0.6}, "8": {"1": 1.0, "2": 0.5}, "16": {"2": 0.4}},
}
TABLE_HEADER = [
    "trace",
    "cluster",
    "density",
    "policy",
    "status",
    "jobs",
    "R^slo (%)",
    "deadline miss (%)",
    "BE JCT avg (min)",
    "BE JCT median (min)",
    "preemptions / job",
    "makespan (h)",
    "cell wall (s)",
]


def write_trace(directory: Path, name: str = "trace", rows: tuple[str, ...] = ROWS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    trace = directory / f"{name}.csv"
    trace.write_text(HEADER + "".join(r + "\n" for r in rows))
    (directory / "model_info.json").write_text(json.dumps(MODEL_INFO))
    return trace


def sweep_cli(capsys, *args: str | Path) -> tuple[int, str, str]:
    """``mlsched sweep <args>`` in-process: (exit status, stdout, stderr)."""
    code = main(["sweep", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def parse(*args: str | Path):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["sweep", *map(str, args)])


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """Policies of the cells this process computes (a sweep with --workers 1 runs in-process)."""
    calls: list[str] = []
    real = sweep.run_cell

    def counting(args, policy):  # type: ignore[no-untyped-def]
        calls.append(policy)
        return real(args, policy)

    monkeypatch.setattr(sweep, "run_cell", counting)
    return calls


def read_csv(out: Path) -> list[dict[str, str]]:
    with (out / "table.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def cell_files(out: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}


# --- The grid ---------------------------------------------------------------------------------


def test_grid_cells_traces_outermost_policies_innermost(tmp_path):
    a, b = write_trace(tmp_path / "a"), write_trace(tmp_path / "b")
    args = parse(
        "--trace", a, "--trace", b, "--cluster", "c120,2X8", "--density", "1.0,1.6",
        "--policy", "edf", "--out", tmp_path / "out",
    )  # fmt: skip
    grid = build_grid(args)
    assert grid.cells() == [
        Cell(a, "C120", 1.0, "edf"),
        Cell(a, "C120", 1.6, "edf"),
        Cell(a, "2x8", 1.0, "edf"),
        Cell(a, "2x8", 1.6, "edf"),
        Cell(b, "C120", 1.0, "edf"),
        Cell(b, "C120", 1.6, "edf"),
        Cell(b, "2x8", 1.0, "edf"),
        Cell(b, "2x8", 1.6, "edf"),
    ]


def test_repeated_flags_defaults_and_ablations(tmp_path):
    trace = write_trace(tmp_path)
    args = parse(
        "--trace", trace, "--policy", "fifo,edf", "--policy", "fifo", "--ablations",
        "--out", tmp_path / "out",
    )  # fmt: skip
    grid = build_grid(args)
    assert grid.clusters == ("C120",)
    assert grid.densities == (1.0,)
    assert grid.policies == (
        "fifo",
        "edf",
        *UNISCHED_ABLATIONS,
    )
    assert grid.options["seed"] == 0 and grid.options["lease_seconds"] == 300.0


def test_cell_key_is_stable_and_names_every_parameter(tmp_path):
    trace = write_trace(tmp_path)
    options = build_grid(parse("--trace", trace, "--out", tmp_path)).options
    cell = Cell(trace, "2x8", 1.6, "edf")
    key = cell_key(cell, options)
    assert key == cell_key(Cell(trace, "2x8", 1.6, "edf"), dict(options))
    assert key.startswith("trace_2x8_d1.6_edf_")
    others = [
        cell_key(Cell(trace, "2x8", 1.6, "fifo"), options),
        cell_key(Cell(trace, "2x8", 1.0, "edf"), options),
        cell_key(Cell(trace, "C120", 1.6, "edf"), options),
        cell_key(cell, {**options, "seed": 1}),
        cell_key(cell, {**options, "limit": 3}),
    ]
    assert len({key, *others}) == 6


# --- Running, resuming, failing ---------------------------------------------------------------


def test_second_run_skips_every_finished_cell(tmp_path, capsys, counted):
    trace, out = write_trace(tmp_path), tmp_path / "out"
    args = ("--trace", trace, "--cluster", "2x8", "--density", "1.0,1.6", "--policy", "fifo,edf")
    code, first_table, err = sweep_cli(capsys, *args, "--out", out, "--workers", "1")
    assert code == 0, err
    assert sorted(counted) == ["edf", "edf", "fifo", "fifo"]
    assert "4 cells: 0 finished before, 4 to run" in err

    counted.clear()
    code, second_table, err = sweep_cli(capsys, *args, "--out", out, "--workers", "1")
    assert code == 0, err
    assert counted == []
    assert err.count("skipped (finished): ") == 4
    assert "skipped (finished): trace 2x8 density=1.6 edf" in err
    assert "4 cells: 4 finished before, 0 to run" in err
    assert second_table == first_table  # the table is rebuilt from the files

    # One more policy: only its cells run.
    code, _, err = sweep_cli(capsys, *args[:-1], "fifo,edf,srtf", "--out", out, "--workers", "1")
    assert code == 0, err
    assert counted == ["srtf", "srtf"]
    assert len(read_csv(out)) == 6


def test_a_failing_cell_is_recorded_and_the_others_finish(tmp_path, capsys, counted):
    good = write_trace(tmp_path / "good")
    bad = write_trace(tmp_path / "bad", rows=(*ROWS, "6,u1,many,7,10,resnet50,5,5,0,0,1,best"))
    out = tmp_path / "out"
    args = ("--trace", good, "--trace", bad, "--cluster", "2x8", "--policy", "fifo")
    code, table, err = sweep_cli(capsys, *args, "--out", out, "--workers", "1")
    assert code == 1
    records = {r["trace"]: r for r in cell_files(out).values()}
    assert records[str(good)]["status"] == "ok"
    failed = records[str(bad)]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("TraceError") and "num_gpu" in failed["error"]
    assert "Traceback" in failed["traceback"]
    assert "[2/2] bad/trace 2x8 density=1.0 fifo: FAILED: TraceError" in err
    rows = read_csv(out)
    assert [(r["trace"], r["status"]) for r in rows] == [
        ("good/trace", "ok"),
        ("bad/trace", "failed"),
    ]
    assert rows[1]["R^slo (%)"] == "-" and rows[1]["error"].startswith("TraceError")
    assert "Failed cells:" in table

    # A failed cell is not finished: the next run tries it again, and only it.
    counted.clear()
    code, _, err = sweep_cli(capsys, *args, "--out", out, "--workers", "1")
    assert code == 1
    assert counted == ["fifo"]
    assert err.count("skipped (finished): ") == 1


def test_the_table_has_one_row_per_cell_in_grid_order(tmp_path, capsys):
    trace, out = write_trace(tmp_path), tmp_path / "out"
    code, stdout, err = sweep_cli(
        capsys, "--trace", trace, "--cluster", "2x8,1x8", "--policy", "fifo,edf",
        "--out", out, "--workers", "1",
    )  # fmt: skip
    assert code == 0, err
    rows = read_csv(out)
    assert list(rows[0]) == [*TABLE_HEADER, "key", "error"]
    assert [(r["cluster"], r["policy"]) for r in rows] == [
        ("2x8", "fifo"),
        ("2x8", "edf"),
        ("1x8", "fifo"),
        ("1x8", "edf"),
    ]
    records = cell_files(out)
    for row in rows:
        metrics, record = records[row["key"]]["metrics"], records[row["key"]]
        assert row["trace"] == "trace" and row["density"] == "1.0" and row["status"] == "ok"
        assert row["jobs"] == str(len(ROWS))
        assert row["R^slo (%)"] == f"{metrics['r_slo'] * 100:.2f}"
        assert row["deadline miss (%)"] == f"{metrics['deadline_miss_rate'] * 100:.2f}"
        assert row["BE JCT avg (min)"] == f"{metrics['jct_s']['best_effort']['avg'] / 60:.1f}"
        assert row["BE JCT median (min)"] == (
            f"{metrics['jct_s']['best_effort']['median'] / 60:.1f}"
        )
        assert row["preemptions / job"] == f"{metrics['preemptions_per_job']:.2f}"
        assert row["makespan (h)"] == f"{metrics['makespan_s'] / 3600:.2f}"
        assert row["cell wall (s)"] == f"{record['wall_s']:.1f}"
        assert metrics["speed_model"]["kind"] == "table"
    markdown = (out / "table.md").read_text()
    assert stdout == markdown
    lines = markdown.splitlines()
    assert lines[0] == "| " + " | ".join(TABLE_HEADER) + " |"
    assert len(lines) == 2 + len(rows)
    assert lines[2].startswith("| trace | 2x8 | 1.0 | fifo | ok | 6 | ")


def test_a_pool_of_two_workers_gives_the_in_process_results(tmp_path, capsys):
    trace = write_trace(tmp_path)
    grid = ("--trace", trace, "--cluster", "2x8", "--density", "1.0,1.6", "--policy", "fifo,edf")
    for workers in ("1", "2"):
        code, _, err = sweep_cli(capsys, *grid, "--out", tmp_path / workers, "--workers", workers)
        assert code == 0, err
    assert "running on 2 worker(s)" in err

    def results(out: Path) -> dict[str, dict]:
        drop = ("wall_s", "decision_time_s")
        return {
            k: {m: v for m, v in r["metrics"].items() if m not in drop}
            for k, r in cell_files(out).items()
        }

    assert len(results(tmp_path / "2")) == 4
    assert results(tmp_path / "2") == results(tmp_path / "1")


# --- A YAML grid file -------------------------------------------------------------------------


def test_a_yaml_grid_file_with_relative_paths_and_options(tmp_path, capsys):
    trace = write_trace(tmp_path / "data")
    (tmp_path / "grid.yaml").write_text(
        "traces: [data/trace.csv]\n"
        "clusters: [2x8, 1x8]\n"
        "densities: 1.6\n"
        "policies: [fifo, edf]\n"
        "options:\n"
        "  limit: 4\n"
        "  seed: 3\n"
        "  model-info: data/model_info.json\n"
        "  check_invariants: true\n"
    )
    grid = build_grid(parse("--grid", tmp_path / "grid.yaml", "--out", tmp_path / "out"))
    assert grid.cells() == [
        Cell(trace, "2x8", 1.6, "fifo"),
        Cell(trace, "2x8", 1.6, "edf"),
        Cell(trace, "1x8", 1.6, "fifo"),
        Cell(trace, "1x8", 1.6, "edf"),
    ]
    assert grid.options["limit"] == 4 and grid.options["seed"] == 3
    assert grid.options["model_info"] == tmp_path / "data" / "model_info.json"
    assert grid.options["check_invariants"] is True

    # The command line replaces an axis and wins over an option; the rest stays the file's.
    args = parse("--grid", tmp_path / "grid.yaml", "--policy", "srtf", "--seed", "7", "--out", "x")
    grid = build_grid(args)
    assert grid.policies == ("srtf",) and grid.clusters == ("2x8", "1x8")
    assert grid.options["seed"] == 7 and grid.options["limit"] == 4

    out = tmp_path / "out"
    code, _, err = sweep_cli(capsys, "--grid", tmp_path / "grid.yaml", "--out", out)
    assert code == 0, err
    assert [r["jobs"] for r in read_csv(out)] == ["6"] * 4  # 4 jobs at density 1.6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("traces: [t.csv]\nstrategy: x\n", "unknown keys ['strategy']"),
        ("traces: [t.csv]\noptions: {sed: 1}\n", "unknown option 'sed'"),
        ("traces: [t.csv]\noptions: {format: json}\n", "option format: 'json' not one of"),
        ("traces: [t.csv]\noptions: {mlfs-features: 3}\n", "expected true or false"),
        ("- a\n- b\n", "expected a mapping"),
    ],
)
def test_a_bad_grid_file_exits_2(tmp_path, capsys, text, message):
    write_trace(tmp_path, name="t")
    (tmp_path / "grid.yaml").write_text(text)
    code, _, err = sweep_cli(capsys, "--grid", tmp_path / "grid.yaml", "--out", tmp_path / "o")
    assert code == 2
    assert err.startswith("mlsched sweep: ") and message in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--policy", "fifo,lottery"), "unknown policy lottery"),
        (("--cluster", "C7"), "unknown cluster"),
        (("--density", "0"), "must be positive"),
        (("--model-info", "nope.json"), "--model-info nope.json: no such file"),
    ],
)
def test_bad_command_line_exits_2_before_running_anything(tmp_path, capsys, extra, message):
    trace = write_trace(tmp_path)
    code, _, err = sweep_cli(capsys, "--trace", trace, *extra, "--out", tmp_path / "out")
    assert code == 2 and message in err
    assert not (tmp_path / "out").exists()


def test_missing_trace_and_missing_table_warning(tmp_path, capsys):
    code, _, err = sweep_cli(capsys, "--trace", tmp_path / "no.csv", "--out", tmp_path / "o")
    assert code == 2 and "no.csv: no such file" in err

    trace = write_trace(tmp_path)
    (tmp_path / "model_info.json").unlink()
    code, _, err = sweep_cli(
        capsys, "--trace", trace, "--cluster", "2x8", "--policy", "fifo,edf",
        "--out", tmp_path / "o", "--workers", "1",
    )  # fmt: skip
    assert code == 0, err
    assert err.count("mlsched sweep: warning: no model_info table for this Philly trace") == 1


# --- Ray --------------------------------------------------------------------------------------


def test_cells_run_as_ray_tasks_on_a_local_ray(tmp_path, capsys):
    ray = pytest.importorskip("ray")
    trace, out = write_trace(tmp_path), tmp_path / "out"
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        code, _, err = sweep_cli(
            capsys, "--trace", trace, "--cluster", "2x8", "--policy", "fifo,edf",
            "--out", out, "--ray", "auto",
        )  # fmt: skip
    finally:
        ray.shutdown()
    assert code == 0, err
    assert "running on Ray at auto" in err
    assert [(r["policy"], r["status"]) for r in read_csv(out)] == [("fifo", "ok"), ("edf", "ok")]


def test_traces_of_the_same_name_are_told_apart_by_their_folders():
    traces = [Path("/d/x/mix.csv"), Path("/d/y/mix.csv"), Path("/d/y/other.csv")]
    assert sweep.trace_names(traces) == {
        traces[0]: "x/mix",
        traces[1]: "y/mix",
        traces[2]: "other",
    }
