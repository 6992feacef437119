"""A real controller (in-process, port 0) on the PostgreSQL store: jobs submitted through the
client survive a restart on another state directory (the state is in the database)."""

from __future__ import annotations

from controller.clock import ManualClock
from controller.server import Controller, ControllerConfig
from mlsched.client import Client
from mlsched.model import JobState
from tests.controller.conftest import make_spec
from tests.controller.store import pg_server
from tests.controller.test_servicer import SETTINGS


def start(tmp_path, name: str, store_url: str) -> Controller:
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / name,
        join_token="t",
        settings=SETTINGS,
        insecure=True,
        store_url=store_url,
    )
    controller = Controller(config, clock=ManualClock())
    controller.start()
    return controller


def test_jobs_survive_a_restart_on_postgresql(postgres_server, tmp_path):
    with pg_server.database(postgres_server) as conninfo:
        url = pg_server.url(conninfo)
        first = start(tmp_path, "a", url)
        try:
            with Client(first.address, "alice") as client:
                ids = [client.submit(make_spec(f"t{i}")).id for i in range(3)]
                client.cancel(ids[1])
        finally:
            first.stop(grace_s=0.5)
        assert not (tmp_path / "a" / "controller.db").exists()  # nothing went to SQLite
        second = start(tmp_path, "b", url)
        try:
            with Client(second.address, "alice") as client:
                jobs = {job.id: job.state for job, _ in client.list()}
        finally:
            second.stop(grace_s=0.5)
    assert set(jobs) == set(ids)
    assert jobs[ids[1]] is JobState.CANCELLED
    assert jobs[ids[0]] is JobState.PENDING
