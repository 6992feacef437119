"""Active/standby controllers on one PostgreSQL database (issue 12 #5; deploy/README.md).

A controller on PostgreSQL first binds its address with a standby server, which refuses every
call UNAVAILABLE naming the leader (clients and agents given both addresses go there), and
competes for the lease (``controller.leader``). Once elected it stops the standby server,
builds the ordinary controller on the same port (loading the state from the store, as at a
restart) and serves while it can prove its lease. A leader that loses the lease stops and
exits with ``EXIT_DEPOSED``; its service manager starts it again, as a standby.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from controller.auth.tls_setup import load_server_tls
from controller.leader import LeaderLease, LeaseKeeper
from controller.server import SERVER_OPTIONS, Controller, ControllerConfig
from controller.store.lease import open_lease_table
from mlsched.client import LEADER_KEY, NOT_LEADER

log = logging.getLogger(__name__)

EXIT_DEPOSED = 4  # the lease was lost: restart as a standby


class _NotLeader(grpc.GenericRpcHandler):
    """Every method of every service: UNAVAILABLE, naming the leader."""

    def __init__(self, lease: LeaderLease) -> None:
        self._lease = lease

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        return grpc.stream_stream_rpc_method_handler(self._refuse)

    def _refuse(self, requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        leader = self._lease.leader_address()
        context.set_trailing_metadata(((LEADER_KEY, leader),))
        where = f"the leader is at {leader}" if leader else "no leader is known yet"
        context.abort(grpc.StatusCode.UNAVAILABLE, f"{NOT_LEADER} (a standby); {where}")
        yield  # pragma: no cover - abort raises


class StandbyServer:
    """The standby's gRPC server on ``config.listen``, with the controller's credentials."""

    def __init__(self, config: ControllerConfig, lease: LeaderLease) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="standby"),
            handlers=[_NotLeader(lease)],
            options=SERVER_OPTIONS,
        )
        if config.insecure:
            port = self.server.add_insecure_port(config.listen)
        else:
            tls = load_server_tls(
                config.state_dir, config.listen, config.tls_names, config.operator_tls
            )
            port = self.server.add_secure_port(config.listen, tls.mutual())
        if port == 0:
            raise OSError(f"cannot listen on {config.listen}")
        self.port = port
        self.address = f"{config.listen.rsplit(':', 1)[0]}:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0).wait()


def run_elected(config: ControllerConfig, lease_s: float, advertise: str = "") -> int:
    """Run a controller that serves only while it holds the lease; returns the exit status."""
    config = with_advertised_name(config, advertise)
    config.state_dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        table = open_lease_table(config.store_url, config.state_dir)
    except Exception as exc:  # unreachable, refused, no such database (the URL may hold a secret)
        raise SystemExit(f"mlsched: cannot open the store's database: {exc}") from None
    lease = LeaderLease(table, advertise, lease_s)
    standby = StandbyServer(config, lease)
    lease.address = advertise or standby.address
    try:
        if not _wait_for_lease(lease, standby, stop):
            return 0
    finally:
        standby.stop()
    keeper = LeaseKeeper(lease, lambda _reason: stop.set())
    keeper.start()  # renewing while the state loads
    controller = _take_over(config, standby.port, lease, lease_s)
    keeper.watch_store(controller.store.connection_lost)
    _announce(controller)
    stop.wait()
    keeper.stop()
    controller.stop()
    if keeper.lost_reason:
        print(f"controller stepped down: {keeper.lost_reason}", file=sys.stderr)
        return EXIT_DEPOSED
    lease.release()
    table.close()
    print("controller stopped", file=sys.stderr)
    return 0


def with_advertised_name(config: ControllerConfig, advertise: str) -> ControllerConfig:
    """The config whose server certificate also names the advertised host: standbys send
    clients and agents there."""
    host = advertise.rpartition(":")[0].strip("[]")
    if not host or host in config.tls_names:
        return config
    return dataclasses.replace(config, tls_names=(*config.tls_names, host))


def _take_over(
    config: ControllerConfig, port: int, lease: LeaderLease, lease_s: float
) -> Controller:
    """The ordinary controller on the standby's port, its state loaded from the store.

    ``leader_elected`` is recorded before the server starts, so every event of this leader's
    term (an agent's re-registration included) comes after it in the feed."""
    host = config.listen.rsplit(":", 1)[0]
    try:
        controller = Controller(dataclasses.replace(config, listen=f"{host}:{port}"))
    except (ValueError, OSError) as exc:  # a policy that cannot run live, a port, TLS, a lock
        lease.release()
        raise SystemExit(f"mlsched: {exc}") from None
    controller.store.fence = lease  # every write from here checks the epoch
    with controller.state.lock:
        controller.state.emit(
            "leader_elected",
            f"{lease.address} leads under epoch {lease.epoch} (lease {lease_s:g} s)",
        )
    try:
        controller.start()
    except (OSError, ValueError) as exc:  # e.g. an HTTP listener that cannot bind
        controller.stop()
        lease.release()
        raise SystemExit(f"mlsched: {exc}") from None
    return controller


def _wait_for_lease(lease: LeaderLease, standby: StandbyServer, stop: threading.Event) -> bool:
    """Try for the lease every third of its length until elected (True) or stopped (False)."""
    announced = False
    while not stop.is_set():
        try:
            if lease.try_acquire():
                return True
        except Exception as exc:  # the database unreachable, a racing first claim
            log.warning("cannot claim the leader lease: %s", exc)
            if lease.connection_lost():  # the service manager starts a fresh standby
                raise SystemExit(
                    f"mlsched: the store's database ended the connection: {exc}"
                ) from None
        if not announced:
            print(f"standby on {standby.address}", flush=True)
            log.info("standby on %s; the leader is %s", standby.address, lease.leader_address())
            announced = True
        stop.wait(lease.retry_in_s())
    return False


def _announce(controller: Controller) -> None:
    print(f"listening on {controller.address}", flush=True)
    if controller.join_address:
        print(f"join endpoint on {controller.join_address}", flush=True)
    if controller.ca_file is not None:
        print(f"cluster CA {controller.ca_file}", flush=True)
