#!/usr/bin/env bash
# Fails when the checked-in generated code differs from what scripts/gen_protos.sh makes of
# proto/ with the pinned generators: a .proto changed without regenerating, generated code edited
# by hand, a stale module left behind for a deleted .proto, or a different generator version.
#
# Usage: scripts/check_protos.sh [TREE]
#   Compares TREE/mlsched/v1/*_pb2*.py* (default TREE: the repository root) with a fresh
#   generation into a temporary directory. Writes nothing into the repository.
# Exit status: 0 up to date; 1 drift (the diff is printed); 2 could not regenerate (e.g. the
#   pinned grpcio-tools is not installed; gen_protos.sh says which).
# Run by CI and by tests/test_generated_code.py.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
tree="${1:-$root}"
if [ ! -d "$tree" ]; then
  echo "check_protos: $tree is not a directory" >&2
  exit 2
fi
tree="$(cd "$tree" && pwd)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/mlsched-check-protos.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

status=0
bash "$root/scripts/gen_protos.sh" "$tmp/out" || status=$?
if [ "$status" -ne 0 ]; then
  echo "check_protos: scripts/gen_protos.sh failed (exit $status); cannot check the generated code" >&2
  exit 2
fi

# Copy the generated modules and stubs of both sides (no __init__.py, no bytecode) side by side.
collect() {
  local from="$1" to="$2" f
  mkdir -p "$to"
  for f in "$from"/*_pb2*.py*; do
    [ -f "$f" ] || continue
    case "$f" in *.pyc | *.pyo) continue ;; esac
    cp "$f" "$to/"
  done
}
collect "$tmp/out/mlsched/v1" "$tmp/generated"
collect "$tree/mlsched/v1" "$tmp/checked-in"

if [ -z "$(ls -A "$tmp/generated")" ]; then
  echo "check_protos: scripts/gen_protos.sh generated nothing from proto/mlsched/v1" >&2
  exit 2
fi

cd "$tmp"
if diff -r -u checked-in generated >diff.txt 2>&1; then
  echo "check_protos: mlsched/v1 generated code is up to date with proto/"
  exit 0
fi

limit=200
{
  echo "check_protos: the checked-in generated code in mlsched/v1 does not match proto/."
  echo "Files that differ (checked-in = $tree/mlsched/v1, generated = fresh scripts/gen_protos.sh):"
  diff -r -q checked-in generated | sed 's/^/  /' || true
  echo
  head -n "$limit" diff.txt
  lines="$(wc -l <diff.txt)"
  if [ "$lines" -gt "$limit" ]; then
    echo "... ($((lines - limit)) more diff lines)"
  fi
  echo
  echo "To fix: run scripts/gen_protos.sh (needs grpcio-tools, at the version pinned there:"
  echo "pip install -e '.[dev]'), delete any mlsched/v1/*_pb2* files whose .proto no longer exists,"
  echo "and commit the regenerated files together with the .proto change. Never edit generated"
  echo "files by hand; change proto/ and regenerate (docs/wire.md)."
} >&2
exit 1
