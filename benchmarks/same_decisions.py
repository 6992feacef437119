"""Check that a change to MLFS' policies changes no decision: cycle by cycle on a trace slice.

The package ``controller/policy/mlfs`` is copied to a temporary folder under another name,
with the files named by ``--old`` as they are at a git revision (``--base``, default
``HEAD``); the simulator runs the working tree's policy and, at every cycle, asks the old
copy for its decision on the same snapshot. The two
``Decision`` objects are compared with ``==`` (every launch, placement, renewal, suspension,
migration and stop, in order); the first difference stops the run with exit status 1.

    .venv/bin/python benchmarks/same_decisions.py --old rl/cycle.py,rl/features.py,book.py \
        --trace MIX2.csv --policy mlf-rl --limit 2000 --cluster 10x8 --mlfs-features

Prints, per policy, the cycles compared and the seconds each copy spent deciding.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.cli import add_simulate_command, prepare_run  # noqa: E402
from simulator.engine import Simulation  # noqa: E402

PACKAGE = "controller/policy/mlfs"
OLD = "mlfs_old"


def copy_old(base: str, files: list[str], into: Path) -> None:
    """``PACKAGE`` as the importable package ``OLD`` under ``into``: the working tree's, with
    ``files`` (paths inside the package) as they are at ``base``, so that other people's
    uncommitted edits to the package count on both sides."""
    target = into / OLD
    shutil.copytree(ROOT / PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    for name in files:
        show = ["git", "-C", str(ROOT), "show", f"{base}:{PACKAGE}/{name}"]
        text = subprocess.run(show, check=True, capture_output=True, text=True).stdout
        (target / name).write_text(text)
    for path in target.rglob("*.py"):
        text = path.read_text().replace("controller.policy.mlfs", OLD)
        path.write_text(text)


def make(name: str, prefix: str) -> object:
    """The policy ``name`` (mlf-h, mlf-rl, mlfs) from the package at ``prefix``."""
    if name == "mlf-h":
        return importlib.import_module(f"{prefix}.policy").MlfhPolicy()
    rl = importlib.import_module(f"{prefix}.rl.policy")
    return rl.MlfRlPolicy(load_control=name == "mlfs", name=name)


class Twin:
    """Decides with the new policy; asks the old one too and raises on a difference."""

    def __init__(self, new: object, old: object) -> None:
        self.new, self.old = new, old
        self.name = new.name  # type: ignore[attr-defined]
        self.cycles = 0
        self.seconds = [0.0, 0.0]

    def decide(self, snapshot):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        mine = self.new.decide(snapshot)  # type: ignore[attr-defined]
        t1 = time.perf_counter()
        theirs = self.old.decide(snapshot)  # type: ignore[attr-defined]
        t2 = time.perf_counter()
        self.seconds[0] += t1 - t0
        self.seconds[1] += t2 - t1
        self.cycles += 1
        if mine != theirs:
            raise SystemExit(
                f"{self.name}: cycle {self.cycles} at t={snapshot.now} differs:\n"
                f"new {mine}\nold {theirs}"
            )
        return mine


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_command(sub)
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--base", default="HEAD")
    own.add_argument(
        "--old", default="", help="comma-separated files of the package to take from --base"
    )
    known, rest = own.parse_known_args()
    args = parser.parse_args(["simulate", *rest])
    run = prepare_run(args)
    with tempfile.TemporaryDirectory() as tmp:
        copy_old(known.base, [f for f in known.old.split(",") if f], Path(tmp))
        sys.path.insert(0, tmp)
        for name in args.policy.split(","):
            twin = Twin(make(name, "controller.policy.mlfs"), make(name, OLD))
            Simulation(run.jobs, twin, run.shape, run.model, run.config).run()
            new_s, old_s = twin.seconds
            print(
                f"{name}: {twin.cycles} cycles identical; decide s new {new_s:.1f} "
                f"old {old_s:.1f} (base {known.base})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
