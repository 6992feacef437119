"""The ``mlsched`` command: controller, agent, client commands and the demo."""

from __future__ import annotations

import argparse
import getpass
import importlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from mlsched import exitcodes, extras, jsonflag, render
from mlsched.completion import bash_script
from mlsched.contexts import ContextError, config_path, load_contexts, select_context
from mlsched.follow import follow_logs, wait_for_job
from mlsched.jobspec import MAX_ITERATIONS, SpecError, load_spec_file, parse_spec
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
        "--context",
        default=None,
        help="a named context of the config file (docs/cli.md) [$MLSCHED_CONTEXT, else the"
        " file's current-context]",
    )
    p.add_argument(
        "--controller",
        default=None,
        help="controller address(es), comma-separated [$MLSCHED_CONTROLLER, else the context's,"
        f" else {DEFAULT_CONTROLLER}]",
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

    context = select_context(args.context)
    args.controller = (
        args.controller
        or os.environ.get("MLSCHED_CONTROLLER")
        or context.controller
        or DEFAULT_CONTROLLER
    )
    args.insecure = args.insecure or context.insecure
    args.user = args.user or context.user or None
    args.credentials = args.credentials or (
        None if os.environ.get(bundle.CREDENTIALS_ENV) else context.credentials
    )
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
    spec = _spec_to_submit(args)  # validated before credentials are looked for
    with _client(args) as client:
        job = client.submit(spec)
        if not args.wait:
            if args.json:
                _print_json(render.job_dict(job))
            else:
                print(f"submitted {job.id} ({spec.name})", flush=True)
            return exitcodes.OK
        progress = sys.stderr if args.json else sys.stdout  # --json: stdout is the JSON alone
        print(f"submitted {job.id} ({spec.name})", file=progress, flush=True)
        job = wait_for_job(client, job.id, progress)
    if args.json:
        _print_json(render.job_dict(job))
    else:
        reason = job.message.splitlines()[0] if job.message else ""  # the log tail: `logs`
        print(f"{job.id}: {job.state.value}" + (f" ({reason})" if reason else ""))
    return exitcodes.for_outcome(job.state)


def _spec_to_submit(args: argparse.Namespace) -> Any:
    """The spec file's job, or a quick job from ``submit [--gpus N] [--name X] -- CMD ...``."""
    if args.quick_command and args.file:
        raise SpecError(["give either a spec file or a command after --, not both"])
    if args.file:
        return load_spec_file(args.file)
    if not args.quick_command:
        raise SpecError(["give a spec file, or a command after -- (submit -- python train.py)"])
    name = args.name or Path(args.quick_command[0]).name
    data = {
        "name": name,
        "command": list(args.quick_command),
        "gpus": args.gpus,
        "stop": {"iterations": args.iterations},
    }
    return parse_spec(data, Path.cwd())


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


def cmd_logs(args: argparse.Namespace) -> int:
    if args.follow and args.json:  # the log as it grows is text, not one JSON object
        print("mlsched logs: --json does not go with --follow; drop one of them", file=sys.stderr)
        return exitcodes.INVALID
    return _logs(args)


@_with_client
def _logs(client: Any, args: argparse.Namespace) -> int:
    if args.follow:
        follow_logs(client, args.job, args.rank, args.bytes, sys.stdout)
        return exitcodes.OK
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
            print(render.event_line(event), flush=True)
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    print(bash_script(build_parser()), end="")
    return exitcodes.OK


def cmd_contexts(args: argparse.Namespace) -> int:
    path = config_path()
    contexts, current = load_contexts(path)
    if args.json:
        _print_json(
            {
                "file": str(path),
                "current": current,
                "contexts": {
                    n: {**vars(c), "credentials": str(c.credentials or "")}
                    for n, c in contexts.items()
                },
            }
        )
        return exitcodes.OK
    if not contexts:
        print(f"no contexts ({path} has none)")
    for name, context in sorted(contexts.items()):
        mark = "*" if name == current else " "
        where = context.controller or DEFAULT_CONTROLLER
        how = "INSECURE as " + (context.user or "you") if context.insecure else "TLS"
        print(f"{mark} {name:16s} {where:32s} {how}")
    return exitcodes.OK


def cmd_demo(args: argparse.Namespace) -> int:
    from mlsched.demo import run_demo

    return run_demo(
        json_output=args.json, keep=args.keep, lease_s=args.lease_seconds, policy=args.policy
    )


# The commands whose modules import a role's packages (mlsched/extras.py): name, module, the
# function that adds its subparser, and its one-line help, repeated here so that `mlsched --help`
# and the client commands list them without importing them (a test keeps the help equal).
ROLE_COMMANDS: tuple[tuple[str, str, str, str], ...] = (
    ("controller", "controller.cli", "add_controller_command", "run the controller (gRPC server)"),
    (
        "admin",
        "controller.admin_cli",
        "add_admin_command",
        "issue user credentials and node join tokens",
    ),
    ("agent", "nodeagent.cli", "add_agent_command", "run the node agent on a GPU server"),
    ("simulate", "simulator.cli", "add_simulate_command", "simulate policies over a job trace"),
    (
        "sweep",
        "simulator.sweep",
        "add_sweep_command",
        "simulate a grid of (trace, cluster, density, policy) cells in parallel",
    ),
    (
        "mlfs-train",
        "simulator.rltrain",
        "add_train_command",
        "train an MLF-RL model in the simulator (MLFS §3.4)",
    ),
    (
        "chic-train",
        "simulator.chictrain",
        "add_chic_train_command",
        "train a Chic policy in the simulator (Chic §4.3, Algorithm 1)",
    ),
    (
        "chic-simulate",
        "simulator.chic_cli",
        "add_chic_simulate_command",
        "Chic's PS-job simulation: ACT of chic, chic-pair and optimus (Chic §6.2.1)",
    ),
)


def _missing_extra(command: str, error: ModuleNotFoundError) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise extras.explain(command, error) or error

    return run


def _add_role_command(
    sub: argparse._SubParsersAction, name: str, module: str, adder: str, text: str, load: bool
) -> None:
    """The real subparser where ``load`` (its module imported), else a stand-in with its help
    line; also the stand-in where the module's packages are not installed, which then says
    which extra to install when run."""
    if load:
        try:
            add = getattr(importlib.import_module(module), adder)
        except ModuleNotFoundError as exc:
            if extras.explain(name, exc) is None:
                raise
            run = _missing_extra(name, exc)
        else:
            add(sub)
            return
    else:

        def run(args: argparse.Namespace) -> int:
            return main([name, *args.arguments])  # with its real parser, loaded this time

    p = sub.add_parser(name, help=text, add_help=False, prefix_chars="\0")
    p.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``command``, the role commands other than that one are stand-ins
    that import nothing (``mlsched --help`` and the client commands stay light)."""
    from mlsched import __version__

    parser = argparse.ArgumentParser(
        prog="mlsched", description="Scheduler for deep-learning training jobs on GPU clusters."
    )
    parser.add_argument("--version", action="version", version=f"mlsched {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module, adder, text in ROLE_COMMANDS:
        _add_role_command(sub, name, module, adder, text, command is None or command == name)

    p = sub.add_parser(
        "submit",
        help="submit a job from a YAML spec, or a quick job: submit [--gpus N] -- CMD ...",
    )
    p.add_argument("file", nargs="?", help="job spec (YAML)")
    p.add_argument(
        "--wait",
        action="store_true",
        help="follow the job until it ends; the exit code is its outcome (docs/cli.md)",
    )
    p.add_argument("--gpus", type=int, default=1, help="quick job: GPUs [%(default)s]")
    p.add_argument("--name", default="", help="quick job: name [the command's first word]")
    p.add_argument(
        "--iterations",
        type=int,
        default=MAX_ITERATIONS,
        help="quick job: its iteration budget, for a script that reports iterations through"
        " the shim [none: the job ends when the command exits]",
    )
    _client_args(p)
    p.set_defaults(func=cmd_submit, quick_command=[])

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
    p.add_argument(
        "--follow", "-f", action="store_true", help="keep printing new output until the job ends"
    )
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

    p = sub.add_parser("completion", help="print the bash completion script (zsh: bashcompinit)")
    p.add_argument("shell", choices=("bash",), help="the shell")
    p.set_defaults(func=cmd_completion)

    p = sub.add_parser("contexts", help="list the named contexts of the config file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_contexts)
    return parser


def _split_quick_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """``submit ... -- CMD ...``: the arguments before ``--`` and the command after it."""
    if "submit" in argv and "--" in argv and argv.index("submit") < argv.index("--"):
        at = argv.index("--")
        return argv[:at], argv[at + 1 :]
    return argv, []


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the exit code says which class of error stopped it (docs/cli.md)."""
    arguments, quick_command = _split_quick_command(list(sys.argv[1:] if argv is None else argv))
    command = next((a for a in arguments if not a.startswith("-")), "")
    try:
        args = jsonflag.parse_args(build_parser(command), arguments, prog=f"mlsched {command}")
        if quick_command:
            args.quick_command = quick_command
        extras.require(args.command)
        return int(args.func(args) or 0)
    except extras.MissingExtra as exc:
        print(f"mlsched: {exc}", file=sys.stderr)
        return exitcodes.ERROR
    except ModuleNotFoundError as exc:
        explained = extras.explain(command, exc)
        if explained is None:
            raise
        print(f"mlsched: {explained}", file=sys.stderr)
        return exitcodes.ERROR
    except (SpecError, ContextError) as exc:
        print(f"mlsched: {exc}", file=sys.stderr)
        return exitcodes.INVALID
    except CredentialsError as exc:
        print(f"mlsched: {exc}", file=sys.stderr)
        return exitcodes.UNAUTHENTICATED
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else str(exc)
        print(f"mlsched: {code.name if code else 'ERROR'}: {details}", file=sys.stderr)
        return exitcodes.for_status(code)
    except KeyboardInterrupt:
        return exitcodes.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
