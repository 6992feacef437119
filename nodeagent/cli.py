"""The ``agent`` command: ``mlsched agent ...`` (and ``python -m nodeagent ...``)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from mlsched.logsetup import add_log_arguments
from mlsched.logsetup import configure as configure_logging
from nodeagent.config import AgentConfig, ConfigError
from nodeagent.credentials import add_security_arguments, channel_credentials, security_args
from nodeagent.gpus import GpuConfigError
from nodeagent.taskuser import (
    DEFAULT_UID_RANGE,
    RUN_AS_CHOICES,
    RUN_AS_JOB_USER,
    TaskUserError,
    parse_uid_range,
)

log = logging.getLogger(__name__)

JOIN_TOKEN_ENV = "MLSCHED_JOIN_TOKEN"
CONTROLLER_ENV = "MLSCHED_CONTROLLER"
EXIT_CONFIG = 1


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the agent's flags to ``parser`` (destinations are prefixed ``agent_``)."""
    parser.add_argument(
        "--controller",
        dest="agent_controller",
        metavar="HOST:PORT",
        help=f"the controller's agent endpoint (default: ${CONTROLLER_ENV})",
    )
    parser.add_argument(
        "--join-token",
        dest="agent_join_token",
        metavar="TOKEN",
        help=f"cluster join token (prefer --join-token-file or ${JOIN_TOKEN_ENV}: "
        "a flag is visible to other users in the process list)",
    )
    parser.add_argument(
        "--join-token-file",
        dest="agent_join_token_file",
        metavar="PATH",
        type=Path,
        help="file with the join token",
    )
    parser.add_argument(
        "--node-id", dest="agent_node_id", metavar="ID", help="node id (default: the hostname)"
    )
    parser.add_argument(
        "--state-dir",
        dest="agent_state_dir",
        metavar="DIR",
        type=Path,
        help="records, logs, trainer address file (default: /var/lib/mlsched/agent/<node-id> "
        "as root, else ~/.local/state/mlsched/agent/<node-id>)",
    )
    parser.add_argument(
        "--checkpoint-root",
        dest="agent_checkpoint_root",
        metavar="DIR",
        type=Path,
        help="checkpoint directory shared by every node (default: <state-dir>/checkpoints, "
        "only right for a single-machine cluster)",
    )
    parser.add_argument(
        "--gpus",
        dest="agent_gpus",
        type=int,
        metavar="N",
        help="GPU slots: the first N NVML GPUs, or N virtual slots (train on CPU) when NVML "
        "finds none (default: every NVML GPU)",
    )
    parser.add_argument(
        "--gpu-slices",
        dest="agent_gpu_slices",
        type=int,
        default=1,
        metavar="K",
        help="offer each GPU as K time-sliced slots: a task holding one slot gets 1/K of a GPU, "
        "shared with the tasks on its other slots (default: 1, every GPU whole)",
    )
    parser.add_argument(
        "--advertise-address",
        dest="agent_advertise_address",
        metavar="HOST",
        default="127.0.0.1",
        help="address other nodes use to reach this one, e.g. as MASTER_ADDR (default: "
        "127.0.0.1, single-machine clusters only)",
    )
    parser.add_argument(
        "--metrics-interval",
        dest="agent_metrics_interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="metrics report (heartbeat) period (default: 5)",
    )
    parser.add_argument(
        "--suspend-grace",
        dest="agent_suspend_grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="default suspend grace before SIGTERM, and again before SIGKILL (default: 30)",
    )
    parser.add_argument(
        "--suspend-save-extension",
        dest="agent_suspend_save_extension",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a suspension whose trainer reports a checkpoint save in progress waits up to this"
        " much longer than twice the grace before SIGKILL (default: 30)",
    )
    parser.add_argument(
        "--run-tasks-as",
        dest="agent_run_tasks_as",
        choices=RUN_AS_CHOICES,
        default=RUN_AS_JOB_USER,
        help="job-user (default): each task runs under its job's user, the local account of"
        " that name or a uid of --task-uid-range, isolated from other users' jobs (needs root"
        " or CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL); agent: every task under this"
        " agent's uid, no isolation between jobs (a single-user machine)",
    )
    parser.add_argument(
        "--task-uid-range",
        dest="agent_task_uid_range",
        type=_uid_range,
        default=DEFAULT_UID_RANGE,
        metavar="FIRST-LAST",
        help="uids for job users without a local account (default:"
        f" {DEFAULT_UID_RANGE[0]}-{DEFAULT_UID_RANGE[1]})",
    )
    parser.add_argument(
        "--min-free-disk",
        dest="agent_min_free_disk",
        type=_byte_count,
        default=64 * 1024 * 1024,
        metavar="BYTES",
        help="with less free space on the state disk, take no new tasks (running ones go on;"
        " default: 67108864, 64 MiB)",
    )
    parser.add_argument(
        "--trainer-listen",
        dest="agent_trainer_listen",
        default="127.0.0.1:0",
        metavar="HOST:PORT",
        help="where trainers reach the agent (default: 127.0.0.1:0, any free port)",
    )
    parser.add_argument(
        "--http-listen",
        dest="agent_http_listen",
        default=os.environ.get("MLSCHED_HTTP_LISTEN", ""),
        metavar="HOST:PORT",
        help="serve /metrics (Prometheus) here, port 0 picks one (env MLSCHED_HTTP_LISTEN;"
        " docs/observability.md; default: off)",
    )
    add_log_arguments(parser)
    add_security_arguments(parser)
    load = parser.add_argument_group(
        "load and overload (MLFS)",
        "The node's load is reported as shares of these capacities; when a resource type or a "
        "GPU stays above the threshold, the agent asks the controller to move the tasks MLFS' "
        "Euclidean rule picks.",
    )
    load.add_argument(
        "--cpu-capacity",
        dest="agent_cpu_capacity",
        type=float,
        metavar="CORES",
        help="cores counted as 100%% CPU (default: every CPU of the machine)",
    )
    load.add_argument(
        "--memory-capacity",
        dest="agent_memory_capacity",
        type=_byte_count,
        metavar="BYTES",
        help="bytes counted as 100%% memory (default: the machine's memory)",
    )
    load.add_argument(
        "--bandwidth-capacity",
        dest="agent_bandwidth_capacity",
        type=float,
        metavar="BYTES_PER_S",
        help="bytes/s counted as 100%% network (default: the summed speed of the links that "
        "are up; none known: the network share is 0)",
    )
    load.add_argument(
        "--load-scope",
        dest="agent_load_scope",
        choices=("tasks", "machine"),
        default="tasks",
        help="what the node's load is: this agent's tasks only (default: load that is not "
        "mlsched's never counts as overload) or the whole machine's, whoever uses it",
    )
    load.add_argument(
        "--overload-threshold",
        dest="agent_overload_threshold",
        type=float,
        default=0.9,
        metavar="H_R",
        help="share above which a resource type or GPU is overloaded (default: 0.9)",
    )
    load.add_argument(
        "--migration-share",
        dest="agent_migration_share",
        type=float,
        default=0.1,
        metavar="P_S",
        help="while a GPU is overloaded, pick only among this lowest-priority share of the "
        "tasks on overloaded GPUs (default: 0.1)",
    )
    load.add_argument(
        "--overload-samples",
        dest="agent_overload_samples",
        type=int,
        default=3,
        metavar="N",
        help="consecutive overloaded metrics samples before asking (default: 3)",
    )
    load.add_argument(
        "--migration-cooldown",
        dest="agent_migration_cooldown",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="before the same task may be asked for again (default: 60)",
    )
    load.add_argument(
        "--overload-clear-threshold",
        dest="agent_overload_clear_threshold",
        type=float,
        metavar="SHARE",
        help="after a request, ask for no new task until what was above the threshold has "
        "fallen to this share or less (hysteresis; default: the threshold minus 0.1)",
    )
    load.add_argument(
        "--no-overload-detection",
        dest="agent_overload_detection",
        action="store_false",
        help="report the load but never ask for migrations",
    )


