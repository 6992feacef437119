#!/usr/bin/env bash
# Regenerates mlsched/v1/*_pb2*.py(i) from proto/ with pinned generators.
# Usage: scripts/gen_protos.sh [OUT_DIR]   (default: the repository root)
# CI runs it into a temporary directory and fails when the checked-in code differs.
set -euo pipefail
GRPCIO_TOOLS_VERSION="1.85.1"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root}"
have="$(python -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  echo "gen_protos: need grpcio-tools==$GRPCIO_TOOLS_VERSION (found '${have:-none}'):" >&2
  echo "  pip install grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2
  exit 2
fi
mkdir -p "$out/mlsched/v1"
cd "$root/proto"
python -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  mlsched/v1/*.proto
