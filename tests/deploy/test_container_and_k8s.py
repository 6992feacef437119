"""deploy/container and deploy/k8s, checked offline (issue 18): every Kubernetes object against
the API's schemas (kubernetes-validate, strict), every daemon flag the manifests pass against the
real command-line parsers, and the Dockerfiles for what the images must do. No image is built:
CI has no container builder (docs in deploy/k8s/README.md say how to build them)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser

from mlsched.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
CONTAINER = REPO / "deploy" / "container"
KUBERNETES_VERSION = "1.31.0"  # the oldest minor release still supported upstream when written
DOCKERFILES = ("controller.Dockerfile", "agent.Dockerfile")


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found += [(path.name, d) for d in _documents(path)]
    return found


def _workload(kind: str, name: str) -> dict[str, Any]:
    for _, doc in _objects():
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} in deploy/k8s")


def _container(workload: dict[str, Any]) -> dict[str, Any]:
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("name,doc", _objects(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_object_is_valid_for_the_kubernetes_api(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_the_manifests_and_leaves_secrets_out() -> None:
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    listed = set(kustomization["resources"])
    assert {p.name for p in K8S.glob("*.yaml")} - listed == {
        "kustomization.yaml",
        "join-tokens.example.yaml",  # real tokens never go through git
    }
    assert all((K8S / name).is_file() for name in listed)


def _substituted(args: list[str], env: list[dict[str, Any]]) -> list[str]:
    """Arguments with Kubernetes' $(VAR) references replaced by a sample value of each var."""
    names = {e["name"] for e in env}
    out = []
    for arg in args:
        for ref in re.findall(r"\$\((\w+)\)", arg):
            assert ref in names, f"{arg} refers to {ref}, which the container does not define"
            arg = arg.replace(f"$({ref})", "10.0.0.11" if ref.endswith("_IP") else "gpu01")
        out.append(arg)
    return out


@pytest.mark.parametrize(
    "kind,name,command",
    [("StatefulSet", "mlsched-controller", "controller"), ("DaemonSet", "mlsched-agent", "agent")],
)
def test_the_daemons_accept_every_flag_the_manifests_pass(
    kind: str, name: str, command: str
) -> None:
    container = _container(_workload(kind, name))
    dockerfile = DockerfileParser(path=str(CONTAINER / f"{command}.Dockerfile"))
    entrypoint = _exec_form(dockerfile, "ENTRYPOINT")
    assert entrypoint[:2] == ["mlsched", command]
    args = entrypoint[2:] + _substituted(container["args"], container.get("env", []))
    parsed = build_parser().parse_args([command, *args])  # exits (SystemExit) on a bad flag
    assert parsed is not None


def test_the_agent_runs_with_only_the_capabilities_task_users_need() -> None:
    workload = _workload("DaemonSet", "mlsched-agent")
    spec, container = workload["spec"], _container(workload)
    security = container["securityContext"]
    needed = ["SETUID", "SETGID", "CHOWN", "KILL"]  # nodeagent/taskuser.py
    assert security["capabilities"] == {"drop": ["ALL"], "add": needed}
    assert security["allowPrivilegeEscalation"] is False
    assert spec["updateStrategy"]["type"] == "OnDelete"  # a rollout would end running jobs
    pod = spec["template"]["spec"]
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts == {v["name"] for v in pod["volumes"]}
    args = " ".join(container["args"])
    assert "--join-token-file=/etc/mlsched/join-tokens/$(MLSCHED_NODE_ID)" in args


def test_the_controller_runs_unprivileged_on_a_persistent_volume() -> None:
    workload = _workload("StatefulSet", "mlsched-controller")
    spec, container = workload["spec"], _container(workload)
    pod = spec["template"]["spec"]
    assert spec["replicas"] == 1  # one writer of its SQLite store
    assert pod["securityContext"]["runAsNonRoot"] is True
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    (claim,) = spec["volumeClaimTemplates"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/var/lib/mlsched"


def _exec_form(dockerfile: DockerfileParser, instruction: str) -> list[str]:
    (value,) = [i["value"] for i in dockerfile.structure if i["instruction"] == instruction]
    assert value.startswith("["), f"{instruction} must use the exec form, got {value}"
    return yaml.safe_load(value)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_dockerfiles_pin_their_base_and_torch_and_copy_what_exists(name: str) -> None:
    dockerfile = DockerfileParser(path=str(CONTAINER / name))
    base = dockerfile.baseimage
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", base), base  # no floating tag
    runs = [i["value"] for i in dockerfile.structure if i["instruction"] == "RUN"]
    torch = next(i for i, run in enumerate(runs) if "torch==2.13.0" in run)
    package = next(i for i, run in enumerate(runs) if "--constraint constraints.txt " in run)
    assert torch < package  # torch first (README), so pip keeps the pinned build
    role = name.split(".")[0]  # each image installs its role's extra (pyproject.toml)
    assert re.search(rf'"\.\[([a-z,]*,)?{role}(,[a-z,]*)?\]"', runs[package]), runs[package]
    for item in dockerfile.structure:
        if item["instruction"] in ("COPY", "ADD"):
            assert item["instruction"] == "COPY", "ADD fetches and unpacks: use COPY"
            *sources, _ = shlex.split(item["value"])
            for source in sources:
                assert (REPO / source).exists(), f"{name}: COPY {source}: not in the repository"


def test_the_controller_image_drops_root() -> None:
    dockerfile = DockerfileParser(path=str(CONTAINER / "controller.Dockerfile"))
    users = [i["value"] for i in dockerfile.structure if i["instruction"] == "USER"]
    assert users[-1] == "mlsched"


def test_the_manifests_name_the_images_the_dockerfiles_build() -> None:
    images = {
        _container(_workload(k, n))["image"].split(":")[0]
        for k, n in (("StatefulSet", "mlsched-controller"), ("DaemonSet", "mlsched-agent"))
    }
    assert images == {f"mlsched-{name.split('.')[0]}" for name in DOCKERFILES}
