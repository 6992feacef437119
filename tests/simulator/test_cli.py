"""``mlsched simulate`` end to end: small traces written here, run as the real command.

The happy paths run ``python -m mlsched simulate`` as a subprocess (exit status, files and
output as a user sees them); the input errors call ``mlsched.cli.main`` in-process, which is the
same code path and much faster, and check the exit status and the message on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controller.policy import available_policies
from mlsched.cli import main
from simulator.cli import UNISCHED_ABLATIONS
from simulator.trace import ColumnMapping

HEADER = (
    "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,"
    "expect_time_list,expect_value_list,best_effort,job_type\n"
)

# Chronus Philly rows (times in minutes): every class, 1-16 GPUs (16 spans both nodes of 2x8),
# enough overlap that preemptive policies have something to do.
ROWS = (
    "0,u1,8,0,1000,resnet50,30,5,0,0,1,best",
    "1,u2,4,1,800,vgg16,20,5,60,10,0,strict",
    "2,u1,2,2,500,resnet50,10,5,15-25-35-45,10-8-5-2,0,soft",
    "3,u3,8,3,900,vgg16,40,5,3,0,1,best",
    "4,u2,1,5,100,resnet50,5,5,12,10,0,strict",
    "5,u3,16,6,2000,vgg16,15,5,6,0,1,best",
    "6,u1,4,8,300,resnet50,12,5,30-40,10-8,0,soft",
    "7,u2,2,10,400,vgg16,8,5,10,0,1,best",
)

MODEL_INFO = {
    "resnet50": {"2": {"1": 1.0, "2": 0.9}, "8": {"1": 1.0, "2": 0.8}},
    "vgg16": {"4": {"1": 1.0, "2": 0.6}, "8": {"1": 1.0, "2": 0.5}, "16": {"2": 0.4}},
}

EQ2_DEFAULTS = "UniSched Eq. 2 defaults (T1 = 0.075, T2 = 0.12)"

POLICIES = ("fifo", "srtf", "tiresias", "edf", "themis")
METRIC_KEYS = {
    "r_slo",
    "deadline_miss_rate",
    "jct_s",
    "queue_s",
    "makespan_s",
    "preemptions_per_job",
    "gpu_utilization",
    "jobs_completed",
    "jobs_total",
    "wall_s",
}
CLASSES = ("all", "best_effort", "strict", "soft")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REPO = Path(__file__).resolve().parents[2]


def write_trace(directory: Path, rows: tuple[str, ...] = ROWS, model_info: bool = True) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    trace = directory / "trace.csv"
    trace.write_text(HEADER + "".join(r + "\n" for r in rows))
    if model_info:
        (directory / "model_info.json").write_text(json.dumps(MODEL_INFO))
    return trace


def run_cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m mlsched <args>`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "mlsched", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )


def simulate(capsys, *args: str | Path) -> tuple[int, str, str]:
    """``mlsched simulate <args>`` in-process: (exit status, stdout, stderr)."""
    code = main(["simulate", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# --- (a) every policy over a Philly trace, with JSON, PNG and the table -----------------------


def test_simulate_every_policy_writes_json_png_and_a_table(tmp_path):
    trace = write_trace(tmp_path / "data")
    out_json, out_png = tmp_path / "out" / "out.json", tmp_path / "out" / "out.png"
    proc = run_cli(
        "simulate",
        "--trace",
        trace,
        "--policy",
        ",".join(POLICIES),
        "--json-out",
        out_json,
        "--plot",
        out_png,
        "--cluster",
        "2x8",
        "--check-invariants",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr

    metrics = json.loads(out_json.read_text())
    table = str((tmp_path / "data" / "model_info.json").resolve())
    assert metrics.pop("speed_model") == {"kind": "table", "path": table}
    assert list(metrics) == list(POLICIES)  # one object per policy, in the order asked
    for policy, m in metrics.items():
        assert set(m) >= METRIC_KEYS, f"{policy}: missing {METRIC_KEYS - set(m)}"
        for section in ("jct_s", "queue_s"):
            for cls in CLASSES:
                assert {"avg", "median", "p95"} <= set(m[section][cls]), (policy, section, cls)
        # 8 jobs: 4 best effort, 2 strict, 2 soft; all fit on 2x8 and finish.
        assert (m["jobs_total"], m["jobs_completed"]) == (8, 8), policy
        assert [m["jct_s"][c]["count"] for c in CLASSES] == [8, 4, 2, 2], policy
        assert m["jct_s"]["all"]["avg"] > 0 and m["makespan_s"] > 0
        assert 0 <= m["r_slo"] <= 1 and 0 <= m["deadline_miss_rate"] <= 1
        assert 0 < m["gpu_utilization"] <= 1
        assert m["preemptions_per_job"] >= 0 and m["wall_s"] >= 0
    assert metrics["fifo"]["preemptions_per_job"] == 0  # plain FIFO never suspends

    assert out_png.read_bytes()[:8] == PNG_MAGIC

    lines = proc.stdout.splitlines()
    assert lines[0] == "8 jobs on 2x8 GPUs"
    assert lines[1] == f"speed model: model_info table {table}"
    assert lines[2].split() == ["metric", *POLICIES, "better"]  # the table's header
    assert any(line.startswith("R^slo (%)") for line in lines)
    assert any(
        line.startswith("Jobs completed") and line.split()[2:] == ["8"] * 5 + ["higher"]
        for line in lines
    )


# --- (b) bad input: exit status 2 and a message that says what is wrong ----------------------


def test_malformed_row_names_the_line_and_the_column(tmp_path, capsys):
    rows = list(ROWS)
    rows[2] = "2,u1,x,2,500,resnet50,10,5,15-25-35-45,10-8-5-2,0,soft"  # third data row
    trace = write_trace(tmp_path, tuple(rows))
    code, out, err = simulate(capsys, "--trace", trace, "--quiet")
    assert code == 2
    # The header is line 1, so the third data row is line 4 of the file.
    assert f"{trace}:4:" in err
    assert "column 'num_gpu'" in err and "'x'" in err
    assert out == ""


def test_malformed_row_exit_status_through_python_dash_m(tmp_path):
    rows = list(ROWS)
    rows[2] = "2,u1,x,2,500,resnet50,10,5,15-25-35-45,10-8-5-2,0,soft"
    trace = write_trace(tmp_path, tuple(rows))
    proc = run_cli("simulate", "--trace", trace, "--quiet", cwd=tmp_path)
    assert proc.returncode == 2
    assert ":4: column 'num_gpu'" in proc.stderr


def test_unknown_policy_lists_the_valid_ones(tmp_path, capsys):
    trace = write_trace(tmp_path)
    code, _, err = simulate(capsys, "--trace", trace, "--policy", "fifo,lottery", "--quiet")
    assert code == 2
    assert "lottery" in err
    for name in available_policies():
        assert name in err
    assert "fifo-lease" in err and "themis" in err


def test_unknown_model_lists_the_valid_models(tmp_path, capsys):
    trace = write_trace(tmp_path, (*ROWS, "8,u1,1,11,100,bert,5,5,11,0,1,best"))
    code, out, err = simulate(capsys, "--trace", trace, "--quiet")
    assert code == 2
    assert "'bert'" in err
    assert "resnet50" in err and "vgg16" in err
    assert out == ""  # failed before any simulation


@pytest.mark.parametrize("cluster", ["2by8", "0x8", "2x0", "x8", "C7", "-1x8"])
def test_bad_cluster_is_rejected(tmp_path, capsys, cluster):
    trace = write_trace(tmp_path)
    code, out, err = simulate(capsys, "--trace", trace, f"--cluster={cluster}", "--quiet")
    assert code == 2
    assert "unknown cluster" in err and "NODESxGPUS" in err
    assert out == ""


def test_generic_csv_without_columns_names_the_valid_keys(tmp_path, capsys):
    trace = tmp_path / "generic.csv"
    trace.write_text("t,d,g\n0,60,1\n")
    code, _, err = simulate(capsys, "--trace", trace, "--format", "csv", "--quiet")
    assert code == 2
    assert "--columns" in err
    valid_keys = ColumnMapping.keys()  # (a classmethod, not a dict)
    assert all(key in err for key in valid_keys), err


def test_generic_csv_with_an_unknown_column_key_names_the_valid_keys(tmp_path, capsys):
    trace = tmp_path / "generic.csv"
    trace.write_text("t,d,g\n0,60,1\n")
    code, _, err = simulate(
        capsys,
        "--trace",
        trace,
        "--format",
        "csv",
        "--columns",
        "submit=t,duration=d,gpus=g,colour=red",
        "--quiet",
    )
    assert code == 2
    assert "'colour'" in err and "valid keys" in err


def test_missing_trace_file_exits_2(tmp_path, capsys):
    code, _, err = simulate(capsys, "--trace", tmp_path / "nope.csv", "--quiet")
    assert code == 2
    assert "nope.csv" in err


def test_generic_csv_with_columns_runs(tmp_path, capsys):
    # No model_info.json beside it: the default job model (no model names needed).
    trace = tmp_path / "generic" / "jobs.csv"
    trace.parent.mkdir()
    trace.write_text(
        "arrival,runtime,ngpu,deadline\n"
        "0,10,8,\n"  # best effort: no deadline
        "1,5,4,20\n"  # strict: one deadline
        "2,5,4,15-30\n"  # soft: two deadlines
    )
    out_json = tmp_path / "generic.json"
    code, out, err = simulate(
        capsys,
        "--trace",
        trace,
        "--format",
        "csv",
        "--columns",
        "submit=arrival,duration=runtime,gpus=ngpu,deadline=deadline,time_unit=m",
        "--policy",
        "fifo,edf",
        "--cluster",
        "1x8",
        "--json-out",
        out_json,
        "--check-invariants",
        "--quiet",
    )
    assert code == 0, err
    assert err == ""  # generic traces use a table only when given one: no warning
    assert out.splitlines()[0] == "3 jobs on 1x8 GPUs"
    assert out.splitlines()[1] == f"speed model: {EQ2_DEFAULTS}"
    assert out.splitlines()[2].split() == ["metric", "fifo", "edf", "better"]
    metrics = json.loads(out_json.read_text())
    assert metrics.pop("speed_model") == {"kind": "eq2-defaults", "path": None}
    for m in metrics.values():
        assert (m["jobs_total"], m["jobs_completed"]) == (3, 3)
        assert [m["jct_s"][c]["count"] for c in CLASSES] == [3, 1, 1, 1]
        assert m["slo_jobs"] == 2


# --- (c) which speed model ran: the table's path or Eq. 2 defaults, and a warning ------------

# One best-effort vgg16 job on 16 GPUs, 10 min at 16 GPUs on one node; on 2x8 it spans both
# nodes from t = 0 (a first launch costs nothing), so its JCT and the makespan are 600 s / speed.
# With the table: speed 0.4 -> 1500 s. Eq. 2 defaults (T1 = 0.075, T2 = 0.12):
# speed = (1 + 15 * 0.075) / (1 + 15 * 0.12) = 2.125 / 2.8 -> 600 * 2.8 / 2.125 = 790.588 s.
WIDE_JOB = ("0,u1,16,0,2000,vgg16,10,5,0,0,1,best",)
WIDE_TABLE = {"vgg16": {"16": {"2": 0.4}}}


def simulate_wide(capsys, trace: Path, out_json: Path, *extra: str | Path) -> tuple[str, str]:
    """FIFO over ``trace`` on 2x8, JSON to ``out_json``: (stdout, stderr); exit status 0."""
    args = ("--trace", trace, "--cluster", "2x8", "--quiet", "--json-out", out_json, *extra)
    code, out, err = simulate(capsys, *args)
    assert code == 0, err
    return out, err


def test_json_and_header_name_the_table_beside_the_trace(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=False)
    table = trace.with_name("model_info.json")
    table.write_text(json.dumps(WIDE_TABLE))
    out, err = simulate_wide(capsys, trace, tmp_path / "out.json")
    assert err == ""  # no warning
    assert out.splitlines()[1] == f"speed model: model_info table {table.resolve()}"
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["speed_model"] == {"kind": "table", "path": str(table.resolve())}
    assert report["fifo"]["makespan_s"] == pytest.approx(1500.0)


def test_philly_trace_without_a_table_warns_and_runs_eq2_defaults(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=False)
    expected = (tmp_path / "data" / "model_info.json").resolve()
    out, err = simulate_wide(capsys, trace, tmp_path / "out.json")
    assert err == (
        f"mlsched simulate: warning: no model_info table for this Philly trace ({expected} "
        f"does not exist): job speeds use {EQ2_DEFAULTS}; put the trace's model_info.json "
        "there or pass --model-info PATH\n"
    )
    assert out.splitlines()[1] == f"speed model: {EQ2_DEFAULTS}"
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["speed_model"] == {"kind": "eq2-defaults", "path": None}
    assert report["fifo"]["makespan_s"] == pytest.approx(600 * 2.8 / 2.125)


def test_explicit_model_info_is_named_and_wins_over_the_file_beside(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=False)
    trace.with_name("model_info.json").write_text(json.dumps({"vgg16": {"16": {"2": 0.8}}}))
    table = tmp_path / "tables" / "speeds.json"
    table.parent.mkdir()
    table.write_text(json.dumps(WIDE_TABLE))
    out, err = simulate_wide(capsys, trace, tmp_path / "out.json", "--model-info", table)
    assert err == ""
    assert out.splitlines()[1] == f"speed model: model_info table {table.resolve()}"
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["speed_model"] == {"kind": "table", "path": str(table.resolve())}
    assert report["fifo"]["makespan_s"] == pytest.approx(1500.0)  # 0.4, not 0.8 beside


@pytest.mark.parametrize("beside", [True, False])
def test_a_missing_model_info_path_is_an_error(tmp_path, capsys, beside):
    # Even with a table beside the trace, a --model-info that is not there is not ignored.
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=beside)
    missing = tmp_path / "nowhere" / "model_info.json"
    code, out, err = simulate(capsys, "--trace", trace, "--model-info", missing, "--quiet")
    assert code == 2
    assert err == f"mlsched simulate: --model-info {missing}: no such file\n"
    assert out == ""


def test_a_directory_as_model_info_is_an_error(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=False)
    code, out, err = simulate(capsys, "--trace", trace, "--model-info", tmp_path, "--quiet")
    assert code == 2
    assert err == f"mlsched simulate: --model-info {tmp_path}: not a file\n"
    assert out == ""


# --- (d) a smoke run on the shared Chronus MIX2 trace, when it is there -----------------------


def shared_trace() -> Path:
    env = os.environ.get("MLSCHED_DATA")
    data = Path(env) if env else REPO.parent / "shared" / "data"
    path = (data / "chronus_philly" / "trace_job_Philly_MIX2.csv").resolve()
    if not path.is_file():
        pytest.skip(
            f"shared trace {path} not found: set MLSCHED_DATA to the directory holding "
            "chronus_philly/trace_job_Philly_MIX2.csv to run this smoke test"
        )
    return path


def test_smoke_on_the_shared_mix2_trace(tmp_path):
    trace = shared_trace()
    out_json = tmp_path / "mix2.json"
    proc = run_cli(
        "simulate",
        "--trace",
        trace,
        "--limit",
        "500",
        "--policy",
        "fifo,edf",
        "--json-out",
        out_json,
        "--quiet",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split() == ["metric", "fifo", "edf", "better"]
    metrics = json.loads(out_json.read_text())
    table = str(trace.with_name("model_info.json"))
    assert metrics.pop("speed_model") == {"kind": "table", "path": table}
    assert list(metrics) == ["fifo", "edf"]
    for m in metrics.values():
        assert m["jobs_total"] == 500
        assert m["jobs_completed"] == 500


def test_unisched_and_its_ablations_complete_every_job(tmp_path, capsys):
    trace = write_trace(tmp_path / "data")
    out_json = tmp_path / "out.json"
    code, _, err = simulate(
        capsys,
        "--trace",
        trace,
        "--policy",
        "unisched",
        "--ablations",
        "--cluster",
        "2x8",
        "--check-invariants",
        "--quiet",
        "--json-out",
        out_json,
    )
    assert code == 0, err
    metrics = json.loads(out_json.read_text())
    assert metrics.pop("speed_model")["kind"] == "table"
    assert list(metrics) == ["unisched", *UNISCHED_ABLATIONS]
    assert all(m["jobs_completed"] == m["jobs_total"] == 8 for m in metrics.values())


MLFS_KEYS = {
    "accuracy_by_deadline",
    "accuracy_guarantee_ratio",
    "deadline_guarantee_ratio",
    "bandwidth_cost_gb",
    "migrations_per_job",
    "jobs_stopped",
    "refused_migrations",
}


def test_mlf_h_with_mlfs_features_end_to_end(tmp_path, capsys):
    # MLF-H beside FIFO over the 8-job trace with MLFS features: every job completes, every
    # policy reports the MLFS metrics, and a second run gives the same numbers.
    trace = write_trace(tmp_path / "data")
    args = ["--trace", trace, "--policy", "fifo,mlf-h", "--cluster", "2x8"]
    args += ["--mlfs-features", "--check-invariants", "--quiet", "--seed", "3"]
    code, out, err = simulate(capsys, *args, "--json-out", tmp_path / "a.json")
    assert code == 0, err
    assert out.splitlines()[2].split() == ["metric", "fifo", "mlf-h", "better"]
    assert any(line.startswith("Accuracy guarantee (%)") for line in out.splitlines())
    metrics = json.loads((tmp_path / "a.json").read_text())
    assert metrics.pop("speed_model")["kind"] == "table"
    for policy, m in metrics.items():
        assert set(m) >= METRIC_KEYS | MLFS_KEYS, policy
        assert m["jobs_completed"] == m["jobs_total"] == 8, policy
        assert 0 <= m["accuracy_guarantee_ratio"] <= 1 and 0 <= m["deadline_guarantee_ratio"] <= 1
        assert 0 < m["accuracy_by_deadline"] < 1 and m["bandwidth_cost_gb"] >= 0
        assert m["refused_launches"] == m["refused_migrations"] == 0
    code, _, err = simulate(capsys, *args, "--json-out", tmp_path / "b.json")
    assert code == 0, err
    again = json.loads((tmp_path / "b.json").read_text())
    assert again.pop("speed_model")["kind"] == "table"
    for m in (*metrics.values(), *again.values()):
        del m["wall_s"], m["decision_time_s"]
    assert again == metrics
    # Without the features the MLFS metrics that need them are null.
    code, _, err = simulate(
        capsys,
        "--trace",
        trace,
        "--policy",
        "mlf-h",
        "--cluster",
        "2x8",
        "--quiet",
        "--json-out",
        tmp_path / "c.json",
    )
    assert code == 0, err
    plain = json.loads((tmp_path / "c.json").read_text())["mlf-h"]
    assert plain["bandwidth_cost_gb"] is None and plain["accuracy_guarantee_ratio"] is None
    assert plain["jobs_completed"] == 8


# --- (e) --json prints the JSON alone on stdout, --json-out writes it; the old --json PATH ----


def test_json_prints_on_stdout_what_json_out_writes(tmp_path, capsys):
    # One 16-GPU job on 2x8: it never waits, so the underload warning comes too (on stderr),
    # and the progress lines (no --quiet) go to stderr: stdout is the JSON and nothing else.
    trace = write_trace(tmp_path / "data", WIDE_JOB, model_info=False)
    trace.with_name("model_info.json").write_text(json.dumps(WIDE_TABLE))
    out_json = tmp_path / "out" / "metrics.json"
    code, out, err = simulate(
        capsys, "--trace", trace, "--cluster", "2x8", "--json", "--json-out", out_json
    )
    assert code == 0, err
    assert out == out_json.read_text()  # the same text, byte for byte
    report = json.loads(out)
    assert report.pop("speed_model")["kind"] == "table"
    assert list(report) == ["fifo"] and report["fifo"]["jobs_completed"] == 1
    assert "fifo: 100% (1/1 jobs)" in err
    assert "mlsched simulate: warning: the simulated cluster is underloaded" in err


def test_json_alone_writes_no_file_and_json_out_alone_keeps_the_report(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB)
    code, out, err = simulate(capsys, "--trace", trace, "--cluster", "2x8", "--quiet", "--json")
    assert code == 0, err
    assert json.loads(out)["fifo"]["jobs_total"] == 1
    assert list(tmp_path.rglob("*.json")) == [tmp_path / "data" / "model_info.json"]
    out_json = tmp_path / "out.json"
    code, out, err = simulate(
        capsys, "--trace", trace, "--cluster", "2x8", "--quiet", "--json-out", out_json
    )
    assert code == 0, err
    assert out.splitlines()[0] == "1 jobs on 2x8 GPUs"
    assert json.loads(out_json.read_text())["fifo"]["jobs_total"] == 1


OLD_JSON_ERROR = "`--json` is now a flag that prints to stdout; write a file with --json-out"


def test_the_old_json_path_exits_2_naming_json_out(tmp_path):
    trace = write_trace(tmp_path / "data", WIDE_JOB)
    proc = run_cli("simulate", "--trace", trace, "--json", "old.json", "--quiet", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"mlsched simulate: error: {OLD_JSON_ERROR} old.json\n"
    assert not (tmp_path / "old.json").exists()


def test_the_old_json_equals_path_exits_2_naming_json_out(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB)
    with pytest.raises(SystemExit) as stopped:
        main(["simulate", "--trace", str(trace), "--json=old.json"])
    assert stopped.value.code == 2
    assert f"{OLD_JSON_ERROR} old.json" in capsys.readouterr().err


def test_a_stray_argument_elsewhere_is_still_unrecognized(tmp_path, capsys):
    trace = write_trace(tmp_path / "data", WIDE_JOB)
    with pytest.raises(SystemExit) as stopped:
        main(["simulate", "stray", "--trace", str(trace), "--json"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: stray" in err and "--json-out" not in err


# --- (f) MLFS parameters (--mlfs-param, MLFS §4.1) ----------------------------------------------


def test_mlfs_params_reach_the_run_and_bad_ones_exit_2(tmp_path, capsys):
    from controller.policy.mlfs.config import MlfsConfig
    from mlsched.cli import build_parser
    from simulator.cli import prepare_run

    trace = write_trace(tmp_path / "data")
    given = ["simulate", "--trace", str(trace), "--cluster", "2x8", "--quiet"]
    args = build_parser().parse_args(
        [*given, "--mlfs-param", "gamma_w=0", "--mlfs-param", "h_r=0.8"]
    )
    assert prepare_run(args).mlfs == MlfsConfig(gamma_w=0.0, h_r=0.8)
    assert prepare_run(build_parser().parse_args(given)).mlfs is None  # the paper's defaults
    code, _, err = simulate(capsys, *given[1:], "--policy", "mlf-h", "--mlfs-param", "gamma_w=0")
    assert code == 0, err
    code, _, err = simulate(capsys, *given[1:], "--policy", "mlf-h", "--mlfs-param", "gamma_w=lots")
    assert code == 2 and "'lots' is not a number" in err
