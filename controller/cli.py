"""The ``mlsched controller`` command."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from controller.auth.tls_setup import OperatorTls
from controller.policy.mlfs.config import add_mlfs_param_option
from controller.policy.names import DEFAULT_POLICY, available_policies
from mlsched.gctune import tune_for_cycles
from mlsched.httplisten import split_listen
from mlsched.logsetup import add_log_arguments
from mlsched.logsetup import configure as configure_logging
from mlsched.statelock import StateDirInUse

# Exit status when another controller holds --state-dir (it is left untouched).
EXIT_STATE_DIR_IN_USE = 3


def add_controller_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("controller", help="run the controller (gRPC server)")
    p.add_argument(
        "--listen",
        default="127.0.0.1:50051",
        help="host:port to serve on (port 0 picks a free one) [%(default)s]",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        required=True,
        help="directory for the SQLite state (jobs, tasks, nodes, events)",
    )
    tls = p.add_argument_group(
        "security",
        "By default every endpoint is TLS: users and agents present certificates of the cluster"
        " CA (the controller makes one in <state-dir>/tls on its first start, unless --tls-*"
        " bring the operator's). Agents without a certificate redeem a one-time token"
        " (`mlsched admin join-token NODE`) at the join endpoint. docs/wire.md.",
    )
    tls.add_argument(
        "--join-listen",
        default="",
        help="host:port of the join endpoint (server-only TLS, JoinNode only) [--listen port+1]",
    )
    tls.add_argument("--tls-cert", type=Path, help="server certificate (PEM) of the operator's CA")
    tls.add_argument("--tls-key", type=Path, help="its private key (PEM)")
    tls.add_argument("--tls-ca", type=Path, help="the CA whose client certificates are accepted")
    tls.add_argument(
        "--tls-name",
        action="append",
        default=[],
        help="another DNS name or IP clients dial, for the server certificate (repeatable)",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="DEVELOPMENT ONLY: plaintext, users taken at their word, agents by a shared token",
    )
    tls.add_argument(
        "--join-token",
        default=os.environ.get("MLSCHED_JOIN_TOKEN"),
        help="with --insecure: the shared token agents present (or env MLSCHED_JOIN_TOKEN)",
    )
    tls.add_argument(
        "--join-token-file", type=Path, help="with --insecure: read the shared token from here"
    )
    p.add_argument(
        "--policy",
        default=os.environ.get("MLSCHED_POLICY") or DEFAULT_POLICY,
        choices=available_policies(),
        metavar="NAME",
        help=f"scheduling policy (or env MLSCHED_POLICY): {', '.join(available_policies())} "
        f"[default {DEFAULT_POLICY}; docs/policies.md]",
    )
    add_mlfs_param_option(p)
    p.add_argument(
        "--mlfs-model",
        type=Path,
        metavar="PATH",
        help="the network mlf-rl and mlfs load (`mlsched mlfs-train --out`) instead of the "
        "shipped one (docs/mlfs.md, *A model per setting*)",
    )
    p.add_argument(
        "--slaq-pause-s",
        type=float,
        metavar="SECONDS",
        help="the pause a GPU change costs a job (suspend and resume) that slaq and "
        "slaq-maxmin assume until that job's own is measured [25; docs/slaq.md]",
    )
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=300.0,
        help="lease length; jobs are reconsidered at lease boundaries [%(default)s]",
    )
    p.add_argument(
        "--cycle-seconds", type=float, default=5.0, help="scheduling cycle interval [%(default)s]"
    )
    p.add_argument(
        "--store",
        default=os.environ.get("MLSCHED_STORE", ""),
        metavar="URL",
        help="where the state lives: empty for SQLite in --state-dir, or a PostgreSQL URL"
        " (postgresql://user@host:port/db; the postgres extra) [or env MLSCHED_STORE]",
    )
    p.add_argument(
        "--leader-lease",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="with a PostgreSQL --store: the leader lease of active/standby controllers; a"
        " standby takes over within this long of the leader's death [%(default)s]",
    )
    p.add_argument(
        "--advertise",
        default="",
        metavar="HOST:PORT",
        help="with a PostgreSQL --store: the address a standby names as this leader's"
        " [the bound --listen address]",
    )
    p.add_argument(
        "--retain-finished",
        type=float,
        default=7 * 24 * 3600.0,
        metavar="SECONDS",
        help="finished jobs and events older than this move to the archive (still listed and"
        " described, no longer in memory); 0 keeps them live [%(default)s]",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=30.0,
        help="seconds without a heartbeat before a node is dead [%(default)s]",
    )
    p.add_argument(
        "--suspend-grace",
        type=float,
        default=30.0,
        help="seconds a trainer gets to checkpoint before SIGTERM [%(default)s]",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=5.0,
        help="metrics/heartbeat interval asked of agents [%(default)s]",
    )
    p.add_argument(
        "--http-listen",
        default=os.environ.get("MLSCHED_HTTP_LISTEN", ""),
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus) and the dashboard here (port 0 picks one); with TLS on,"
        " a non-loopback address is HTTPS asking for a cluster certificate (env"
        " MLSCHED_HTTP_LISTEN; docs/observability.md) [off]",
    )
    add_log_arguments(p)
    p.set_defaults(func=run_controller)


def read_join_token(token: str | None, token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise SystemExit(
                f"mlsched: cannot read join token file {token_file}: {exc.strerror}"
            ) from None
    if not token:
        raise SystemExit(
            "mlsched: a join token is required (--join-token, --join-token-file "
            "or MLSCHED_JOIN_TOKEN)"
        )
    return token


def _operator_tls(args: argparse.Namespace) -> OperatorTls | None:
    given = [args.tls_cert, args.tls_key, args.tls_ca]
    if not any(given):
        return None
    if not all(given):
        raise SystemExit("mlsched: --tls-cert, --tls-key and --tls-ca go together")
    if args.insecure:
        raise SystemExit("mlsched: --insecure and --tls-* contradict each other")
    return OperatorTls(cert=args.tls_cert, key=args.tls_key, ca=args.tls_ca)


def run_controller(args: argparse.Namespace) -> int:
    # the policies: imported to run, not for `mlsched --help`
    from controller.policy.mlfs.config import parse_mlfs_params
    from controller.server import Controller, ControllerConfig
    from controller.state import ControllerSettings

    try:
        configure_logging(args.log_level, args.log_format)
    except ValueError as exc:  # MLSCHED_LOG_LEVEL/FORMAT (argparse checks the flags)
        raise SystemExit(f"mlsched: {exc}") from None
    try:
        mlfs = parse_mlfs_params(args.mlfs_param) if args.mlfs_param else None
    except ValueError as exc:
        raise SystemExit(f"mlsched: {exc}") from None
    for name, value in (
        ("--lease-seconds", args.lease_seconds),
        ("--cycle-seconds", args.cycle_seconds),
        ("--heartbeat-timeout", args.heartbeat_timeout),
        ("--heartbeat-interval", args.heartbeat_interval),
        ("--leader-lease", args.leader_lease),
    ):
        if value <= 0:
            raise SystemExit(f"mlsched: {name} must be positive")
    if args.slaq_pause_s is not None and not args.slaq_pause_s >= 0:
        raise SystemExit("mlsched: --slaq-pause-s must not be negative")
    if not args.retain_finished >= 0:
        raise SystemExit("mlsched: --retain-finished must not be negative")
    if args.http_listen:
        try:
            split_listen(args.http_listen)
        except ValueError as exc:
            raise SystemExit(f"mlsched: {exc}") from None
    config = ControllerConfig(
        listen=args.listen,
        state_dir=args.state_dir,
        store_url=args.store,
        join_token=read_join_token(args.join_token, args.join_token_file) if args.insecure else "",
        insecure=args.insecure,
        join_listen=args.join_listen,
        operator_tls=_operator_tls(args),
        tls_names=tuple(args.tls_name),
        policy=args.policy,
        mlfs=mlfs,
        mlfs_model=args.mlfs_model,
        slaq_pause_s=args.slaq_pause_s,
        http_listen=args.http_listen,
        heartbeat_interval_s=args.heartbeat_interval,
        settings=ControllerSettings(
            lease_s=args.lease_seconds,
            cycle_s=args.cycle_seconds,
            heartbeat_timeout_s=args.heartbeat_timeout,
            suspend_grace_s=args.suspend_grace,
            retain_finished_s=args.retain_finished or None,
        ),
    )
    tune_for_cycles()  # a cycle's garbage, not start-up's, is what the collector walks
    if config.store_url:  # PostgreSQL: active/standby controllers elect a leader
        from controller.standby import run_elected

        return run_elected(config, args.leader_lease, args.advertise)
    try:
        controller = Controller(config)
    except ValueError as exc:  # a policy that cannot run live
        raise SystemExit(f"mlsched: {exc}") from None
    except StateDirInUse as exc:
        print(
            f"mlsched: {exc}; refusing to start (one controller per state directory;"
            f" the holder's pid is in {exc.state_dir / 'controller.lock'})",
            file=sys.stderr,
        )
        return EXIT_STATE_DIR_IN_USE
    except OSError as exc:  # a port taken, a TLS file missing
        raise SystemExit(f"mlsched: {exc}") from None
    try:
        controller.start()
    except (OSError, ValueError) as exc:  # --http-listen malformed or taken
        controller.stop()
        raise SystemExit(f"mlsched: {exc}") from None
    print(f"listening on {controller.address}", flush=True)
    if controller.join_address:
        print(f"join endpoint on {controller.join_address}", flush=True)
    if controller.ca_file is not None:
        print(f"cluster CA {controller.ca_file}", flush=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: controller.request_shutdown())
    controller.wait()
    controller.stop()
    print("controller stopped", file=sys.stderr)
    return 0
