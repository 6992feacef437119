"""The ``mlsched`` command: controller, agent, client commands and the demo."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from mlsched import render
from mlsched.jobspec import SpecError, load_spec_file
from mlsched.model import JobState
from mlsched.security.bundle import CredentialsError

DEFAULT_CONTROLLER = "127.0.0.1:50051"


def _default_user() -> str:
    try:
        return os.environ.get("MLSCHED_USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _client_args(p: argparse.ArgumentParser, json_flag: bool = True) -> None:
    p.add_argument(
        "--controller",
        default=os.environ.get("MLSCHED_CONTROLLER", DEFAULT_CONTROLLER),
        help="controller address (or env MLSCHED_CONTROLLER) [%(default)s]",
    )
    p.add_argument(
        "--credentials",
        type=Path,
        default=None,
        help="your credential bundle (ca.pem, cert.pem, key.pem; `mlsched admin issue-user`)"
        " [$MLSCHED_CREDENTIALS, else ~/.config/mlsched]",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="DEVELOPMENT ONLY: plaintext to a controller started --insecure, claiming --user",
    )
    p.add_argument(
        "--user",
        default=None,
        help="with --insecure: the user name to claim [$MLSCHED_USER or your login]; with"
        " credentials, the name your certificate states is used",
    )
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON")


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _client(args: argparse.Namespace) -> Any:
    """A client of the controller as this user: with their credential bundle, or claiming
    ``--user`` on plaintext with ``--insecure``. Sets ``args.user`` to the name used."""
    from mlsched.client import Client
    from mlsched.security import bundle
    from mlsched.security.names import parse_common_name

    if args.insecure:
        args.user = args.user or _default_user()
        print(
            f"mlsched: INSECURE: plaintext, claiming to be {args.user!r} (development only)",
            file=sys.stderr,
        )
        return Client(args.controller, args.user)
    creds = bundle.load(args.credentials or bundle.default_dir())
    who = parse_common_name(creds.common_name())
    args.user = who.name if who is not None else ""
    return Client(args.controller, credentials=creds)


def _with_client(
    fn: Callable[[Any, argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        with _client(args) as client:
            return fn(client, args)

    return run


def cmd_submit(args: argparse.Namespace) -> int:
    spec = load_spec_file(args.file)  # validated before credentials are looked for
    with _client(args) as client:
        job = client.submit(spec)
    if args.json:
        _print_json(render.job_dict(job))
    else:
        print(f"submitted {job.id} ({spec.name})")
    return 0


@_with_client
def cmd_jobs(client: Any, args: argparse.Namespace) -> int:
    states = tuple(JobState(s.upper()) for s in args.state)
    jobs = client.list(states=states, user="" if args.all else args.user)
    if args.json:
        _print_json([render.job_dict(j, t) for j, t in jobs])
    else:
        print(render.jobs_table(jobs))
    return 0


@_with_client
def cmd_describe(client: Any, args: argparse.Namespace) -> int:
    job, tasks = client.get(args.job)
    events = render.resize_events(client.events(job_id=job.id)) if job.spec.elastic.enabled else []
    if args.json:
        _print_json(
            {**render.job_dict(job, tasks), "resizes": [render.event_dict(e) for e in events]}
        )
    else:
        print(render.describe(job, tasks, events))
    return 0


@_with_client
def cmd_cancel(client: Any, args: argparse.Namespace) -> int:
    job = client.cancel(args.job)
    if args.json:
        _print_json(render.job_dict(job))
    else:
        print(f"{job.id}: {job.state.value}")
    return 0


@_with_client
def cmd_stop(client: Any, args: argparse.Namespace) -> int:
    job = client.stop(args.job, args.reason)
    if args.json:
        _print_json(render.job_dict(job))
    else:
        print(f"{job.id}: {job.state.value} ({job.message})")
    return 0


@_with_client
def cmd_nodes(client: Any, args: argparse.Namespace) -> int:
    nodes = client.nodes()
    if args.json:
        _print_json([render.node_dict(n, busy) for n, busy in nodes])
    else:
        print(render.nodes_table(nodes))
    return 0


@_with_client
def cmd_logs(client: Any, args: argparse.Namespace) -> int:
    logs = client.logs(args.job, rank=args.rank, max_bytes=args.bytes)
    if args.json:
        _print_json({"node": logs.node_id, "content": logs.content, "truncated": logs.truncated})
    else:
        if logs.truncated:
            print(f"[... earlier output on {logs.node_id} truncated ...]")
        sys.stdout.write(logs.content)
    return 0


@_with_client
def cmd_events(client: Any, args: argparse.Namespace) -> int:
    for event in client.events(after_seq=args.after, job_id=args.job or "", follow=args.follow):
        if args.json:
            print(json.dumps(render.event_dict(event)), flush=True)
        else:
            where = " ".join(x for x in (event.job_id, event.node_id) if x)
            print(f"{event.seq:6d} {event.kind:18s} {where:24s} {event.message}", flush=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from mlsched.demo import run_demo

    return run_demo(
        json_output=args.json, keep=args.keep, lease_s=args.lease_seconds, policy=args.policy
    )


def build_parser() -> argparse.ArgumentParser:
    from controller.admin_cli import add_admin_command
    from controller.cli import add_controller_command
    from mlsched import __version__
    from nodeagent.cli import add_agent_command
    from simulator.chic_cli import add_chic_simulate_command
    from simulator.chictrain import add_chic_train_command
    from simulator.cli import add_simulate_command
    from simulator.rltrain import add_train_command
    from simulator.sweep import add_sweep_command

    parser = argparse.ArgumentParser(
        prog="mlsched", description="Scheduler for deep-learning training jobs on GPU clusters."
    )
    parser.add_argument("--version", action="version", version=f"mlsched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_controller_command(sub)
    add_admin_command(sub)
    add_agent_command(sub)
    add_simulate_command(sub)
    add_sweep_command(sub)
    add_train_command(sub)
    add_chic_train_command(sub)
    add_chic_simulate_command(sub)

    p = sub.add_parser("submit", help="submit a job from a YAML spec")
    p.add_argument("file", help="job spec (YAML)")
    _client_args(p)
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("jobs", help="list jobs")
    _client_args(p)
    p.add_argument("--all", action="store_true", help="every user's jobs")
    p.add_argument(
        "--state",
        action="append",
        default=[],
        choices=[s.value.lower() for s in JobState],
        help="only jobs in this state (repeatable)",
    )
    p.set_defaults(func=cmd_jobs)

    for name, func, text in (
        ("describe", cmd_describe, "show one job in detail"),
        ("cancel", cmd_cancel, "cancel one of your jobs"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("job", help="job id")
        _client_args(p)
        p.set_defaults(func=func)

    p = sub.add_parser(
        "stop", help="finish one of your jobs now, keeping its model (a final checkpoint)"
    )
    p.add_argument("job", help="job id")
    p.add_argument("--reason", default="", help="recorded in the job's message")
    _client_args(p)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("nodes", help="list nodes with their GPUs and load")
    _client_args(p)
    p.set_defaults(func=cmd_nodes)

    p = sub.add_parser("logs", help="print a job's log (tail) from its node")
    p.add_argument("job", help="job id")
    p.add_argument("--rank", type=int, default=0, help="which task [%(default)s]")
    p.add_argument("--bytes", type=int, default=0, help="tail size (0: 64 KiB)")
    _client_args(p)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("events", help="print the controller's event feed")
    p.add_argument("--job", help="only this job's events")
    p.add_argument("--after", type=int, default=0, help="start after this sequence number")
    p.add_argument("--follow", "-f", action="store_true", help="keep waiting for new events")
    _client_args(p)
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("demo", help="run a local cluster (controller + 2 agents) with example jobs")
    p.add_argument("--json", action="store_true", help="print one JSON summary at the end")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    p.add_argument("--lease-seconds", type=float, default=10.0, help="lease length [%(default)s]")
    p.add_argument(
        "--policy",
        choices=("fifo-lease", "unisched"),
        default="fifo-lease",
        help="fifo-lease: suspension, resumption on the other node, a job spanning both; "
        "unisched (the controller's default): profiling, estimates, the MILP's allocation "
        "[%(default)s]",
    )
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        print(f"mlsched: {exc}", file=sys.stderr)
        return 2
    except CredentialsError as exc:
        print(f"mlsched: {exc}", file=sys.stderr)
        return 2
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "ERROR"
        details = exc.details() if hasattr(exc, "details") else str(exc)
        print(f"mlsched: {code}: {details}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
