"""Metric sampling with a fake clock and fake counters."""

from __future__ import annotations

import os

import pytest
from nodeagent_testkit import FakeClock

from nodeagent.gpus import VirtualGpus
from nodeagent.metrics import (
    NodeMetricsSampler,
    ProcessSample,
    TaskMetricsSampler,
    counter_rate,
    read_process_tree,
)
from nodeagent.model import TaskRef


def test_counter_rate() -> None:
    assert counter_rate(1000, 3000, 2.0) == 1000.0
    assert counter_rate(1000, 3000, 0.0) == 0.0
    assert counter_rate(3000, 1000, 1.0) == 0.0  # counter reset


def test_node_network_rates_from_successive_counters() -> None:
    clock = FakeClock()
    counters = iter([(1_000, 500), (11_000, 2_500), (5_000, 3_000)])
    sampler = NodeMetricsSampler(
        VirtualGpus(2),
        clock,
        net_counters=lambda: next(counters),
        memory=lambda: (3 << 30, 8 << 30),
        cpu_percent=lambda: 12.5,
    )
    first = sampler.sample()
    assert (first.net_rx_bytes_per_s, first.net_tx_bytes_per_s) == (0.0, 0.0)
    assert first.time == clock.time()
    assert (first.memory_used_bytes, first.memory_total_bytes) == (3 << 30, 8 << 30)
    assert first.cpu_percent == 12.5
    clock.advance(2.0)
    second = sampler.sample(busy_gpus={0})
    assert (second.net_rx_bytes_per_s, second.net_tx_bytes_per_s) == (5_000.0, 1_000.0)
    assert [g.utilization_percent for g in second.gpus] == [100.0, 0.0]
    assert all(g.virtual for g in second.gpus)
    clock.advance(1.0)
    third = sampler.sample()  # rx counter went backwards: 0, not negative
    assert (third.net_rx_bytes_per_s, third.net_tx_bytes_per_s) == (0.0, 500.0)


def test_task_cpu_and_memory_summed_over_the_tree() -> None:
    clock = FakeClock()
    ref = TaskRef("j", 0, 1)
    trees = iter(
        [
            [ProcessSample(10, 1.0, 5.0, 100), ProcessSample(11, 2.0, 1.0, 50)],
            # 2 s later: root used 1.5 s CPU, child 0.5 s, a new grandchild appeared
            [
                ProcessSample(10, 1.0, 6.5, 120),
                ProcessSample(11, 2.0, 1.5, 60),
                ProcessSample(12, 3.0, 9.0, 10),
            ],
        ]
    )
    sampler = TaskMetricsSampler(VirtualGpus(1), clock, process_tree=lambda pid: next(trees))
    (first,) = sampler.sample([(ref, 10)])
    assert first.cpu_percent == 0.0 and first.memory_rss_bytes == 150
    clock.advance(2.0)
    (second,) = sampler.sample([(ref, 10)])
    assert second.cpu_percent == pytest.approx(100.0)  # 2 CPU-seconds in 2 s
    assert second.memory_rss_bytes == 190
    assert second.gpu_memory_bytes == 0 and second.ref == ref


def test_read_process_tree_of_this_process() -> None:
    samples = read_process_tree(os.getpid())
    assert samples and samples[0].pid == os.getpid() and samples[0].rss_bytes > 0
    assert read_process_tree(2**22 + 12345) == []


def _disk_sampler(disk_free) -> NodeMetricsSampler:
    return NodeMetricsSampler(
        VirtualGpus(1),
        FakeClock(),
        net_counters=lambda: (0, 0),
        memory=lambda: (1, 2),
        cpu_percent=lambda: 0.0,
        disk_free=disk_free,
        min_free_disk_bytes=64 << 20,
    )


def test_the_state_disk_is_full_under_the_reserve() -> None:
    roomy = _disk_sampler(lambda: 65 << 20).sample()
    assert (roomy.state_disk_free_bytes, roomy.state_disk_full) == (65 << 20, False)
    tight = _disk_sampler(lambda: (64 << 20) - 1).sample()
    assert (tight.state_disk_free_bytes, tight.state_disk_full) == ((64 << 20) - 1, True)


def test_an_unreadable_state_disk_counts_as_full_and_an_unmeasured_one_as_not() -> None:
    def unreadable() -> int:
        raise OSError(5, "Input/output error")

    broken = _disk_sampler(unreadable).sample()
    assert (broken.state_disk_free_bytes, broken.state_disk_full) == (0, True)
    unmeasured = _disk_sampler(None).sample()
    assert (unmeasured.state_disk_free_bytes, unmeasured.state_disk_full) == (0, False)
