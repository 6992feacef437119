"""The trainer shim's cost per training step (issue 18 #3), single-process and DDP.

Each rank runs the examples' loop shape (examples/ddp_classifier.py): a DDP step of a small MLP,
padded with busy work to `--step-ms`, then `should_stop()` (with a scale callback registered, as
the DDP example does), `report()` and `should_suspend()`. Three modes, interleaved in blocks so
the machine's drift hits all of them alike:

- `none`: the loop without the shim's calls;
- `every-step`: the shim with `sync_period=0`, the ranks exchanging at every step (one
  all-reduce answering all the questions; before the paced exchanges the shim ran two
  all-reduces and a broadcast per step);
- `paced`: the shim as shipped (`sync_period` = `trainer_shim.step_sync.DEFAULT_PERIOD_S`).

Printed per world size and mode: the median over blocks of the mean step time, the time spent
inside the shim's calls per step, and both as a share of the `none` step (`overhead %` from
the step times, `in-shim %` from the calls' own time, the steadier of the two on a busy
machine). The shim runs in local mode (no agent): its questions are answered from local state
and the ranks' exchanges, which is the per-step cost under an agent too (the session reports
from a background thread).

    .venv/bin/python benchmarks/bench_shim.py [--step-ms 10] [--steps 400] [--blocks 5]
        [--worlds 1,2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trainer_shim

MODES = {"none": None, "every-step": 0.0, "paced": trainer_shim.step_sync.DEFAULT_PERIOD_S}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spin_until(deadline: float) -> None:
    while time.perf_counter() < deadline:
        pass


def run_block(job, model, optimizer, steps: int, step_s: float) -> tuple[float, float]:
    """Mean step time and mean time inside the shim's calls per step, over `steps` steps."""
    generator = torch.Generator().manual_seed(0)
    in_shim = 0.0
    start = time.perf_counter()
    for step in range(steps):
        step_start = time.perf_counter()
        inputs = torch.randn(32, 64, generator=generator)
        optimizer.zero_grad()
        loss = model(inputs).square().mean()
        loss.backward()
        optimizer.step()
        spin_until(step_start + step_s)
        if job is not None:
            t0 = time.perf_counter()
            job.should_stop()
            job.report(step, loss=loss.detach())
            job.should_suspend()
            in_shim += time.perf_counter() - t0
    return (time.perf_counter() - start) / steps, in_shim / steps


def worker(rank: int, world: int, port: int, args: argparse.Namespace, out: mp.Queue) -> None:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method="env://")
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step_s = args.step_ms / 1000
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    run_block(None, model, optimizer, args.steps // 4, step_s)  # warm-up
    for _ in range(args.blocks):
        for mode, period in MODES.items():
            if period is None:
                results[mode].append(run_block(None, model, optimizer, args.steps, step_s))
                continue
            with trainer_shim.init(sync_period=period, handle_sigterm=False) as job:
                job.on_scale_change(lambda scale: None)  # as the DDP example: batch questions too
                results[mode].append(run_block(job, model, optimizer, args.steps, step_s))
    if world > 1:
        dist.destroy_process_group()
    if rank == 0:
        out.put(results)


def measure(world: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    context = mp.get_context("spawn")
    queue = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=worker, args=(rank, world, port, args, queue))
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    results = queue.get(timeout=1800)
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"rank process exited with {process.exitcode}")
    base = statistics.median(step for step, _ in results["none"])
    table = {}
    for mode, blocks in results.items():
        step = statistics.median(s for s, _ in blocks)
        shim = statistics.median(c for _, c in blocks)
        table[mode] = {
            "step_ms": step * 1000,
            "in_shim_ms": shim * 1000,
            "overhead_pct": (step - base) / base * 100,
            "in_shim_pct": shim / base * 100,
        }
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=400, help="steps per block")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--worlds", default="1,2", help="world sizes to measure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    report = {}
    for world in (int(w) for w in args.worlds.split(",")):
        report[f"world{world}"] = measure(world, args)
    if args.json:
        print(json.dumps({"step_ms_target": args.step_ms, **report}, indent=2))
        return
    print(f"step {args.step_ms} ms, {args.blocks} blocks of {args.steps} steps per mode")
    print(f"{'world':>5} {'mode':>10} {'step ms':>8} {'in-shim ms':>10} {'overhead %':>10} "
          f"{'in-shim %':>9}")  # fmt: skip
    for world, table in report.items():
        for mode, row in table.items():
            print(
                f"{world[5:]:>5} {mode:>10} {row['step_ms']:8.3f} {row['in_shim_ms']:10.4f} "
                f"{row['overhead_pct']:10.2f} {row['in_shim_pct']:9.3f}"
            )


if __name__ == "__main__":
    main()
