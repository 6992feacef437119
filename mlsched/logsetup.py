"""Logging for every daemon: ``--log-level`` and ``--log-format text|json`` (one shared setup).

Records may carry ``job_id`` and ``node_id`` (``log.info(..., extra=fields(job_id=...))``); the
text format appends them as ``key=value``, the JSON format as keys of the line's object.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, TextIO

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
FORMATS = ("text", "json")
FIELDS = ("job_id", "node_id", "event", "policy")  # the structured fields a record may carry
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def fields(**values: str) -> dict[str, str]:
    """``extra=`` for a record: the non-empty structured fields among ``values``."""
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields {sorted(unknown)}; known: {', '.join(FIELDS)}")
    return {k: v for k, v in values.items() if v}


def _structured(record: logging.LogRecord) -> dict[str, Any]:
    return {k: getattr(record, k) for k in FIELDS if getattr(record, k, "")}


class TextFormatter(logging.Formatter):
    """The usual text line, then the record's structured fields as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = " ".join(f"{k}={v}" for k, v in _structured(record).items())
        return f"{line} [{extra}]" if extra else line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (epoch seconds), level, logger, message, fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": round(record.created, 3),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_structured(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format`` on a daemon's command."""
    parser.add_argument(
        "--log-level",
        default=os.environ.get("MLSCHED_LOG_LEVEL", "INFO").upper(),
        type=str.upper,
        choices=LEVELS,
        help="least severe level logged (env MLSCHED_LOG_LEVEL) [%(default)s]",
    )
    parser.add_argument(
        "--log-format",
        default=os.environ.get("MLSCHED_LOG_FORMAT", "text"),
        choices=FORMATS,
        help="text lines, or one JSON object a line with job_id/node_id keys (env"
        " MLSCHED_LOG_FORMAT) [%(default)s]",
    )


def configure(level: str = "INFO", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Replace the root logger's handlers with one writing ``fmt`` lines at ``level``."""
    if level.upper() not in LEVELS:
        raise ValueError(f"log level {level!r}: one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
