"""``mlsched simulate`` with its output redirected: progress as plain lines, never ``\\r``."""

from __future__ import annotations

from pathlib import Path

from .test_cli import ROWS, run_cli, write_trace


def test_redirected_simulate_writes_plain_progress_lines(tmp_path: Path):
    trace = write_trace(tmp_path / "data")
    proc = run_cli("simulate", "--trace", trace, "--policy", "fifo,srtf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\r" not in proc.stdout
    jobs = len(ROWS)  # 8: each job that ends crosses another tenth
    lines = proc.stderr.splitlines()
    for policy in ("fifo", "srtf"):
        assert [x for x in lines if x.startswith(f"{policy}: ")] == [
            f"{policy}: {100 * k // jobs}% ({k}/{jobs} jobs)" for k in range(1, jobs + 1)
        ]
