"""The shim alone at the wire's floor (issue 18): `pip install mlsched[shim]` with exactly the
lowest grpcio and protobuf that pyproject.toml allows, into a clean environment, pulls no solver
and trains and checkpoints in local mode.

The floors are what the generated code in mlsched/v1 checks when it is imported; the first test
keeps pyproject.toml's floors equal to them, the second installs them into a scratch venv (no
system site-packages: torch from the same wheel as this environment's, through pip).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from importlib.metadata import version
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "mlsched" / "v1"
SOLVERS = ("mip", "highsbox", "scipy", "scikit-learn", "numpy", "cbcbox")
# pip's words for an index it could not reach (then the test skips; any other failure fails).
UNREACHABLE = re.compile(
    r"NewConnectionError|Max retries exceeded|Temporary failure in name resolution|"
    r"Network is unreachable|ConnectTimeout|ProxyError|Could not fetch URL|connection broken",
    re.I,
)


def _floors() -> dict[str, str]:
    """The `>=` floor of grpcio and protobuf in pyproject.toml's base dependencies."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in project["dependencies"]:
        found = re.fullmatch(r"(grpcio|protobuf)>=([\d.]+)", requirement)
        if found:
            floors[found.group(1)] = found.group(2)
    assert set(floors) == {"grpcio", "protobuf"}, project["dependencies"]
    return floors


def _generated_needs() -> dict[str, set[str]]:
    """The runtime versions the generated modules check for at import."""
    grpc_needs, protobuf_needs = set(), set()
    for path in GENERATED.glob("*_pb2*.py"):
        text = path.read_text()
        grpc_needs.update(re.findall(r"GRPC_GENERATED_VERSION = '([\d.]+)'", text))
        for major, minor, patch in re.findall(
            r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*"
            r"(\d+),\s*(\d+),\s*(\d+),",
            text,
        ):
            protobuf_needs.add(f"{major}.{minor}.{patch}")
    return {"grpcio": grpc_needs, "protobuf": protobuf_needs}


def test_the_floors_are_what_the_generated_code_checks() -> None:
    needs = _generated_needs()
    assert needs["grpcio"] and needs["protobuf"], "no version checks found in mlsched/v1"
    assert {k: {v} for k, v in _floors().items()} == needs


SCRIPT = textwrap.dedent(
    """
    import importlib, json, sys
    from importlib.metadata import version
    import torch
    import trainer_shim

    for name in ("agent", "common", "identity", "jobs", "trainer"):  # their version checks
        importlib.import_module(f"mlsched.v1.{name}_pb2")
        importlib.import_module(f"mlsched.v1.{name}_pb2_grpc")
    checkpoints, steps = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    with trainer_shim.init(checkpoint_dir=checkpoints, resume=True, max_iterations=steps) as job:
        step = restored = job.restore(model, optimizer=opt)
        while not job.should_stop():
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            job.report(step, loss=loss.item())
        job.save_checkpoint(step, model, optimizer=opt)
    print(json.dumps({
        "restored": restored,
        "step": step,
        "grpcio": version("grpcio"),
        "protobuf": version("protobuf"),
        "shim": trainer_shim.__file__,
        "heavy": sorted(m for m in ("numpy", "scipy", "mip", "sklearn") if m in sys.modules),
    }))
    """
)


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def _pip(python: Path, *args: str, cwd: Path) -> None:
    done = _run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", *args], cwd=cwd)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        if UNREACHABLE.search(output):
            pytest.skip(f"the package index is unreachable: {output.strip().splitlines()[-1]}")
        pytest.fail(f"pip install {' '.join(args)} failed:\n{output[-3000:]}")


def _source_copy(to: Path) -> Path:
    """The files a wheel of mlsched is built from, outside the checkout (an in-tree build
    would leave build/ in it, and two runs at once would share it)."""
    keep = (
        "pyproject.toml",
        "README.md",
        "mlsched",
        "controller",
        "nodeagent",
        "simulator",
        "trainer_shim",
    )
    to.mkdir()
    for name in keep:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, to / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, to / name)
    return to


@pytest.mark.packaging
@pytest.mark.timeout(600)
def test_shim_alone_at_the_floor_trains_and_checkpoints(tmp_path: Path) -> None:
    floors = _floors()
    started = time.monotonic()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # This checkout's pins, less the two the test moves to their floors.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        "".join(
            line + "\n"
            for line in (ROOT / "constraints.txt").read_text().splitlines()
            if not re.match(r"(grpcio|protobuf)==", line)
        )
    )
    # torch first, this environment's version: pip takes it from the same local wheel.
    _pip(python, "-c", str(constraints), f"torch=={version('torch')}", cwd=tmp_path)
    source = _source_copy(tmp_path / "src")
    _pip(
        python,
        "-c",
        str(constraints),
        f"{source}[shim]",
        f"grpcio=={floors['grpcio']}",
        f"protobuf=={floors['protobuf']}",
        cwd=tmp_path,
    )
    installed = _run([str(python), "-m", "pip", "list", "--format=json"], check=True).stdout
    names = {p["name"].lower(): p["version"] for p in json.loads(installed)}
    assert names["grpcio"] == floors["grpcio"] and names["protobuf"] == floors["protobuf"]
    assert [s for s in SOLVERS if s in names] == []
    for extra in ("nvidia-ml-py", "psutil", "prometheus-client", "tqdm", "matplotlib"):
        assert extra not in names, f"the shim pulled {extra}"

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    checkpoints = tmp_path / "checkpoints"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLSCHED_", "PYTHONPATH"))}
    env["TEMPORARILY_DISABLE_PROTOBUF_VERSION_CHECK"] = "false"
    results = []
    for steps in (5, 8):  # a fresh run, then a resume from its checkpoint
        done = _run([str(python), str(script), str(checkpoints), str(steps)], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    first, second = results
    assert (first["restored"], first["step"]) == (0, 5)
    assert (second["restored"], second["step"]) == (5, 8)
    assert Path(first["shim"]).is_relative_to(venv)
    assert (first["grpcio"], first["protobuf"]) == (floors["grpcio"], floors["protobuf"])
    assert first["heavy"] == []
    print(f"shim floor environment built and run in {time.monotonic() - started:.1f} s")
