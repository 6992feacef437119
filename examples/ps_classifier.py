"""Train an MLP on spirals with parameter servers (torch.distributed.rpc) and trainer_shim.

One job, two roles (issue 16; docs/task-environment.md): ranks 0..w-1 are workers, the ranks
after them parameter servers (PS), all in one rpc group at MASTER_ADDR:MASTER_PORT. Under
mlsched the roles come from MLSCHED_NUM_WORKERS; locally from --workers (a single process
holds the PS itself):

    python examples/ps_classifier.py --max-iterations 300 --checkpoint-dir /tmp/ps
    torchrun --nproc-per-node 3 examples/ps_classifier.py --workers 2 --checkpoint-dir /tmp/ps

Synchronous training driven by the chief (rank 0): each step every worker fetches the
parameters from the servers (PS j holds the parameter tensors i with i % p == j), computes the
gradient of its share of the global batch (drawn from a generator seeded by (seed, step,
worker)) and pushes it to the servers; once every worker has pushed, the chief tells each
server to apply the mean gradient (SGD with momentum). The chief reports progress and loss,
and checkpoints through the servers: it gathers their parameters and momentum into its copy
of the model and saves that; on resume it restores the checkpoint and hands each server its
shard, whatever the new numbers of workers and servers. Workers and servers only serve rpc
calls and leave when the chief ends the group.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time

import torch
import torch.distributed.rpc as rpc
from synthetic import spirals  # examples/synthetic.py, next to this script
from torch import nn

import trainer_shim


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--batch-size", type=int, default=128, help="global; unless the spec sets one")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--train-size", type=int, default=20000)
    p.add_argument("--test-size", type=int, default=4000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-iterations", type=int, default=1000, help="unless the spec sets one")
    p.add_argument("--workers", type=int, default=1, help="local mode: ranks that are workers")
    p.add_argument("--checkpoint-dir", default=None, help="local mode only")
    p.add_argument("--resume", action="store_true", help="local mode: resume from the newest")
    return p.parse_args(argv)


def build_model(hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(2, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


class ParameterServer:
    """One shard: parameter tensors (by global index) and their momentum buffers."""

    def __init__(
        self,
        shard: dict[int, torch.Tensor],
        momentum: dict[int, torch.Tensor],
        lr: float,
        beta: float,
    ) -> None:
        self.params = {i: t.clone() for i, t in shard.items()}
        self.momentum = {i: m.clone() for i, m in momentum.items()}
        self.lr, self.beta = lr, beta
        self.grads: dict[int, torch.Tensor] = {}
        self.pushes = 0
        self.lock = threading.Lock()

    def get(self) -> dict[int, torch.Tensor]:
        with self.lock:
            return {i: t.clone() for i, t in self.params.items()}

    def push(self, grads: dict[int, torch.Tensor]) -> None:
        with self.lock:
            for i, g in grads.items():
                self.grads[i] = self.grads[i] + g if i in self.grads else g.clone()
            self.pushes += 1

    def apply(self) -> None:
        """SGD with momentum on the mean of this step's pushed gradients."""
        with self.lock:
            for i, total in self.grads.items():
                m = self.momentum[i].mul_(self.beta).add_(total / self.pushes)
                self.params[i].sub_(self.lr * m)
            self.grads, self.pushes = {}, 0

    def state(self) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        with self.lock:
            return self.get_unlocked(), {i: m.clone() for i, m in self.momentum.items()}

    def get_unlocked(self) -> dict[int, torch.Tensor]:
        return {i: t.clone() for i, t in self.params.items()}


class Worker:
    """Computes one share of each global batch on its own copy of the model."""

    def __init__(
        self,
        args: argparse.Namespace,
        index: int,
        workers: int,
        servers: list[rpc.RRef],
        device: torch.device,
    ) -> None:
        self.index, self.workers, self.servers, self.device = index, workers, servers, device
        self.seed = args.seed
        x, y = spirals(args.train_size, args.classes, seed=args.seed)
        self.x, self.y = x.to(device), y.to(device)
        self.model = build_model(args.hidden, args.classes).to(device)

    def pull(self) -> None:
        """The servers' parameters into this worker's model."""
        params = list(self.model.parameters())
        for server in self.servers:
            for i, t in server.rpc_sync().get().items():
                params[i].data.copy_(t.to(self.device))

    def compute(self, step: int, global_batch: int) -> float:
        self.pull()
        local = max(1, global_batch // self.workers)
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + step) * 4_099 + self.index)
        index = torch.randint(len(self.x), (local,), generator=g).to(self.device)
        self.model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(self.x[index]), self.y[index])
        loss.backward()
        grads = [p.grad.detach().cpu() for p in self.model.parameters()]
        futures = [
            server.rpc_async().push(
                {i: grads[i] for i in shard_of(len(grads), j, len(self.servers))}
            )
            for j, server in enumerate(self.servers)
        ]
        torch.futures.wait_all(futures)
        return loss.item()


def shard_of(count: int, server: int, servers: int) -> list[int]:
    """The parameter tensors PS ``server`` holds: indices i with i % servers == server."""
    return [i for i in range(count) if i % servers == server]


