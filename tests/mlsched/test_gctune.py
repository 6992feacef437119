"""mlsched.gctune: the collector settings the controller and the simulator run with."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mlsched.gctune import YOUNG_THRESHOLD, tune_for_cycles


@pytest.fixture
def restored_gc() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_tune_freezes_what_lives_and_raises_only_the_young_threshold(restored_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    kept = [[i] for i in range(100)]  # alive at start-up: frozen
    tune_for_cycles()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() >= len(kept)
    # cycles made after start-up are still collected
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
