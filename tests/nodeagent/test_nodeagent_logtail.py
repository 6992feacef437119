"""Log tails."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.logtail import (
    DEFAULT_FETCH_BYTES,
    MAX_FETCH_BYTES,
    fetch_size,
    tail_bytes,
    tail_lines,
)


def test_whole_file_when_small(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("one\ntwo\n")
    assert tail_bytes(path, 100) == ("one\ntwo\n", False)


def test_cut_drops_the_partial_first_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("first line\nsecond\nthird\n")
    text, truncated = tail_bytes(path, 12)  # "econd\nthird\n"
    assert truncated
    assert text == "third\n"
    text, truncated = tail_bytes(path, 5)  # no complete line: keep the bytes
    assert truncated and text == "hird\n"


def test_undecodable_bytes_are_replaced(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes("héllo\n".encode()[2:])  # cut in the middle of a character
    text, _ = tail_bytes(path, 100)
    assert text.endswith("llo\n")


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        tail_bytes(tmp_path / "nope.log", 10)
    assert tail_lines(tmp_path / "nope.log", 5) == ""


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_lines(path, 3) == "line 97\nline 98\nline 99"
    assert tail_lines(path, 0) == ""


def test_fetch_size() -> None:
    assert fetch_size(0) == DEFAULT_FETCH_BYTES == 64 * 1024
    assert fetch_size(-1) == DEFAULT_FETCH_BYTES
    assert fetch_size(100) == 100
    assert fetch_size(10**12) == MAX_FETCH_BYTES