def _byte_count(text: str) -> int:
    """An integer number of bytes (``1.5e9`` is accepted)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"not a whole number of bytes: {text!r}")
    return int(value)


def add_agent_command(subparsers: Any) -> None:
    """Register the ``agent`` subcommand on an argparse subparsers object."""
    parser = subparsers.add_parser(
        "agent",
        help="run the node agent on a GPU server",
        description="Run the mlsched node agent until SIGTERM/SIGINT. Stopping the agent leaves "
        "training processes running; a restarted agent re-adopts them.",
    )
    add_agent_arguments(parser)
    parser.set_defaults(func=run_from_args)


def _join_token(args: argparse.Namespace) -> str:
    if args.agent_join_token:
        return str(args.agent_join_token)
    if args.agent_join_token_file:
        try:
            return Path(args.agent_join_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the join token file: {exc}") from None
    # None given is fine for an agent that holds its certificate (nodeagent/credentials.py
    # asks for one where it is needed: to join, or with --insecure).
    return os.environ.get(JOIN_TOKEN_ENV, "").strip()


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    """Build and validate an AgentConfig from parsed arguments."""
    controller = (
        args.agent_controller
        or getattr(args, "controller", None)
        or os.environ.get(CONTROLLER_ENV, "")
    )
    config = AgentConfig(
        controller=controller,
        join_token=_join_token(args),
        state_dir=args.agent_state_dir,
        checkpoint_root=args.agent_checkpoint_root,
        advertise_address=args.agent_advertise_address,
        gpus=args.agent_gpus,
        gpu_slices=args.agent_gpu_slices,
        metrics_interval_s=args.agent_metrics_interval,
        suspend_grace_s=args.agent_suspend_grace,
        suspend_save_extension_s=args.agent_suspend_save_extension,
        min_free_disk_bytes=args.agent_min_free_disk,
        trainer_listen=args.agent_trainer_listen,
        cpu_capacity=args.agent_cpu_capacity,
        memory_capacity=args.agent_memory_capacity,
        bandwidth_capacity=args.agent_bandwidth_capacity,
        load_scope=args.agent_load_scope,
        overload_detection=args.agent_overload_detection,
        overload_threshold=args.agent_overload_threshold,
        migration_share=args.agent_migration_share,
        overload_samples=args.agent_overload_samples,
        migration_cooldown_s=args.agent_migration_cooldown,
        overload_clear_threshold=args.agent_overload_clear_threshold,
        http_listen=args.agent_http_listen,
        run_tasks_as=args.agent_run_tasks_as,
        task_uid_range=args.agent_task_uid_range,
    )
    if args.agent_node_id:
        config.node_id = args.agent_node_id
    config.validate()
    try:
        config.task_users().check_privileges()
    except TaskUserError as exc:
        raise ConfigError(str(exc)) from None
    return config


def _uid_range(text: str) -> tuple[int, int]:
    try:
        return parse_uid_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run_from_args(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM/SIGINT; returns the process exit code."""
    from nodeagent.agent import NodeAgent

    if not logging.getLogger().handlers or getattr(args, "log_format", "text") != "text":
        try:
            configure_logging(
                getattr(args, "log_level", "INFO"), getattr(args, "log_format", "text")
            )
        except ValueError as exc:  # MLSCHED_LOG_LEVEL/FORMAT (argparse checks the flags)
            print(f"mlsched agent: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    try:
        config = config_from_args(args)
        credentials = channel_credentials(config, security_args(args))
    except ConfigError as exc:
        print(f"mlsched agent: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    agent = NodeAgent(config, channel_credentials=credentials)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, frame: agent.stop())
    try:
        try:
            agent.start()
        except (ConfigError, GpuConfigError, OSError) as exc:
            log.error("cannot start the agent: %s", exc)
            return EXIT_CONFIG
        code = agent.run()
        if agent.fatal_error:
            print(f"mlsched agent: {agent.fatal_error}", file=sys.stderr)
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    """``python -m nodeagent``: the agent flags without a subcommand."""
    parser = argparse.ArgumentParser(prog="python -m nodeagent", description="mlsched node agent")
    add_agent_arguments(parser)
    return run_from_args(parser.parse_args(argv))
