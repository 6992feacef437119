#!/usr/bin/env bash
# Creates .venv (if needed) and installs mlsched into it, through constraints.txt: the versions
# the test suite has passed with (a fresh install must not pick up a release that breaks it).
# Usage: scripts/install.sh [EXTRAS]   the extras of pyproject.toml, comma-separated [all]:
#   all (every role on one machine: `mlsched demo`), dev (all + tests and lint), or one role's
#   shim, agent, controller, sim (docs/architecture.md, "Installs and extras"). torch is
#   installed first in every case.
#   MLSCHED_CONSTRAINTS=FILE   another constraints file; `none` installs the newest releases
#                              (scripts/try_newest.sh does that in a scratch environment).
#   MLSCHED_VENV=DIR           the environment to make [.venv]
# torch==2.13.0 goes first: a looser pin would pull gigabytes of CUDA wheels.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="${MLSCHED_VENV:-.venv}"
constraints="${MLSCHED_CONSTRAINTS:-$root/constraints.txt}"
pin=()
if [ "$constraints" != "none" ]; then
    if [ ! -f "$constraints" ]; then
        echo "install.sh: constraints file $constraints not found" >&2
        exit 2
    fi
    pin=(-c "$constraints")
fi
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "${pin[@]}" torch==2.13.0
extras="${1:-all}"
"$venv/bin/python" -m pip install --quiet "${pin[@]}" -e ".[$extras]"
# Compile the checkout's modules once: every controller, agent, trainer and CLI process imports
# them, and with PYTHONDONTWRITEBYTECODE set (as some CI images do) each process would compile
# them again. Python checks each file's timestamp, so an edited module is still recompiled.
"$venv/bin/python" -m compileall -q -j 0 mlsched controller nodeagent trainer_shim simulator \
    examples > /dev/null
