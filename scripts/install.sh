#!/usr/bin/env bash
# Creates .venv (if needed) and installs mlsched into it.
# Usage: scripts/install.sh [EXTRAS]   e.g. `dev` (tests, lint, simulator plots) or `sim`.
# torch==2.13.0 goes first: a looser pin would pull gigabytes of CUDA wheels.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python3 -m venv .venv
.venv/bin/python -m pip install --quiet torch==2.13.0
extras="${1:-}"
.venv/bin/python -m pip install --quiet -e ".${extras:+[$extras]}"
