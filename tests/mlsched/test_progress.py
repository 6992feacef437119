"""Progress reporting: plain lines every tenth of the work without a terminal, a tqdm bar with
an ETA on one."""

from __future__ import annotations

import io

from mlsched.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_a_line_per_tenth_and_no_carriage_return():
    out = io.StringIO()
    progress = Progress("fifo", "jobs", out)
    for done in range(101):
        progress(done, 100)
    progress.close()
    lines = out.getvalue().splitlines()
    assert lines == [f"fifo: {p}% ({p}/100 jobs)" for p in range(0, 101, 10)]
    assert "\r" not in out.getvalue()


def test_uneven_steps_write_one_line_per_tenth_crossed():
    out = io.StringIO()
    progress = Progress("srtf", "jobs", out)
    for done in (0, 3, 4, 9, 10):  # of 10: 0 %, 30 % (past 10 and 20), 40 %, 90 %, 100 %
        progress(done, 10)
    assert [line.split()[1] for line in out.getvalue().splitlines()] == [
        "0%",
        "30%",
        "40%",
        "90%",
        "100%",
    ]


def test_on_a_terminal_a_tqdm_bar_with_its_eta():
    out = Terminal()
    progress = Progress("fifo", "jobs", out)
    for done in range(9):
        progress(done, 8)
    progress.close()
    text = out.getvalue()
    assert "\r" in text and "8/8" in text and "100%" in text
    assert "<" in text  # tqdm's [elapsed<remaining]
