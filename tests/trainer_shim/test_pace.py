"""examples/pace.py: the demo's cap on a training loop's step rate."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from shim_testkit import EXAMPLES


def load_pace() -> ModuleType:
    spec = importlib.util.spec_from_file_location("examples_pace", EXAMPLES / "pace.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("per_second", "pauses"), [(20.0, [0.05]), (0.0, []), (-1.0, [])])
def test_each_step_is_followed_by_a_fixed_pause_of_one_nth_second(
    monkeypatch: pytest.MonkeyPatch, per_second: float, pauses: list[float]
) -> None:
    pace = load_pace()
    slept: list[float] = []
    monkeypatch.setattr(pace.time, "sleep", slept.append)
    pace.Pace(per_second).rest()
    assert slept == pytest.approx(pauses)
