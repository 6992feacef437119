#!/usr/bin/env bash
# Installs the newest release of every dependency (no constraints.txt; torch stays at 2.13.0)
# into a scratch environment and runs the test suite there, so the next upstream break shows up
# here before it reaches a user. It prints what moved against constraints.txt.
# Usage: scripts/try_newest.sh [--freeze] [PYTEST ARGS...]
#   --freeze   after a green run, print the scratch environment as constraints.txt lines
# The scratch environment is in $MLSCHED_SCRATCH_VENV, or a new temporary directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
freeze=0
if [ "${1:-}" = "--freeze" ]; then
    freeze=1
    shift
fi
venv="${MLSCHED_SCRATCH_VENV:-$(mktemp -d -t mlsched-newest-XXXXXX)/venv}"
echo "scratch environment: $venv" >&2
MLSCHED_VENV="$venv" MLSCHED_CONSTRAINTS=none bash scripts/install.sh dev
"$venv/bin/python" -m pip install --quiet --upgrade --upgrade-strategy eager -e ".[dev]" \
    torch==2.13.0
current="$("$venv/bin/python" -m pip freeze --exclude-editable 2>/dev/null \
    | grep -v '^mlsched' | sed 's/^\(torch==[0-9.]*\)+.*/\1/')"
echo "versions that differ from constraints.txt (pinned -> newest):" >&2
NEWEST="$current" "$venv/bin/python" - "$root/constraints.txt" <<'PY' >&2
import os
import sys

def pins(lines):
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[name.lower().replace("_", "-")] = version
    return out

pinned = pins(open(sys.argv[1]))
newest = pins(os.environ["NEWEST"].splitlines())
moved = [
    f"  {name}: {pinned.get(name, '(not pinned)')} -> {newest.get(name, '(not installed: an extra outside dev)')}"
    for name in sorted(set(pinned) | set(newest))
    if pinned.get(name) != newest.get(name)
]
print("\n".join(moved) or "  (none)")
PY
"$venv/bin/pytest" "$@"
if [ "$freeze" = 1 ]; then
    printf '%s\n' "$current"
fi