def roles(world_size: int, local_workers: int) -> tuple[int, int]:
    """(workers, servers): the agent's MLSCHED_NUM_WORKERS, else --workers (locally)."""
    workers = int(os.environ.get("MLSCHED_NUM_WORKERS") or min(local_workers, world_size))
    if not 1 <= workers <= world_size:
        raise SystemExit(f"{workers} workers in a group of {world_size}")
    return workers, world_size - workers


def rpc_name(rank: int, workers: int) -> str:
    return f"worker{rank}" if rank < workers else f"ps{rank - workers}"


@torch.no_grad()
def accuracy(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    return (model(inputs).argmax(dim=1) == labels).float().mean().item()


def gather(model: nn.Module, servers: list[rpc.RRef]) -> list[torch.Tensor]:
    """Checkpoint through the servers: their parameters into ``model``; the momentum list."""
    params = list(model.parameters())
    momentum: list[torch.Tensor] = [torch.zeros_like(p) for p in params]
    for server in servers:
        shard, buffers = server.rpc_sync().state()
        for i, t in shard.items():
            params[i].data.copy_(t.to(params[i].device))
            momentum[i] = buffers[i]
    return momentum


def chief(
    job: trainer_shim.JobContext, args: argparse.Namespace, workers: int, servers: int
) -> dict[str, object]:
    """Rank 0: restore, place the shards on the servers, drive the steps, save, report."""
    device = job.device
    torch.manual_seed(args.seed)  # the same initial weights whatever the roles
    model = build_model(args.hidden, args.classes).to(device)
    step = saved_step = job.restore(model)
    extra = job.load_extra()
    params = [p.detach().cpu() for p in model.parameters()]
    momentum = list(extra.get("momentum") or [torch.zeros_like(p) for p in params])
    hosts = [rpc_name(workers + j, workers) for j in range(servers)] or ["worker0"]
    ps = [
        rpc.remote(
            host,
            ParameterServer,
            args=(
                {i: params[i] for i in shard_of(len(params), j, len(hosts))},
                {i: momentum[i] for i in shard_of(len(params), j, len(hosts))},
                args.lr,
                args.momentum,
            ),
        )
        for j, host in enumerate(hosts)
    ]
    remote = [
        rpc.remote(rpc_name(i, workers), Worker, args=(args, i, workers, ps, torch.device("cpu")))
        for i in range(1, workers)
    ]
    local = Worker(args, 0, workers, ps, device)
    test_x, test_y = spirals(args.test_size, args.classes, seed=args.seed + 1)
    global_batch = (job.restored and job.restored.batch_size) or job.batch_size or args.batch_size
    loss = float("nan")
    times: list[float] = []  # this attempt's step times, for the summary
    while not job.should_stop():
        started = time.perf_counter()
        futures = [w.rpc_async().compute(step, global_batch) for w in remote]
        losses = [local.compute(step, global_batch)] + [f.wait() for f in futures]
        torch.futures.wait_all([server.rpc_async().apply() for server in ps])
        step += 1
        loss = sum(losses) / len(losses)
        metrics = None
        if step % args.eval_every == 0:
            gather(model, ps)
            metrics = {"accuracy": accuracy(model, test_x.to(device), test_y.to(device))}
        times.append(time.perf_counter() - started)
        job.report(
            step,
            loss=loss,
            metrics=metrics,
            iteration_time=times[-1],
            batch_size=global_batch,
        )
        if job.should_suspend() or step % args.checkpoint_every == 0:
            save(job, step, model, ps)
            saved_step = step
            if job.suspend_reason is not None:
                break
    if job.suspend_reason is None and step != saved_step:
        save(job, step, model, ps)  # the final weights
    gather(model, ps)
    return {
        "step": step,
        "loss": loss,
        "accuracy": accuracy(model, test_x.to(device), test_y.to(device)),
        "workers": workers,
        "servers": servers,
        # the median step of this attempt (benchmarks/ps_example_times.py reads it)
        "median_step_s": sorted(times)[len(times) // 2] if times else None,
    }


def save(job: trainer_shim.JobContext, step: int, model: nn.Module, ps: list[rpc.RRef]) -> None:
    momentum = gather(model, ps)
    job.save_checkpoint(step, model, extra={"momentum": momentum})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))
    with trainer_shim.init(
        checkpoint_dir=args.checkpoint_dir,
        max_iterations=args.max_iterations,
        batch_size=args.batch_size,
        resume=args.resume,
    ) as job:
        rank, world_size = job.rank, job.world_size
        workers, servers = roles(world_size, args.workers)
        address = f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:"
        address += os.environ.get("MASTER_PORT", "29500")
        options = rpc.TensorPipeRpcBackendOptions(init_method=address, num_worker_threads=16)
        rpc.init_rpc(
            rpc_name(rank, workers), rank=rank, world_size=world_size, rpc_backend_options=options
        )
        summary: dict[str, object] = {"rank": rank, "role": "worker" if rank < workers else "ps"}
        try:
            if rank == 0:
                summary |= chief(job, args, workers, servers)
        finally:
            rpc.shutdown()  # waits for every process: the others serve until the chief is done
        if rank != 0:
            job.should_suspend()  # a suspension the agent sent this task too is recorded
        summary["suspended"] = job.suspend_reason is not None
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
