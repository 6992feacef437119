"""The README's secure setup as processes: a controller started with its documented flags, an
agent joining with a one-time token and the CA file, a user with an issued bundle. Plaintext is
refused, the spent token cannot join a second agent, and a restarted agent keeps its identity."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from controller.admin_cli import issue_join_token
from mlsched.localcluster import LocalCluster
from mlsched.security import bundle
from mlsched.v1 import jobs_pb2, jobs_pb2_grpc

pytestmark = pytest.mark.integration


def _plaintext_list_jobs(address: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        try:
            stub.ListJobs(
                jobs_pb2.ListJobsRequest(), metadata=(("mlsched-user", "alice"),), timeout=10
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_the_readme_controller_refuses_plaintext_and_keeps_its_keys_private(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    # README "Using it": --listen, --state-dir, --tls-name (port 0 here; the join endpoint too)
    controller = subprocess.Popen(
        [sys.executable, "-m", "mlsched", "controller", "--listen", "127.0.0.1:0",
         "--join-listen", "127.0.0.1:0", "--state-dir", str(state), "--tls-name", "ctl"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert controller.stdout is not None
        address = controller.stdout.readline().split()[-1]
        join_address = controller.stdout.readline().split()[-1]
        assert _plaintext_list_jobs(address) == grpc.StatusCode.UNAVAILABLE
        assert _plaintext_list_jobs(join_address) == grpc.StatusCode.UNAVAILABLE
        for key in ("ca.key", "server.key"):
            assert stat.S_IMODE((state / "tls" / key).stat().st_mode) == 0o600
        out = tmp_path / "alice"
        issued = subprocess.run(
            [sys.executable, "-m", "mlsched", "admin", "issue-user", "alice",
             "--state-dir", str(state), "--out", str(out)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert issued.returncode == 0, issued.stderr
        assert stat.S_IMODE((out / "key.pem").stat().st_mode) == 0o600
        listed = subprocess.run(
            [sys.executable, "-m", "mlsched", "jobs", "--json", "--controller", address,
             "--credentials", str(out)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (listed.returncode, listed.stdout.strip()) == (0, "[]"), listed.stderr
    finally:
        controller.terminate()
        controller.wait(timeout=30)


def test_a_spent_token_joins_no_second_agent_and_a_restarted_agent_keeps_its_identity(
    make_cluster: object, tmp_path: Path
) -> None:
    cluster: LocalCluster = make_cluster(nodes={"node-a": 1})  # type: ignore[operator]
    token_file = cluster.root / "node-a.join-token"
    assert bundle.load(cluster.root / "node-a" / "tls").common_name() == "node:node-a"
    # The same token, again, from another state directory: spent.
    second = subprocess.run(
        [sys.executable, "-m", "mlsched", "agent", "--controller", cluster.address,
         "--join-controller", cluster.join_address, "--ca-file", str(cluster.ca_file),
         "--join-token-file", str(token_file), "--node-id", "node-a",
         "--state-dir", str(tmp_path / "again"), "--gpus", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert second.returncode != 0
    assert "PERMISSION_DENIED: unknown or already used join token" in second.stderr
    # A token for node-b does not make node-a.
    token_b = tmp_path / "b.token"
    token_b.write_text(issue_join_token(cluster.state_dir, "node-b", 600.0))
    third = subprocess.run(
        [sys.executable, "-m", "mlsched", "agent", "--controller", cluster.address,
         "--join-controller", cluster.join_address, "--ca-file", str(cluster.ca_file),
         "--join-token-file", str(token_b), "--node-id", "node-a",
         "--state-dir", str(tmp_path / "third"), "--gpus", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert third.returncode != 0
    assert "issued for node 'node-b', not 'node-a'" in third.stderr

    # node-a restarts on its own state directory: its certificate, no token needed.
    cluster.kill_agent("node-a")
    with cluster.client("harness") as client:
        after = list(client.events())[-1].seq
    cluster.start_agent("node-a", gpus=1)
    event = cluster.wait_for_event(
        lambda e: e.kind == "node_registered" and e.node_id == "node-a", 60, after_seq=after
    )
    assert event.node_id == "node-a"
