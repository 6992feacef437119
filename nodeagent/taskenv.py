"""The environment of a task process (docs/task-environment.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.gpus import physical_indices
from nodeagent.model import Launcher, LaunchRequest
from nodeagent.ps_role import ROLE_VARIABLES, role_env

DEFAULT_MASTER_ADDR = "127.0.0.1"


@dataclass(frozen=True)
class TaskContext:
    """What the agent adds to a launch request to build the environment."""

    token: str
    agent_addr: str
    agent_addr_file: str
    checkpoint_dir: str
    exit_file: str
    virtual_gpus: bool  # the task's GPUs are virtual slots
    cpu_count: int
    node_gpu_slots: int
    master_port: int
    gpu_slices: int = 1  # GPU slots per physical GPU (``--gpu-slices``)


def omp_threads(cpu_count: int, task_gpus: int, node_gpu_slots: int) -> int:
    """CPU threads for a task: the node's cores per GPU slot, times the slots the task holds.

    A task without GPUs gets one slot's share; a node without slots shares all cores.
    """
    share = cpu_count * max(1, task_gpus) // max(1, node_gpu_slots)
    return max(1, share)


def build_task_env(
    request: LaunchRequest, context: TaskContext, base_env: Mapping[str, str]
) -> dict[str, str]:
    """Return the full environment of a task process.

    ``base_env`` (the agent's own environment) minus every inherited ``MLSCHED_*`` variable (the
    agent's join token must not leak into jobs), then the job spec's env, then the contract
    variables, which win over the spec except for ``OMP_NUM_THREADS``.
    """
    env = {k: v for k, v in base_env.items() if not k.startswith("MLSCHED_")}
    env.update(request.env)
    ref = request.ref
    contract = {
        "MLSCHED_TASK_ID": ref.task_id,
        "MLSCHED_TASK_TOKEN": context.token,
        "MLSCHED_AGENT_ADDR": context.agent_addr,
        "MLSCHED_AGENT_ADDR_FILE": context.agent_addr_file,
        "MLSCHED_CHECKPOINT_DIR": context.checkpoint_dir,
        "MLSCHED_RESUME": "1" if request.resume else "0",
        "MLSCHED_EXIT_FILE": context.exit_file,
        "MLSCHED_VIRTUAL_GPUS": "1" if context.virtual_gpus else "0",
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, task_gpus(request, context.gpu_slices))),
        "RANK": str(ref.rank),
        "WORLD_SIZE": str(max(1, request.world_size)),
        "LOCAL_RANK": str(request.local_rank),
        "LOCAL_WORLD_SIZE": str(max(1, request.local_world_size)),
        "MASTER_ADDR": request.master_addr or DEFAULT_MASTER_ADDR,
        "MASTER_PORT": str(context.master_port),
    }
    for key in (
        "MLSCHED_MAX_ITERATIONS",
        "MLSCHED_TARGET_METRIC",
        "MLSCHED_TARGET_VALUE",
        "MLSCHED_TARGET_GOAL",
        "MLSCHED_BATCH_SIZE",
    ):
        env.pop(key, None)  # only the job spec's criterion counts, never a stray env entry
    if request.max_iterations:
        contract["MLSCHED_MAX_ITERATIONS"] = str(request.max_iterations)
    if request.target is not None:
        contract["MLSCHED_TARGET_METRIC"] = request.target.metric
        contract["MLSCHED_TARGET_VALUE"] = repr(float(request.target.value))
        contract["MLSCHED_TARGET_GOAL"] = request.target.goal
    if request.batch_size > 0:
        contract["MLSCHED_BATCH_SIZE"] = str(request.batch_size)
    for key in ROLE_VARIABLES:
        env.pop(key, None)  # a PS job's roles come from the launch, never from the spec's env
    contract.update(role_env(ref.rank, max(1, request.world_size), request.ps_workers))
    contract.update(
        torchrun_env(request, contract["MASTER_ADDR"], context.master_port, context.gpu_slices)
    )
    env.update(contract)
    if "OMP_NUM_THREADS" not in request.env:
        threads = omp_threads(context.cpu_count, len(request.gpu_indices), context.node_gpu_slots)
        if request.launcher is Launcher.TORCHRUN:  # shared by the launcher's processes
            threads = max(1, threads // processes_per_launcher(request, context.gpu_slices))
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def task_gpus(request: LaunchRequest, gpu_slices: int = 1) -> tuple[int, ...]:
    """The physical GPUs a task's slots are on (slot ``s`` on GPU ``s // gpu_slices``), each
    once: its ``CUDA_VISIBLE_DEVICES``."""
    return physical_indices(request.gpu_indices, gpu_slices)


def processes_per_launcher(request: LaunchRequest, gpu_slices: int = 1) -> int:
    """The training processes one torchrun task starts: one per GPU it holds (a GPU once,
    however many of its slots the task holds)."""
    return max(1, len(task_gpus(request, gpu_slices)))


def torchrun_env(
    request: LaunchRequest, master_addr: str, master_port: int, gpu_slices: int = 1
) -> dict[str, str]:
    """What a task whose command runs torchrun gets besides the usual contract (else nothing).

    torchrun reads its options from ``PET_<OPTION>`` when the command line leaves them out, so
    ``torchrun script.py`` joins the job's static rendezvous as node ``rank`` of ``world_size``
    with one process per GPU of the task. The ``TORCHELASTIC_*`` pair and ``NODE_RANK`` /
    ``GROUP_RANK`` describe the launcher itself; torchrun sets its own in its children.
    """
    if request.launcher is not Launcher.TORCHRUN:
        return {}
    ref = request.ref
    return {
        "MLSCHED_LAUNCHER": Launcher.TORCHRUN.value,
        "NODE_RANK": str(ref.rank),
        "GROUP_RANK": str(ref.rank),
        "PET_NNODES": str(max(1, request.world_size)),
        "PET_NODE_RANK": str(ref.rank),
        "PET_NPROC_PER_NODE": str(processes_per_launcher(request, gpu_slices)),
        "PET_RDZV_BACKEND": "static",
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
        "PET_RDZV_ID": ref.job_id,
        "PET_MAX_RESTARTS": "0",  # a failed attempt is the controller's to retry
        "TORCHELASTIC_RUN_ID": ref.job_id,
        "TORCHELASTIC_RESTART_COUNT": str(max(0, ref.attempt - 1)),
    }
