"""Trace readers: the Chronus Philly format and generic CSVs with a column mapping."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from mlsched.model import Deadline, JobClass
from simulator.trace import ColumnMapping, TraceError, load_csv, load_philly

HEADER = (
    "job_id,user,num_gpu,submit_time,iterations,model_name,duration,interval,"
    "expect_time_list,expect_value_list,best_effort,job_type\n"
)


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def philly(tmp_path: Path, *rows: str) -> Path:
    return write(tmp_path, HEADER + "".join(r + "\n" for r in rows))


def data_dir() -> Path:
    env = os.environ.get("MLSCHED_DATA")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
    return path.resolve()


def shared_file(relative: str) -> Path:
    path = data_dir() / relative
    if not path.is_file():
        pytest.skip(f"shared data file {path} not found (set MLSCHED_DATA to the data directory)")
    return path


# --- load_philly -------------------------------------------------------------------------------


def test_philly_units_classes_and_deadlines(tmp_path):
    path = philly(
        tmp_path,
        "0,vc_a,1,20,500,vgg16,10,14,15,10,0,strict",
        "1,vc_b,4,5,300,alexnet,8,6,12-14-16-20,10-8-5-2,0,soft",
        "2,vc_a,2,10,100,resnet101,3,5,10,10,1,best",
    )
    jobs = load_philly(path)
    assert [j.id for j in jobs] == ["1", "2", "0"]  # sorted by submission time
    soft, best, strict = jobs
    assert strict.submit_s == 20 * 60 and strict.duration_s == 10 * 60
    assert (strict.user, strict.gpus, strict.model, strict.iterations) == ("vc_a", 1, "vgg16", 500)
    assert strict.job_class is JobClass.STRICT_SLO
    assert strict.deadlines == (Deadline(15 * 60, 100.0),)  # minutes after submission; 10 x 10
    assert soft.job_class is JobClass.SOFT_SLO and soft.gpus == 4
    assert soft.deadlines == (
        Deadline(720.0, 100.0),
        Deadline(840.0, 80.0),
        Deadline(960.0, 50.0),
        Deadline(1200.0, 20.0),
    )
    assert best.job_class is JobClass.BEST_EFFORT and best.deadlines == ()
    assert not any(j.performance_based for j in jobs)


def test_philly_reward_scale(tmp_path):
    path = philly(tmp_path, "0,u,1,0,1,m,10,1,12-14,10-8,0,soft")
    [job] = load_philly(path, reward_scale=1.0)
    assert [d.reward for d in job.deadlines] == [10.0, 8.0]


def test_philly_zero_gpu_rows(tmp_path):
    path = philly(
        tmp_path,
        "0,u,0,1,1,m,10,1,12,10,0,strict",
        "1,u,2,2,1,m,10,1,12,10,0,strict",
    )
    assert [j.id for j in load_philly(path)] == ["1"]
    assert [(j.id, j.gpus) for j in load_philly(path, zero_gpu="one")] == [("0", 1), ("1", 2)]
    with pytest.raises(TraceError) as e:
        load_philly(path, zero_gpu="error")
    assert str(e.value).endswith(
        "trace.csv:2: column 'num_gpu': expected a positive integer, got '0'"
    )
    with pytest.raises(ValueError, match="zero_gpu"):
        load_philly(path, zero_gpu="drop")  # type: ignore[arg-type]


def test_philly_error_names_file_line_and_column(tmp_path):
    good = "0,u,1,1,1,m,10,1,12,10,0,strict"
    path = philly(tmp_path, good, "1,u,x,1,1,m,10,1,12,10,0,strict")
    with pytest.raises(TraceError) as e:
        load_philly(path, zero_gpu="error")
    assert str(e.value) == f"{path}:3: column 'num_gpu': expected a positive integer, got 'x'"
    assert (e.value.line, e.value.column) == (3, "num_gpu")


@pytest.mark.parametrize(
    ("row", "column", "message"),
    [
        ("1,u,1,abc,1,m,10,1,12,10,0,strict", "submit_time", "non-negative number, got 'abc'"),
        ("1,u,1,-5,1,m,10,1,12,10,0,strict", "submit_time", "non-negative number, got '-5'"),
        ("1,u,1,1,1,m,0,1,12,10,0,strict", "duration", "positive number, got '0'"),
        ("1,u,1,1,1.5,m,10,1,12,10,0,strict", "iterations", "non-negative integer, got '1.5'"),
        ("1,u,inf,1,1,m,10,1,12,10,0,strict", "num_gpu", "non-negative integer, got 'inf'"),
        ("1,u,1,1,1,m,nan,1,12,10,0,strict", "duration", "positive number, got 'nan'"),
        ("1,u,1,1,1,m,10,1,12,10,0,urgent", "job_type", "got 'urgent'"),
        ("1,u,1,1,1,m,10,1,12,10,1,strict", "best_effort", "expected 0 for job_type 'strict'"),
        ("1,u,1,1,1,m,10,1,12-x,10-8,0,soft", "expect_time_list", "got 'x' in '12-x'"),
        ("1,u,1,1,1,m,10,1,12-14,10,0,soft", "expect_value_list", "2 deadline(s) but 1 reward"),
        ("1,u,1,1,1,m,10,1,14-12,10-8,0,soft", "expect_time_list", "deadlines must increase"),
        ("1,u,1,1,1,m,10,1,12-14,10-8,0,strict", "expect_time_list", "one deadline, got 2"),
        ("1,u,1,1,1,m,10,1,,,0,strict", "expect_time_list", "positive number, got ''"),
        ("1,u,1,1,1,m,10,1,12,10,0", "job_type", "missing (row has 11 fields, header has 12)"),
        ("1,u,1,1,1", "model_name", "missing (row has 5 fields"),
    ],
)
def test_philly_malformed_rows(tmp_path, row, column, message):
    path = philly(tmp_path, "0,u,1,1,1,m,10,1,12,10,0,strict", row)
    with pytest.raises(TraceError) as e:
        load_philly(path)
    assert f"trace.csv:3: column '{column}': " in str(e.value)
    assert message in str(e.value)


def test_philly_structure_errors(tmp_path):
    path = philly(tmp_path, "0,u,1,1,1,m,10,1,12,10,0,strict,extra")
    with pytest.raises(TraceError, match=r"trace.csv:2: row has 13 fields, header has 12"):
        load_philly(path)

    path = philly(
        tmp_path, "7,u,1,1,1,m,10,1,12,10,0,strict", "", "7,u,1,2,1,m,10,1,12,10,0,strict"
    )
    with pytest.raises(TraceError) as e:
        load_philly(path)
    assert "trace.csv:4: column 'job_id': duplicate job id '7' (first on line 2)" in str(e.value)

    path = write(tmp_path, HEADER.replace(",job_type", ",kind"))
    with pytest.raises(TraceError, match=r"trace.csv:1: missing column\(s\) 'job_type'"):
        load_philly(path)

    path = write(tmp_path, "")
    with pytest.raises(TraceError, match=r"trace.csv:1: empty file"):
        load_philly(path)


def test_philly_blank_lines_keep_line_numbers(tmp_path):
    path = philly(
        tmp_path, "0,u,1,1,1,m,10,1,12,10,0,strict", "", "1,u,1,1,1,m,-1,1,12,10,0,strict"
    )
    with pytest.raises(TraceError, match=r"trace.csv:4: column 'duration'"):
        load_philly(path)


# --- load_csv and ColumnMapping ----------------------------------------------------------------


def test_csv_minimal_mapping_and_units(tmp_path):
    path = write(tmp_path, "t,dur,g\n2,1.5,4\n0.5,0.25,1\n")
    jobs = load_csv(path, ColumnMapping(submit="t", duration="dur", gpus="g", time_unit="h"))
    assert [(j.id, j.submit_s, j.duration_s, j.gpus) for j in jobs] == [
        ("1", 1800.0, 900.0, 1),
        ("0", 7200.0, 5400.0, 4),
    ]
    assert all(j.job_class is JobClass.BEST_EFFORT and j.user == "" and j.model == "" for j in jobs)
    [job] = load_csv(
        write(tmp_path, "t,dur,g\n3,2,2\n"), ColumnMapping("t", "dur", "g", time_unit="m")
    )
    assert (job.submit_s, job.duration_s) == (180.0, 120.0)


def test_csv_all_columns(tmp_path):
    path = write(
        tmp_path,
        "name,who,net,at,run,n,due,cls\n"
        "a,ann,bert,10,100,2,150,strict\n"
        "b,bob,vgg,20,100,1,110-121-132-165,soft-slo\n"
        "c,cat,ncf,30,100,8,,best\n"
        "d,dan,ncf,40,100,1,130,Best-Effort\n",
    )
    mapping = ColumnMapping.parse(
        "submit=at,duration=run,gpus=n,model=net,deadline=due,user=who,id=name,job_class=cls"
    )
    a, b, c, d = load_csv(path, mapping)
    assert [(j.id, j.user, j.model, j.gpus) for j in (a, b, c, d)] == [
        ("a", "ann", "bert", 2),
        ("b", "bob", "vgg", 1),
        ("c", "cat", "ncf", 8),
        ("d", "dan", "ncf", 1),
    ]
    assert (a.job_class, a.deadlines) == (JobClass.STRICT_SLO, (Deadline(150.0, 100.0),))
    assert b.job_class is JobClass.SOFT_SLO
    assert b.deadlines == (  # UniSched §IV-B rewards by position
        Deadline(110.0, 100.0),
        Deadline(121.0, 80.0),
        Deadline(132.0, 50.0),
        Deadline(165.0, 20.0),
    )
    assert (c.job_class, c.deadlines) == (JobClass.BEST_EFFORT, ())
    assert (d.job_class, d.deadlines) == (JobClass.BEST_EFFORT, ())  # best-effort: dropped

    # Without a class column the deadlines decide: none, one, several.
    no_class = ColumnMapping.parse("submit=at,duration=run,gpus=n,deadline=due,id=name")
    classes = [j.job_class for j in load_csv(path, no_class)]
    assert classes == [
        JobClass.STRICT_SLO,
        JobClass.SOFT_SLO,
        JobClass.BEST_EFFORT,
        JobClass.STRICT_SLO,
    ]


def test_csv_errors(tmp_path):
    mapping = ColumnMapping("t", "dur", "g", id="id", job_class="cls", deadline="due")
    cases = [
        ("1,0,10,0,,best", "column 'g': expected a positive integer, got '0'"),
        ("1,0,10,x,,best", "column 'g': expected a positive integer, got 'x'"),
        ("1,0,10,2.5,,best", "column 'g': expected a positive integer, got '2.5'"),
        ("1,0,10,inf,,best", "column 'g': expected a positive integer, got 'inf'"),
        ("1,nan,10,1,,best", "column 't': expected a non-negative number, got 'nan'"),
        ("1,0,-1,1,,best", "column 'dur': expected a positive number, got '-1'"),
        ("1,0,10,1,,strict", "column 'due': a strict-slo job needs a deadline"),
        ("1,0,10,1,5-6,strict", "column 'due': a strict job has one deadline, got 2"),
        ("1,0,10,1,5,urgent", "column 'cls': expected one of 'strict', 'strict-slo'"),
        ("1,0,10,1,1-2-3-4-5,soft", "column 'due': at most 4 deadlines"),
        ("0,0,10,1,,best", "column 'id': duplicate job id '0' (first on line 2)"),
        ("1,0,10,1", "column 'due': missing (row has 4 fields, header has 6)"),
    ]
    for row, message in cases:
        path = write(tmp_path, f"id,t,dur,g,due,cls\n0,0,10,1,,best\n{row}\n")
        with pytest.raises(TraceError) as e:
            load_csv(path, mapping)
        assert f"trace.csv:3: {message}" in str(e.value), row
    path = write(tmp_path, "id,t,dur\n0,0,10\n")
    with pytest.raises(TraceError, match=r"trace.csv:1: missing column\(s\) 'g', 'due', 'cls'"):
        load_csv(path, mapping)


def test_column_mapping_parse():
    mapping = ColumnMapping.parse(" submit=time , duration=runtime,gpus=num_gpus,time_unit=m ")
    assert mapping == ColumnMapping("time", "runtime", "num_gpus", time_unit="m")
    assert mapping.columns() == {"submit": "time", "duration": "runtime", "gpus": "num_gpus"}
    with pytest.raises(ValueError, match=r"unknown key 'gpu' \(valid keys: submit, duration, gpus"):
        ColumnMapping.parse("submit=a,duration=b,gpu=c")
    with pytest.raises(ValueError, match=r"missing required key\(s\) gpus \(valid keys:"):
        ColumnMapping.parse("submit=a,duration=b")
    with pytest.raises(ValueError, match="expected key=value, got 'submit'"):
        ColumnMapping.parse("submit,duration=b,gpus=c")
    with pytest.raises(ValueError, match="key 'gpus' given twice"):
        ColumnMapping.parse("submit=a,duration=b,gpus=c,gpus=d")
    with pytest.raises(ValueError, match="empty value for key 'model'"):
        ColumnMapping.parse("submit=a,duration=b,gpus=c,model=")
    with pytest.raises(ValueError, match=r"time_unit must be one of 's', 'm', 'h', not 'd'"):
        ColumnMapping.parse("submit=a,duration=b,gpus=c,time_unit=d")


# --- the shared Chronus traces -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "counts", "zero_gpu_rows"),
    [
        ("MIX1", {JobClass.STRICT_SLO: 21_724, JobClass.BEST_EFFORT: 9_216}, 184),
        (
            "MIX2",
            {JobClass.SOFT_SLO: 18_525, JobClass.STRICT_SLO: 9_276, JobClass.BEST_EFFORT: 3_139},
            194,
        ),
    ],
)
def test_shared_mix_traces(name, counts, zero_gpu_rows):
    path = shared_file(f"chronus_philly/trace_job_Philly_{name}.csv")
    every = load_philly(path, zero_gpu="one")
    assert len(every) == 30_940  # SOURCES.md
    assert Counter(j.job_class for j in every) == counts
    assert len(load_philly(path)) == 30_940 - zero_gpu_rows  # zero-GPU rows skipped by default
    assert [j.submit_s for j in every] == sorted(j.submit_s for j in every)
    assert len({j.id for j in every}) == len(every)
    slo = [j for j in every if j.job_class is not JobClass.BEST_EFFORT]
    # Deadlines count from submission: every first deadline lies beyond the run time.
    assert all(j.deadlines[0].seconds_after_submit > j.duration_s for j in slo)
    assert min(j.duration_s for j in every) == 20 * 60  # minutes became seconds
    assert all(
        [d.reward for d in j.deadlines] == [100.0, 80.0, 50.0, 20.0]
        for j in slo
        if j.job_class is JobClass.SOFT_SLO
    )
