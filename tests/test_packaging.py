"""What a fresh install relies on: pinned dependencies, package data, one default policy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import distributions, version
from pathlib import Path

import pytest

from controller.policy import available_policies
from controller.policy.registry import DEFAULT_POLICY

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    """The normalised distribution name of a PEP 508 requirement."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, pinned = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not an exact pin"
            pins[_name(name)] = pinned
    return pins


def test_every_dependency_and_dev_tool_is_pinned_in_the_constraints():
    project = PYPROJECT["project"]
    wanted = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        wanted += [r for r in extra if not r.startswith("mlsched")]
    missing = sorted({_name(r) for r in wanted} - set(_pins()))
    assert missing == [], f"add these to constraints.txt: {missing}"


def test_what_the_pinned_packages_require_is_pinned_too():
    # A package pulled in by a pinned one and left out of constraints.txt is installed at
    # whatever was released that morning (joblib 1.6 began to require cloudpickle, unpinned
    # here until 2026-11-29). Read from the installed packages' own metadata.
    from packaging.requirements import Requirement

    pins = _pins()
    unpinned = set()
    for dist in distributions():
        if _name(dist.metadata["Name"]) not in pins:
            continue
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue  # another platform's or an extra's requirement
            if _name(requirement.name) not in pins:
                unpinned.add(f"{_name(requirement.name)} (for {dist.metadata['Name']})")
    assert sorted(unpinned) == [], "add these to constraints.txt"


def test_the_constraints_pin_torch_as_the_readme_installs_it():
    assert _pins()["torch"] == "2.13.0"


def test_no_dependency_is_left_unimported():
    """A dependency the code never imports is dead weight for every install."""
    sources = "\n".join(
        p.read_text()
        for folder in ("mlsched", "controller", "nodeagent", "trainer_shim", "simulator")
        for p in (ROOT / folder).rglob("*.py")
    )
    imported_as = {
        "grpcio": "grpc",
        "protobuf": "google.protobuf",
        "nvidia-ml-py": "pynvml",
        "pyyaml": "yaml",
        "highsbox": "mip",  # python-mip loads its HiGHS library
        "scikit-learn": "sklearn",
        "grpcio-health-checking": "grpc_health",
    }
    extras = PYPROJECT["project"]["optional-dependencies"]
    wanted = [*PYPROJECT["project"]["dependencies"]]
    for role in ("shim", "agent", "controller", "sim"):
        wanted += [r for r in extras[role] if not r.startswith("mlsched")]
    for requirement in wanted:
        module = imported_as.get(_name(requirement), _name(requirement).replace("-", "_"))
        assert re.search(rf"^\s*(import|from) {re.escape(module)}\b", sources, re.M), requirement


def test_highs_is_usable_through_python_mip():
    mip = pytest.importorskip("mip")
    model = mip.Model(sense=mip.MAXIMIZE, solver_name=mip.HIGHS)
    model.verbose = 0
    x, y = model.add_var(var_type=mip.BINARY), model.add_var(var_type=mip.BINARY)
    model.objective = 3 * x + 2 * y
    model += x + y <= 1
    assert model.optimize() == mip.OptimizationStatus.OPTIMAL
    assert model.objective_value == pytest.approx(3.0)


def test_every_package_data_pattern_matches_a_file():
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        folder = ROOT / package.replace(".", "/")
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches nothing"


def test_mlsched_version_reports_the_installed_version():
    out = subprocess.run(
        [sys.executable, "-m", "mlsched", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == f"mlsched {version('mlsched')}"


def test_controller_help_lists_the_policies_and_the_default():
    out = subprocess.run(
        [sys.executable, "-m", "mlsched", "controller", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "1000"},  # no line breaks inside policy names
    ).stdout
    flat = " ".join(out.split())
    for name in available_policies():
        assert name in flat
    assert f"default {DEFAULT_POLICY}" in flat


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("deploy/systemd/mlsched-controller.service", r"^Environment=MLSCHED_POLICY=(\S+)$"),
        ("deploy/config/controller.env.example", r"^#MLSCHED_POLICY=(\S+)$"),
        ("README.md", r"The controller's default policy is (\w+)"),
        ("docs/architecture.md", r"The default policy is\s+`([\w-]+)`"),
        ("docs/policies.md", r"The live controller's default is `([\w-]+)`"),
    ],
)
def test_one_default_policy_everywhere(path, pattern):
    found = re.findall(pattern, (ROOT / path).read_text(), re.M)
    assert found and {f.lower() for f in found} == {DEFAULT_POLICY}, (path, found)


def test_the_light_list_of_policy_names_is_the_registrys() -> None:
    from controller.policy.names import POLICY_NAMES
    from controller.policy.registry import _FACTORIES

    assert sorted(POLICY_NAMES) == sorted(_FACTORIES)
    assert DEFAULT_POLICY in POLICY_NAMES


def test_mlsched_help_imports_no_solver_and_no_policy() -> None:
    """``mlsched --help`` (and ``controller --help``) name the policies without importing them,
    nor the MILP solver, scipy, scikit-learn or torch (issue 18)."""
    probe = (
        "import sys\n"
        "from mlsched.cli import main\n"
        "for argv in (['--help'], ['controller', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = ('mip', 'highsbox', 'scipy', 'sklearn', 'torch', 'numpy',"
        " 'controller.policy.registry')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[]"
