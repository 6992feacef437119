"""PacedExchange (trainer_shim/step_sync.py): per-step questions exchanged among ranks only at
sync calls, paced by rank 0's measured call rate. Expectations computed by hand."""

from __future__ import annotations

import threading

import pytest

from trainer_shim.step_sync import PacedExchange


class FakeClock:
    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.step_s


def identity(values: list[int]) -> list[int]:
    return list(values)


def test_rank0_syncs_at_once_then_paces_by_its_call_rate():
    clock = FakeClock(1 / 128)  # steps of 7.8 ms (a binary fraction: exact sums)
    sync = PacedExchange(identity, is_rank0=True, period_s=0.5, clock=clock)
    answers = []
    for _ in range(130):
        answers.append(sync.poll(lambda: [7]))
        clock.tick()
    # call 0: first exchange, no rate yet -> interval 1; call 1: 1 call in 1/128 s = 128/s,
    # 0.5 s of it = 64 calls -> calls 2..64 local, call 65 exchanges; the rate is the same,
    # so calls 66..128 are local and call 129 exchanges.
    synced = [i for i, a in enumerate(answers) if a is not None]
    assert synced == [0, 1, 65, 129]
    assert answers[65] == [7]
    assert sync.interval == 64


def test_values_are_read_only_at_sync_calls():
    clock = FakeClock(0.125)
    sync = PacedExchange(identity, is_rank0=True, period_s=0.375, clock=clock)
    reads = []

    def values() -> list[int]:
        reads.append(len(reads))
        return [1]

    for _ in range(6):
        sync.poll(values)
        clock.tick()
    # calls 0 and 1 exchange; then 1 call per 0.125 s -> 0.375 s is 3 calls: calls 2, 3
    # local, call 4 exchanges (the rate stays 8/s), call 5 local.
    assert len(reads) == 3


def test_a_follower_takes_rank0s_interval():
    proposals = []

    def from_rank0(values: list[int]) -> list[int]:
        proposals.append(values[-1])
        return [*values[:-1], 4]  # rank 0 said: exchange every 4 calls

    sync = PacedExchange(from_rank0, is_rank0=False, clock=FakeClock(0.01))
    synced = [i for i in range(9) if sync.poll(lambda: [0]) is not None]
    assert synced == [0, 4, 8]
    assert proposals == [0, 0, 0]  # a follower never proposes


def test_interval_is_bounded_and_reset_restarts_at_once():
    clock = FakeClock(0.0)  # steps too fast to measure
    sync = PacedExchange(identity, is_rank0=True, max_interval=5, clock=clock)
    synced = [i for i in range(12) if sync.poll(lambda: [0]) is not None]
    assert synced == [0, 1, 6, 11]  # 0 s elapsed -> the maximum, 5
    sync.reset()
    assert sync.poll(lambda: [3]) == [3]  # the first call after a reset exchanges


def test_zero_period_exchanges_at_every_call():
    clock = FakeClock(0.01)
    sync = PacedExchange(identity, is_rank0=True, period_s=0.0, clock=clock)
    answers = []
    for _ in range(5):
        answers.append(sync.poll(lambda: [1]))
        clock.tick()
    assert answers == [[1]] * 5


@pytest.mark.parametrize(("period_s", "max_interval"), [(-1.0, 10), (0.5, 0)])
def test_bad_settings_are_refused(period_s: float, max_interval: int):
    with pytest.raises(ValueError):
        PacedExchange(identity, is_rank0=True, period_s=period_s, max_interval=max_interval)


class ThreadRanks:
    """An element-wise maximum among threads standing for ranks (a barrier per exchange)."""

    def __init__(self, world_size: int) -> None:
        self._barrier = threading.Barrier(world_size)
        self._lock = threading.Lock()
        self._pending: list[list[int]] = []
        self._result: list[int] = []

    def exchange(self, values: list[int]) -> list[int]:
        with self._lock:
            self._pending.append(values)
        if self._barrier.wait(timeout=10) == 0:
            self._result = [max(column) for column in zip(*self._pending, strict=True)]
            self._pending = []
        self._barrier.wait(timeout=10)
        return list(self._result)


def test_a_flag_raised_on_one_rank_is_seen_by_both_at_the_same_call():
    ranks = ThreadRanks(2)
    clock = FakeClock(1 / 64)
    seen: dict[int, int] = {}

    def run(rank: int) -> None:
        sync = PacedExchange(ranks.exchange, is_rank0=rank == 0, period_s=0.125, clock=clock)
        for call in range(100):
            raised = rank == 1 and call >= 13  # rank 1 learns of a suspension at call 13
            agreed = sync.poll(lambda raised=raised: [int(raised)])
            if rank == 0:
                clock.tick()
            if agreed is not None and agreed[0]:
                seen[rank] = call
                return

    threads = [threading.Thread(target=run, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # exchanges at calls 0, 1, then every 0.125 s / (1/64 s) = 8 calls: 9, 17 (the first after 13)
    assert seen == {0: 17, 1: 17}


def test_a_horizon_brings_the_next_sync_forward_to_that_call():
    clock = FakeClock(1 / 128)
    sync = PacedExchange(identity, is_rank0=True, period_s=0.5, clock=clock)
    synced = []
    budget = 20  # the iteration budget runs out at call 20 (one step per call)
    for call in range(40):
        if sync.poll(lambda: [0], horizon=budget - call) is not None:
            synced.append(call)
        clock.tick()
    # 0, 1 as ever; at call 1 the rate asks for 64 calls but 19 remain: the next sync is
    # call 20, where the budget runs out; past it the horizon is <= 0, so every call syncs.
    assert synced[:3] == [0, 1, 20]
    assert synced[3:] == list(range(21, 40))
