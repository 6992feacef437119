"""Lightweight node agents for ``bench_control_plane.py``: many real gRPC agent sessions in one
asyncio process, speaking proto/mlsched/v1/agent.proto; the tasks are simulated.

An agent registers with 8 virtual GPUs, sends a metrics report every heartbeat interval the
controller asks for (``NodeMetrics.time`` = send time, so the controller's ``last_seen`` minus it
is the heartbeat's delay), and runs each launched task as: RUNNING at once, one progress report
per heartbeat, COMPLETED after ``--task-heartbeats`` heartbeats. Suspend and kill orders end the
task at once. The agent's conversion code (nodeagent.convert) imports the controller package, so
the few messages are built here from the generated types.

    python benchmarks/control_plane_agents.py --address HOST:PORT --token-file F --first 0 \
        --count 250 --out agents0.json     # runs until stdin closes

Prints ``registered N`` and ``done N`` (tasks whose end the controller acknowledged) lines as
they change; writes the launch receipt times and counts to ``--out`` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field

import grpc

from mlsched.v1 import agent_pb2, agent_pb2_grpc, common_pb2

GPUS = 8
JOIN_TOKEN_KEY = "mlsched-join-token"
# Own TCP connection per agent (by default channels to one address share one).
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


@dataclass
class Totals:
    registered: int = 0
    done: int = 0
    launch_receipts: dict[str, float] = field(default_factory=dict)  # "job/attempt" -> time
    errors: list[str] = field(default_factory=list)


@dataclass
class SimTask:
    ref: agent_pb2.TaskRef
    heartbeats_left: int
    iteration: int = 0


class FakeAgent:
    """One session; commands are handled as they arrive, reports go out through one writer."""

    def __init__(self, node_id: str, args: argparse.Namespace, totals: Totals) -> None:
        self.node_id = node_id
        self.args = args
        self.totals = totals
        self.tasks: dict[tuple[str, int, int], SimTask] = {}
        self.ended: set[tuple[str, int, int]] = set()
        self.outbox: asyncio.Queue[agent_pb2.AgentSessionRequest] = asyncio.Queue()

    async def run(self, stop: asyncio.Event) -> None:
        async with grpc.aio.insecure_channel(self.args.address, options=CHANNEL_OPTIONS) as ch:
            call = agent_pb2_grpc.AgentServiceStub(ch).AgentSession(
                metadata=((JOIN_TOKEN_KEY, self.args.token),)
            )
            await call.write(self._register())
            first = await call.read()
            if first is grpc.aio.EOF or first.WhichOneof("message") != "registered":
                self.totals.errors.append(f"{self.node_id}: not registered")
                return
            self.totals.registered += 1
            interval = first.registered.heartbeat_interval_s or 1.0
            loops = [
                asyncio.create_task(self._write(call)),
                asyncio.create_task(self._read(call)),
                asyncio.create_task(self._beat(interval, stop)),
            ]
            await stop.wait()
            for task in loops:
                task.cancel()
            call.cancel()

    def _register(self) -> agent_pb2.AgentSessionRequest:
        gpus = [
            common_pb2.GpuInfo(index=i, name="virtual", virtual=True, memory_total_bytes=0)
            for i in range(GPUS)
        ]
        return agent_pb2.AgentSessionRequest(
            register=agent_pb2.RegisterAgent(
                node_id=self.node_id,
                address="127.0.0.1",
                hostname=self.node_id,
                gpus=gpus,
                cpu_count=64,
                memory_total_bytes=512 << 30,
                agent_version="bench",
                self_fence_margin_s=10.0,
            )
        )

    async def _write(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            await call.write(await self.outbox.get())

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:
        while True:
            reply = await call.read()
            if reply is grpc.aio.EOF:
                self.totals.errors.append(f"{self.node_id}: session closed by the controller")
                return
            self._handle(reply)

    def _handle(self, reply: agent_pb2.AgentSessionResponse) -> None:
        kind = reply.WhichOneof("message")
        if kind == "launch":
            ref = reply.launch.task
            self.totals.launch_receipts[f"{ref.job_id}/{ref.attempt}"] = time.time()
            self.tasks[_key(ref)] = SimTask(ref, self.args.task_heartbeats)
            self._status(ref, common_pb2.TASK_STATE_RUNNING)
        elif kind in ("suspend", "kill"):
            ref = getattr(reply, kind).task
            if self.tasks.pop(_key(ref), None) is not None:
                state = common_pb2.TASK_STATE_SUSPENDED
                if kind == "kill":
                    state = common_pb2.TASK_STATE_KILLED
                self.ended.add(_key(ref))
                self._status(ref, state)
        elif kind == "ack":
            key = _key(reply.ack.task)
            if key in self.ended:
                self.ended.discard(key)
                self.totals.done += 1
        elif kind == "fetch_logs":
            logs = agent_pb2.LogsReply(
                request_id=reply.fetch_logs.request_id, error="simulated task"
            )
            self.outbox.put_nowait(agent_pb2.AgentSessionRequest(logs=logs))

    def _status(self, ref: agent_pb2.TaskRef, state: int) -> None:
        status = agent_pb2.TaskStatus(task=ref, state=state)
        self.outbox.put_nowait(agent_pb2.AgentSessionRequest(task_status=status))

    async def _beat(self, interval_s: float, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.sleep(interval_s)
            metrics = agent_pb2.MetricsReport(node=common_pb2.NodeMetrics(time=time.time()))
            self.outbox.put_nowait(agent_pb2.AgentSessionRequest(metrics=metrics))
            for key, task in list(self.tasks.items()):
                task.iteration += 10
                if task.ref.rank == 0:
                    progress = agent_pb2.ProgressReport(
                        task=task.ref,
                        progress=common_pb2.Progress(
                            iteration=task.iteration,
                            loss=1.0 / task.iteration,
                            iteration_time_s=0.1,
                            time=time.time(),
                        ),
                    )
                    self.outbox.put_nowait(agent_pb2.AgentSessionRequest(progress=progress))
                task.heartbeats_left -= 1
                if task.heartbeats_left <= 0:
                    del self.tasks[key]
                    self.ended.add(key)
                    self._status(task.ref, common_pb2.TASK_STATE_COMPLETED)


def _key(ref: agent_pb2.TaskRef) -> tuple[str, int, int]:
    return (ref.job_id, ref.rank, ref.attempt)


async def _report(totals: Totals, stop: asyncio.Event) -> None:
    """Tell the parent the counts as they change (one line each)."""
    last = (-1, -1)
    while not stop.is_set():
        now = (totals.registered, totals.done)
        if now != last:
            print(f"registered {now[0]}\ndone {now[1]}", flush=True)
            last = now
        await asyncio.sleep(0.2)


async def main_async(args: argparse.Namespace) -> Totals:
    totals = Totals()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stdin_closed = loop.run_in_executor(None, sys.stdin.read)
    stdin_closed.add_done_callback(lambda _: stop.set())
    agents = [
        FakeAgent(f"{args.prefix}{i:05d}", args, totals)
        for i in range(args.first, args.first + args.count)
    ]
    runs = []
    for agent in agents:  # a gentle ramp: a burst of connections is not what is measured
        runs.append(asyncio.create_task(agent.run(stop)))
        await asyncio.sleep(args.ramp_s / max(1, args.count))
    reporter = asyncio.create_task(_report(totals, stop))
    await stop.wait()
    await asyncio.gather(*runs, return_exceptions=True)
    reporter.cancel()
    return totals


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--prefix", default="bench-")
    p.add_argument("--task-heartbeats", type=int, default=3)
    p.add_argument("--ramp-s", type=float, default=5.0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    with open(args.token_file) as f:
        args.token = f.read().strip()
    totals = asyncio.run(main_async(args))
    with open(args.out, "w") as f:
        json.dump(
            {
                "registered": totals.registered,
                "done": totals.done,
                "launch_receipts": totals.launch_receipts,
                "errors": totals.errors[:20],
            },
            f,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
