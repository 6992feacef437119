"""Extras that match the roles (issue 18): the CLI's light start, its message for a missing
extra, and mlsched/extras.py kept equal to pyproject.toml's extras."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mlsched import extras
from mlsched.cli import ROLE_COMMANDS, build_parser

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[2]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
HEAVY = ("numpy", "scipy", "mip", "highsbox", "torch", "sklearn", "matplotlib")

# Runs mlsched's main in a fresh interpreter, with BLOCKED's top-level modules made
# uninstallable (find_spec finds nothing, import raises), and prints what was imported.
PROBE = """
import importlib.abc, importlib.util, json, sys
BLOCKED = set(json.loads(sys.argv[1]))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
real_find_spec = importlib.util.find_spec
def find_spec(name, package=None):
    return None if name.partition(".")[0] in BLOCKED else real_find_spec(name, package)
importlib.util.find_spec = find_spec
from mlsched.cli import main
try:
    code = main(sys.argv[2:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted({m.partition(".")[0] for m in sys.modules})}))
"""


def _probe(*argv: str, blocked: tuple[str, ...] = ()) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(blocked), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["jobs", "--help"], ["submit", "--help"], ["contexts", "--help"]],
)
def test_help_and_client_commands_import_only_the_base(argv: list[str]) -> None:
    """`mlsched --help` and the client commands load neither a role's packages nor the
    controller's, agent's or simulator's modules."""
    result, _ = _probe(*argv)
    assert result["code"] == 0
    loaded = set(result["modules"])
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
    assert loaded.isdisjoint({"controller", "nodeagent", "simulator", "trainer_shim"})
    assert loaded.isdisjoint({"psutil", "pynvml", "prometheus_client", "tqdm"})


def test_a_client_command_runs_without_any_role_package() -> None:
    """`mlsched jobs` in an environment without the roles' packages reaches the controller
    (none there: UNAVAILABLE, exit 8), not an ImportError."""
    blocked = tuple(dict.fromkeys(m for ms in extras.EXTRA_MODULES.values() for m in ms))
    result, stderr = _probe(
        "jobs", "--insecure", "--controller", "127.0.0.1:1", "--user", "u", blocked=blocked
    )
    assert result["code"] == 8, stderr
    assert "UNAVAILABLE" in stderr


@pytest.mark.parametrize(
    ("argv", "missing", "extra"),
    [
        (["controller", "--state-dir", "x"], ("mip",), "controller"),
        (["controller", "--help"], ("psutil",), "controller"),
        (["agent"], ("pynvml", "psutil"), "agent"),
        (["simulate", "--trace", "x"], ("numpy",), "sim"),
        (["mlfs-train", "--trace", "x", "--out", "y"], ("torch",), "sim,shim"),
        (["demo"], ("torch",), "all"),
    ],
)
def test_a_missing_package_names_the_extra(argv: list[str], missing: tuple, extra: str) -> None:
    result, stderr = _probe(*argv, blocked=missing)
    assert result["code"] == 1, stderr
    assert f"install mlsched[{extra}]" in stderr, stderr
    assert "Traceback" not in stderr
    for module in missing:
        assert {"pynvml": "nvidia-ml-py"}.get(module, module) in stderr  # as pip names it


def test_an_import_failing_while_running_names_the_extra() -> None:
    """A package a feature loads late (the controller's mlf-rl policy needs torch)."""
    error = ModuleNotFoundError("No module named 'torch'", name="torch")
    explained = extras.explain("controller", error)
    assert explained is not None
    assert "install mlsched[controller,shim]" in str(explained)
    own = ModuleNotFoundError("No module named 'controller.x'", name="controller.x")
    assert extras.explain("controller", own) is None  # a bug, not a missing extra


def test_the_stand_ins_help_lines_are_the_commands_own() -> None:
    """ROLE_COMMANDS repeats each role command's help line; it must equal the real one."""
    for name, module, adder, text in ROLE_COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        getattr(importlib.import_module(module), adder)(sub)
        (action,) = sub._choices_actions
        assert (action.dest, action.help) == (name, text)


def test_the_light_parser_lists_the_same_commands_as_the_full_one() -> None:
    def commands(parser: argparse.ArgumentParser) -> list[str]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return list(action.choices)

    assert commands(build_parser("")) == commands(build_parser())


def _modules(requirements: list[str]) -> set[str]:
    """The import names of an extra's requirements (its mlsched[...] references expanded)."""
    import_names = {
        "nvidia-ml-py": "pynvml",
        "scikit-learn": "sklearn",
        "grpcio-health-checking": "grpc_health",
    }
    found: set[str] = set()
    for requirement in requirements:
        nested = re.fullmatch(r"mlsched\[([\w,]+)\]", requirement)
        if nested:
            for extra in nested.group(1).split(","):
                found |= _modules(EXTRAS[extra])
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower()
        found.add(import_names.get(name, name.replace("-", "_")))
    return found


@pytest.mark.parametrize("extra", ["shim", "agent", "controller", "sim", "all"])
def test_the_extras_modules_match_pyproject(extra: str) -> None:
    wanted = _modules(EXTRAS[extra]) - {"matplotlib"}  # only `simulate --plot` loads it
    assert set(extras.EXTRA_MODULES[extra]) == wanted


def test_dev_installs_all() -> None:
    assert "mlsched[all," in EXTRAS["dev"][0]


@pytest.mark.parametrize(
    ("feature", "role"),
    [("sweep", "sim"), ("postgres", "controller"), ("lightning", "shim"), ("hf", "shim")],
)
def test_a_feature_extra_brings_its_role(feature: str, role: str) -> None:
    """`install.sh sweep` or `pip install mlsched[hf]` alone gives a working feature."""
    assert f"mlsched[{role}]" in EXTRAS[feature]
