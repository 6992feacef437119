"""In-place resizing against checkpoint-restart, on the node agent's own task table.

Runs `examples/elastic_classifier.py` (ddp_classifier's model and data, gloo on CPU) under a
real `TaskManager` and `TrainerServer` (the agent's components, no controller) and times, per
repetition, on fresh jobs:

- in place (`TaskManager.regroup`, trainer_shim/regroup.py): 1 -> 2 ranks, the batch size
  128 -> 256 at 2 ranks (`SetBatchSize`, no regroup), 2 -> 1 ranks;
- checkpoint-restart: suspend every rank (checkpoint, exit), relaunch the next attempt at the
  new size resuming from the checkpoint: 1 -> 2 and 2 -> 1.

A change's time is from the command to the last rank of the new shape finishing its first step
in it (the example prints `first_step` with the unix time; the leaving rank's exit is not
waited for). In place, rank 0 trains on while a new rank starts, so `*_pause` adds how long
rank 0 did not train: from the end of its last step before the switch to the end of its first
step after it. A checkpoint-restart's pause is its whole time (the processes stop at once).
Prints a table of medians (and every sample); `--json` prints them as JSON instead (the
per-repetition lines go to stderr), `--json-out PATH` writes that JSON to a file too.

    nice -n 10 .venv/bin/python benchmarks/bench_resize.py --repeat 3 --json-out out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mlsched import jsonflag  # noqa: E402
from mlsched.jsonflag import add_json_options  # noqa: E402
from nodeagent.launcher import find_free_port  # noqa: E402
from nodeagent.model import (  # noqa: E402
    BatchSizeCommand,
    LaunchRequest,
    ProgressInfo,
    RegroupRequest,
    TaskRef,
    TaskStatusInfo,
)
from nodeagent.paths import AgentPaths  # noqa: E402
from nodeagent.tasks import NodeShape, TaskManager  # noqa: E402
from nodeagent.trainer_service import TrainerServer  # noqa: E402

EXAMPLE = REPO / "examples" / "elastic_classifier.py"
ARGS = (
    "--max-iterations",
    "100000000",
    "--checkpoint-every",
    "100000000",
    "--eval-every",
    "100000000",
)
TIMEOUT_S = 600.0


class Statuses:
    """TaskEvents keeping the latest status of every task attempt."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.latest: dict[TaskRef, TaskStatusInfo] = {}

    def task_status(self, status: TaskStatusInfo) -> None:
        with self._cond:
            self.latest[status.ref] = status
            self._cond.notify_all()

    def task_progress(self, ref: TaskRef, progress: ProgressInfo) -> None:
        pass

    def wait_ended(self, refs: list[TaskRef]) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: all(r in self.latest and self.latest[r].state.is_final for r in refs),
                TIMEOUT_S,
            )
        if not ok:
            raise TimeoutError(f"tasks {refs} did not end")


class Node:
    """A task table, its trainer service and a poller: the agent without its controller."""

    def __init__(self, root: Path) -> None:
        self.paths = AgentPaths(root / "state", root / "ckpt")
        self.paths.state_dir.mkdir(parents=True)
        self.events = Statuses()
        self.tasks = TaskManager(
            paths=self.paths,
            node=NodeShape("bench", frozenset({0, 1}), 2, 2),
            events=self.events,
            suspend_grace_s=120,
            kill_grace_s=5,
        )
        self.server = TrainerServer(self.tasks, "127.0.0.1:0", self.paths.trainer_address_file)
        self.tasks.set_trainer_address(self.server.start())
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self.tasks.poll()

    def close(self) -> None:
        for ref, _ in self.tasks.running():
            self.tasks.kill(ref, "benchmark over")
        refs = [ref for ref, _ in self.tasks.running()]
        self.events.wait_ended(refs)
        self._stop.set()
        self._poller.join()
        self.server.stop()

    def end(self, refs: list[TaskRef]) -> None:
        """Stop a job's tasks (so no job trains beside the next measurement)."""
        for ref in refs:
            self.tasks.kill(ref, "measured")
        self.events.wait_ended(refs)

    def launch(self, job: str, attempt: int, world: int, resume: bool) -> list[TaskRef]:
        port = find_free_port()
        refs = [TaskRef(job, rank, attempt) for rank in range(world)]
        for ref in refs:
            self.tasks.launch(self.request(ref, world, port, resume))
        return refs

    def request(self, ref: TaskRef, world: int, port: int, resume: bool) -> LaunchRequest:
        return LaunchRequest(
            ref,
            (sys.executable, str(EXAMPLE), *ARGS),
            working_dir=str(EXAMPLE.parent),
            env={"PYTHONUNBUFFERED": "1"},
            gpu_indices=(ref.rank,),
            world_size=world,
            local_rank=ref.rank,
            local_world_size=world,
            master_port=port,
            resume=resume,
            batch_size=128,
        )

    def events_of(self, ref: TaskRef) -> list[dict[str, Any]]:
        """The JSON events `ref`'s attempt printed so far."""
        path = self.paths.log_file(ref.job_id, ref.rank)
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        header = f"=== attempt {ref.attempt} on node "
        part = text.rsplit(header, 1)
        if len(part) < 2:
            return []
        return [json.loads(line) for line in part[1].splitlines() if line.startswith('{"event"')]

    def first_step_after(self, refs: list[TaskRef], since: float, **match: int) -> float:
        """Wait until every ref printed a `first_step` after `since` (with the `match` fields);
        the latest such time."""

        def times() -> list[float] | None:
            found = []
            for ref in refs:
                after = [
                    e["time"]
                    for e in self.events_of(ref)
                    if e["event"] == "first_step"
                    and e["time"] >= since
                    and all(e.get(k) == v for k, v in match.items())
                ]
                if not after:
                    return None
                found.append(min(after))
            return found

        return max(_wait(times))


