"""``--json`` means one thing on every command: a flag that prints JSON on stdout instead of the
human-readable report (docs/cli.md). A command that can also write its JSON to a file takes
``--json-out PATH`` for that.

``simulate`` and ``chic-simulate`` once took ``--json PATH``; :func:`parse_args` answers that
old form (and ``--json=PATH``) with what to write instead. Standard library only (the CLI
imports it for every command).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path


def add_json_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--json`` (a flag) and ``--json-out PATH`` for a command whose JSON is ``what``."""
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as JSON on stdout instead of the report (logs stay on stderr)",
    )
    p.add_argument("--json-out", type=Path, metavar="PATH", help=f"write {what} as JSON here")


def old_json_path(argv: Sequence[str], unrecognized: Sequence[str]) -> str | None:
    """The ``PATH`` of an old ``--json PATH`` in ``argv``: an argument argparse did not
    recognise right after ``--json``; None when there is none."""
    for before, token in itertools.pairwise(argv):
        if before == "--json" and token in unrecognized:
            return token
    return None


def old_json_message(path: str) -> str:
    """What to say to a user who passed ``--json PATH``."""
    return f"`--json` is now a flag that prints to stdout; write a file with --json-out {path}"


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, prog: str | None = None
) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that on a command with ``--json-out`` an old
    ``--json PATH`` (or ``--json=PATH``) stops with :func:`old_json_message` as
    ``<prog>: error: ...`` (exit status 2, as argparse's own errors) instead of argparse's
    "unrecognized arguments: PATH"."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = [
        part
        for token in argv
        for part in (("--json", token[7:]) if token.startswith("--json=") else (token,))
    ]
    args, unrecognized = parser.parse_known_args(split)
    path = old_json_path(split, unrecognized) if hasattr(args, "json_out") else None
    if path is not None:
        parser.exit(2, f"{prog or parser.prog}: error: {old_json_message(path)}\n")
    if split != argv:  # argparse's own answer to a --json=VALUE on any other command
        args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:
        parser.error(f"unrecognized arguments: {' '.join(unrecognized)}")
    return args
