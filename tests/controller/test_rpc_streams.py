"""Streams without a thread each (issue 12 #1): agent sessions and event follows are coroutines
on the controller's event loop (controller/rpc_loop.py).

A real controller on port 0 holds more agent sessions and follows than the old server had RPC
threads (256), and still answers unary calls and delivers commands; an agent that stops reading
is cut with RESOURCE_EXHAUSTED instead of growing the controller's memory.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from controller.clock import ManualClock
from controller.dispatch import AgentSession
from controller.report_applier import ReportApplier
from controller.rpc_loop import Bell, EventForwarder, RpcLoop
from controller.server import Controller, ControllerConfig
from controller.state import ControllerSettings
from mlsched.v1 import agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

TOKEN = "t"
WAIT_S = 60.0  # upper bound for anything awaited; never a fixed sleep
SESSIONS = 300  # more than the 256 threads the thread-pool server had
FOLLOWS = 64  # UserLimits.streams_total: 8 users x 8 streams


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    config = ControllerConfig(
        listen="127.0.0.1:0",
        state_dir=tmp_path / "state",
        join_token=TOKEN,
        policy="fifo",
        settings=ControllerSettings(lease_s=600.0, cycle_s=60.0, heartbeat_timeout_s=600.0),
        heartbeat_interval_s=60.0,
        insecure=True,
    )
    controller = Controller(config, clock=ManualClock())
    controller.start()
    yield controller
    controller.stop(grace_s=0.5)


def register(node_id: str) -> agent_pb2.AgentSessionRequest:
    return agent_pb2.AgentSessionRequest(
        register=agent_pb2.RegisterAgent(
            node_id=node_id,
            address="127.0.0.1",
            hostname=node_id,
            gpus=[common_pb2.GpuInfo(index=0, name="vgpu", virtual=True)],
            cpu_count=4,
        )
    )


def spec() -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="one",
        command=["python", "train.py"],
        gpus=1,
        stopping=common_pb2.StoppingCriterion(
            iterations=common_pb2.IterationCriterion(iterations=100)
        ),
    )


async def _many_streams(address: str) -> tuple[int, int, set[str], str]:
    """Open SESSIONS agent sessions and FOLLOWS event follows, then submit one job; returns
    (sessions registered, follows that got an event, nodes alive, node the launch went to)."""
    async with grpc.aio.insecure_channel(address) as channel:
        agents = agent_pb2_grpc.AgentServiceStub(channel)
        jobs = jobs_pb2_grpc.JobServiceStub(channel)
        calls = [
            agents.AgentSession(metadata=(("mlsched-join-token", TOKEN),)) for _ in range(SESSIONS)
        ]
        for i, call in enumerate(calls):
            await call.write(register(f"n{i:03d}"))
        firsts = await asyncio.gather(*(call.read() for call in calls))
        registered = sum(1 for m in firsts if m.WhichOneof("message") == "registered")
        follows = [
            jobs.WatchEvents(
                jobs_pb2.WatchEventsRequest(follow=True),
                metadata=(("mlsched-user", f"user{i % 8}"),),
            )
            for i in range(FOLLOWS)
        ]
        got = await asyncio.gather(*(f.read() for f in follows))
        following = sum(1 for m in got if m.event.seq >= 1)
        nodes = await jobs.ListNodes(
            jobs_pb2.ListNodesRequest(), metadata=(("mlsched-user", "alice"),)
        )
        alive = {n.id for n in nodes.nodes if n.alive}
        await jobs.SubmitJob(
            jobs_pb2.SubmitJobRequest(spec=spec()), metadata=(("mlsched-user", "alice"),)
        )
        launched = asyncio.Event()
        where: list[str] = []

        async def watch(node_id: str, call: grpc.aio.StreamStreamCall) -> None:
            while (message := await call.read()) is not grpc.aio.EOF:
                if message.WhichOneof("message") == "launch":
                    where.append(node_id)
                    launched.set()

        readers = [asyncio.create_task(watch(f"n{i:03d}", c)) for i, c in enumerate(calls)]
        await launched.wait()
        for task in readers:
            task.cancel()
        for call in [*calls, *follows]:
            call.cancel()
        return registered, following, alive, where[0]


def test_more_streams_than_the_old_thread_pool_had_threads(controller: Controller) -> None:
    registered, following, alive, launched_on = asyncio.run(
        asyncio.wait_for(_many_streams(controller.address), WAIT_S)
    )
    assert registered == SESSIONS
    assert following == FOLLOWS
    assert alive == {f"n{i:03d}" for i in range(SESSIONS)}
    assert launched_on in alive


def test_an_agent_that_stops_reading_is_cut_at_its_outbox_limit() -> None:
    rpc = RpcLoop()
    try:
        session = rpc.run(_session(limit=2))
        for job in ("j-1", "j-2", "j-3"):  # from this thread, as the scheduler sends
            session.put(_ack(job))
        read = rpc.run(_drain(session))
    finally:
        rpc.close()
    assert read == ["j-1", "j-2"]  # the third found the queue full: the session closed
    assert session.overflowed


def test_a_session_under_its_limit_delivers_everything_in_order() -> None:
    rpc = RpcLoop()
    try:
        session = rpc.run(_session(limit=3))
        for job in ("j-1", "j-2", "j-3"):
            session.put(_ack(job))
        session.close()
        read = rpc.run(_drain(session))
    finally:
        rpc.close()
    assert read == ["j-1", "j-2", "j-3"]
    assert not session.overflowed


async def _session(limit: int) -> AgentSession:
    return AgentSession("n1", asyncio.get_running_loop(), limit)


def _ack(job_id: str) -> agent_pb2.AgentSessionResponse:
    return agent_pb2.AgentSessionResponse(
        ack=agent_pb2.TaskStatusAck(task=agent_pb2.TaskRef(job_id=job_id))
    )


async def _drain(session: AgentSession) -> list[str]:
    read = []
    try:
        while True:
            message = await asyncio.wait_for(session.next(), WAIT_S)
            read.append(message.ack.task.job_id)
    except EOFError:
        return read


def test_a_new_event_wakes_a_waiting_follower_through_the_bell() -> None:
    condition = threading.Condition()
    seq = [0]
    rpc = RpcLoop()
    bell = Bell(rpc.loop)
    forwarder = EventForwarder(condition, lambda: seq[0], bell)
    try:
        ticket = rpc.run(_ticket(bell))
        with condition:  # what ControllerState.emit does
            seq[0] = 1
            condition.notify_all()
        # Without a ring the wait would last an hour; the bound turns a miss into a failure.
        rpc.run(asyncio.wait_for(bell.wait(ticket, 3600.0), WAIT_S))
    finally:
        forwarder.stop()
        rpc.close()


async def _ticket(bell: Bell) -> asyncio.Event:
    return bell.ticket()


def test_reports_are_applied_in_order_and_their_errors_reach_the_loop() -> None:
    lock = threading.RLock()
    rpc = RpcLoop()
    applier = ReportApplier(lock, rpc.loop, max_batch=2)
    applied: list[int] = []
    outcomes: list[tuple[int, str]] = []

    def apply(i: int) -> None:
        assert lock._is_owned()  # type: ignore[attr-defined]  # under the state lock
        if i == 3:
            raise ValueError("report 3 is bad")
        applied.append(i)

    def done(i: int) -> Callable[[BaseException | None], None]:
        def record(error: BaseException | None) -> None:
            assert threading.current_thread().name == "rpc-loop"
            outcomes.append((i, "ok" if error is None else str(error)))

        return record

    last = threading.Event()
    try:
        for i in range(5):
            applier.submit(apply, (i,), done(i))
        applier.submit(last.set, (), None)
        assert last.wait(WAIT_S)
        applier.stop()
        rpc.run(asyncio.sleep(0))  # the completions were queued on the loop before this
    finally:
        rpc.close()
    assert applied == [0, 1, 2, 4]
    assert outcomes == [(0, "ok"), (1, "ok"), (2, "ok"), (3, "report 3 is bad"), (4, "ok")]