def _wait(probe: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's job did not get there")
        time.sleep(0.05)
    return value


def in_place(node: Node, job: str) -> dict[str, float]:
    """1 -> 2 ranks, batch 128 -> 256, 2 -> 1 ranks, all without a restart."""
    refs = node.launch(job, 1, 1, resume=False)
    node.first_step_after(refs, 0.0)
    out: dict[str, float] = {}
    grown = [TaskRef(job, 0, 1), TaskRef(job, 1, 1)]
    start = time.time()
    ok = node.tasks.regroup(RegroupRequest(job, 1, 1, 2, (node.request(grown[1], 2, 0, False),)))
    assert ok, "regroup refused"
    out["grow_1_to_2"] = node.first_step_after(grown, start, world_size=2) - start
    out["grow_1_to_2_pause"] = _pause(node, grown[0], 1)
    start = time.time()
    for ref in grown:
        node.tasks.trainer_command(ref, BatchSizeCommand(256))
    out["batch_128_to_256"] = node.first_step_after(grown, start, batch_size=256) - start
    start = time.time()
    assert node.tasks.regroup(RegroupRequest(job, 1, 2, 1)), "regroup refused"
    out["shrink_2_to_1"] = node.first_step_after(grown[:1], start, world_size=1) - start
    out["shrink_2_to_1_pause"] = _pause(node, grown[0], 2)
    node.events.wait_ended(grown[1:])  # the leaving rank ends by itself
    node.end(grown[:1])
    return out


def _pause(node: Node, ref: TaskRef, generation: int) -> float:
    """How long `ref` did not train around a regroup: from the end of its last step before it
    to the end of its first step after it."""
    events = node.events_of(ref)
    change = next(
        i
        for i, e in enumerate(events)
        if e["event"] == "regrouped" and e["generation"] == generation
    )
    first = next(e for e in events[change:] if e["event"] == "first_step")
    return float(first["time"] - events[change]["idle_from"])


def restart(node: Node, job: str) -> dict[str, float]:
    """1 -> 2 and 2 -> 1 ranks by checkpoint, exit and a resumed relaunch."""
    refs = node.launch(job, 1, 1, resume=False)
    node.first_step_after(refs, 0.0)
    out: dict[str, float] = {}
    for attempt, world, name in ((2, 2, "grow_1_to_2"), (3, 1, "shrink_2_to_1")):
        start = time.time()
        for ref in refs:
            node.tasks.suspend(ref, 0, "resize by checkpoint-restart")
        node.events.wait_ended(refs)
        refs = node.launch(job, attempt, world, resume=True)
        out[name] = node.first_step_after(refs, start) - start
    node.end(refs)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    add_json_options(p, "the samples, medians and ratios")
    args = jsonflag.parse_args(p, argv)
    log = sys.stderr if args.json else sys.stdout  # with --json, stdout is the JSON alone
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-resize-") as tmp:
        node = Node(Path(tmp))
        try:
            for i in range(args.repeat):
                for path, run in (("in_place", in_place), ("restart", restart)):
                    for name, seconds in run(node, f"{path.replace('_', '-')}-{i}").items():
                        samples.setdefault(f"{path}/{name}", []).append(seconds)
                        print(
                            f"rep {i} {path:9s} {name:17s} {seconds:7.2f} s", file=log, flush=True
                        )
        finally:
            node.close()
    medians = {key: statistics.median(values) for key, values in samples.items()}
    ratios = {
        change: medians[f"restart/{change}"] / medians[f"in_place/{change}"]
        for change in ("grow_1_to_2", "shrink_2_to_1")
    }
    ratios.update(
        {
            f"{change}_pause": medians[f"restart/{change}"] / medians[f"in_place/{change}_pause"]
            for change in ("grow_1_to_2", "shrink_2_to_1")
        }
    )
    report = {"samples": samples, "medians": medians, "ratios": ratios, "loadavg": os.getloadavg()}
    text = json.dumps(report, indent=2) + "\n"
    if args.json:
        sys.stdout.write(text)
    else:
        print(f"\nload average {os.getloadavg()[0]:.1f} (1 min), {args.repeat} repetitions")
        print(f"{'path/change':32s} {'median s':>9s}  samples")
        for key in sorted(samples):
            values = " ".join(f"{v:.2f}" for v in samples[key])
            print(f"{key:32s} {medians[key]:9.2f}  {values}")
        for change, ratio in ratios.items():
            print(f"restart / in place, {change}: {ratio:.1f}x")
    if args.json_out is not None:
        args.json_out.write_text(text)


if __name__ == "__main__":
    main()
