"""The checked-in gRPC code in mlsched/v1 matches proto/ and follows the wire conventions.

Conventions (docs/wire.md): every proto is in package ``mlsched.v1``; an RPC ``<Rpc>`` takes
``<Rpc>Request`` and returns ``<Rpc>Response``; each ``proto/mlsched/v1/<name>.proto`` has exactly
``<name>_pb2.py``, ``<name>_pb2.pyi`` and ``<name>_pb2_grpc.py`` checked in next to it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROTO_DIR = ROOT / "proto" / "mlsched" / "v1"
GENERATED_DIR = ROOT / "mlsched" / "v1"
GEN_SCRIPT = ROOT / "scripts" / "gen_protos.sh"
CHECK_SCRIPT = ROOT / "scripts" / "check_protos.sh"
PACKAGE = "mlsched.v1"
# The services docs/wire.md describes; more may be added.
DOCUMENTED_SERVICES = {"JobService", "AgentService", "TrainerService"}

PROTO_NAMES = sorted(p.stem for p in PROTO_DIR.glob("*.proto"))


def pinned_grpcio_tools_version() -> str:
    """The generator version scripts/gen_protos.sh insists on (its single source of truth)."""
    match = re.search(r'^GRPCIO_TOOLS_VERSION="([^"]+)"', GEN_SCRIPT.read_text(), re.MULTILINE)
    assert match, f"no GRPCIO_TOOLS_VERSION=... line in {GEN_SCRIPT}"
    return match.group(1)


def installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@pytest.fixture
def script_env(tmp_path: Path) -> dict[str, str]:
    """Environment for the shell scripts: their `python` is this interpreter.

    The scripts run `python -m grpc_tools.protoc`; the `python` first on PATH need not be the
    interpreter running the tests (e.g. pytest started as .venv/bin/pytest without activating).
    """
    pinned = pinned_grpcio_tools_version()
    found = installed_version("grpcio-tools")
    if found != pinned:
        pytest.skip(
            f"regenerating needs grpcio-tools=={pinned} in this interpreter (found "
            f"{found or 'none'}); install it with: pip install grpcio-tools=={pinned}"
        )
    missing = [tool for tool in ("bash", "diff") if shutil.which(tool) is None]
    if missing or not sys.executable:
        pytest.skip(f"needs bash, diff and a known interpreter path (missing: {missing})")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMPDIR": str(scratch),
    }


def run_check(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CHECK_SCRIPT), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_checked_in_code_matches_protos(script_env: dict[str, str], tmp_path: Path) -> None:
    result = run_check(script_env, tmp_path)
    assert result.returncode == 0, (
        f"scripts/check_protos.sh exited {result.returncode}:\n{result.stdout}{result.stderr}"
    )
    assert not any((tmp_path / "scratch").iterdir()), "check_protos.sh left temporary files"


def test_check_reports_drift(script_env: dict[str, str], tmp_path: Path) -> None:
    """The check is not vacuous: an edited module, a stale one and a missing one all fail it."""
    copy = tmp_path / "tree" / "mlsched" / "v1"
    copy.mkdir(parents=True)
    for path in GENERATED_DIR.glob("*_pb2*.py*"):
        if path.suffix != ".pyc":
            shutil.copy2(path, copy / path.name)
    edited = copy / f"{PROTO_NAMES[0]}_pb2.py"
    edited.write_text(edited.read_text() + "# edited by hand\n")
    (copy / "removed_pb2.py").write_text("# module of a deleted .proto\n")
    (copy / f"{PROTO_NAMES[-1]}_pb2.pyi").unlink()

    result = run_check(script_env, tmp_path, str(tmp_path / "tree"))

    assert result.returncode == 1, f"expected drift (exit 1):\n{result.stdout}{result.stderr}"
    assert "does not match proto/" in result.stderr
    assert "scripts/gen_protos.sh" in result.stderr  # how to fix
    assert edited.name in result.stderr
    assert "Only in checked-in: removed_pb2.py" in result.stderr
    assert f"Only in generated: {PROTO_NAMES[-1]}_pb2.pyi" in result.stderr


def test_every_proto_has_its_generated_files() -> None:
    assert PROTO_NAMES, f"no .proto files in {PROTO_DIR}"
    expected = {
        f"{name}{suffix}"
        for name in PROTO_NAMES
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
    }
    present = {path.name for path in GENERATED_DIR.glob("*_pb2*.py*") if path.suffix != ".pyc"}
    assert present == expected, (
        f"missing: {sorted(expected - present)}, stale: {sorted(present - expected)}; "
        "run scripts/gen_protos.sh"
    )


@pytest.mark.parametrize("name", PROTO_NAMES)
def test_generated_modules_import_with_package(name: str) -> None:
    pb2 = importlib.import_module(f"{PACKAGE}.{name}_pb2")
    importlib.import_module(f"{PACKAGE}.{name}_pb2_grpc")
    assert pb2.DESCRIPTOR.name == f"mlsched/v1/{name}.proto"
    assert pb2.DESCRIPTOR.package == PACKAGE


@pytest.mark.parametrize("name", PROTO_NAMES)
def test_rpc_types_are_named_after_the_rpc(name: str) -> None:
    pb2 = importlib.import_module(f"{PACKAGE}.{name}_pb2")
    grpc_module = importlib.import_module(f"{PACKAGE}.{name}_pb2_grpc")
    for service in pb2.DESCRIPTOR.services_by_name.values():
        assert service.full_name == f"{PACKAGE}.{service.name}"
        assert service.methods, f"{service.full_name} has no RPCs"
        for method in service.methods:
            rpc = f"{service.name}.{method.name}"
            assert method.input_type.full_name == f"{PACKAGE}.{method.name}Request", rpc
            assert method.output_type.full_name == f"{PACKAGE}.{method.name}Response", rpc
        for generated in (
            f"{service.name}Stub",
            f"{service.name}Servicer",
            f"add_{service.name}Servicer_to_server",
        ):
            assert hasattr(grpc_module, generated), f"{grpc_module.__name__} lacks {generated}"


def test_documented_services_exist() -> None:
    services = set()
    for name in PROTO_NAMES:
        pb2 = importlib.import_module(f"{PACKAGE}.{name}_pb2")
        services.update(pb2.DESCRIPTOR.services_by_name)
    assert services >= DOCUMENTED_SERVICES, f"missing: {sorted(DOCUMENTED_SERVICES - services)}"
