"""The opt-in interference model (simulator/interference.py): curves, their file, and what the
engine makes of them; moves by suspension counted (``resumed_elsewhere``). Every number is
worked out by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.placement import TaskPlacement
from controller.policy import make_policy
from controller.policy.base import ClusterSnapshot, Decision, Launch, Renew, Suspend
from simulator.cli import interference_model
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.interference import (
    Curve,
    Interference,
    InterferenceError,
    load_interference,
)
from simulator.metrics import compute_metrics
from tests.simulator.test_mlfs import LinearModel, demand, job

ONE_NODE = ClusterShape(1, 8)


def test_a_curve_by_hand() -> None:
    curve = Curve(0.5, 2.0)
    assert curve.slowdown(0.0) == 1.0
    assert curve.slowdown(0.4) == pytest.approx(1.08)  # 1 + 0.5 * 0.16
    assert curve.slowdown(1.5) == pytest.approx(1.5)  # u is a share: clipped to 1
    assert curve.slowdown(float("nan")) == 1.0


def test_the_resource_types_multiply_and_a_missing_one_costs_nothing() -> None:
    model = Interference({"cpu": Curve(0.5, 1.0), "memory": Curve(1.0, 2.0)})
    # gpu, cpu, memory, bandwidth: gpu and bandwidth have no curve; (1 + 0.1) * (1 + 0.25)
    assert model.slowdown((0.9, 0.2, 0.5, 0.3)) == pytest.approx(1.375)


def test_bad_curves_are_refused() -> None:
    with pytest.raises(InterferenceError, match="a must be"):
        Curve(-0.1, 1.0)
    with pytest.raises(InterferenceError, match="b must be"):
        Curve(0.1, 0.0)
    with pytest.raises(InterferenceError, match="unknown resource types"):
        Interference({"disk": Curve(0.1, 1.0)})


def test_the_file(tmp_path: Path) -> None:
    fitted = load_interference()  # the checked-in fit: CPU, memory, bandwidth; no GPU curve
    assert set(fitted.curves) == {"cpu", "memory", "bandwidth"}
    path = tmp_path / "curves.json"
    path.write_text(json.dumps({"fits": {"cpu": {"a": 1.0, "b": 2.0}, "gpu": None}}))
    assert load_interference(path).curves == {"cpu": Curve(1.0, 2.0)}
    with pytest.raises(InterferenceError, match="cannot read"):
        load_interference(tmp_path / "missing.json")
    path.write_text("{")
    with pytest.raises(InterferenceError, match="not JSON"):
        load_interference(path)
    path.write_text(json.dumps({"fits": {"cpu": {"a": 1.0}}}))
    with pytest.raises(InterferenceError, match="bad curve for 'cpu'"):
        load_interference(path)
    assert interference_model(None) is None
    assert interference_model("default") == fitted


def run(jobs, interference):  # type: ignore[no-untyped-def]
    config = SimConfig(
        lease_s=300.0, cycle_s=60.0, check_invariants=True, interference=interference
    )
    result = Simulation(jobs, make_policy("fifo"), ONE_NODE, LinearModel(), config).run()
    return {r.job.id: r.end_s for r in result.records}


CPU_ONLY = Interference({"cpu": Curve(1.0, 1.0)})  # slowdown 1 + u on the others' CPU load


def test_neighbours_slow_each_other_by_the_others_load() -> None:
    # a (600 s) and b (1200 s), 4 GPUs each, CPU 0.05 per task: each one's neighbour puts
    # 4 * 0.05 = 0.2 of the CPU on the node, so both run 1.2 times slower. a ends at
    # 600 * 1.2 = 720; b has then done 600 and runs its last 600 alone at full speed: 1320.
    jobs = [job("a", 4, 600, demand=demand(cpu=0.05)), job("b", 4, 1200, demand=demand(cpu=0.05))]
    assert run(jobs, CPU_ONLY) == {"a": pytest.approx(720), "b": pytest.approx(1320)}
    # without the model (the default) they do not interfere: the node is not overloaded
    assert run(jobs, None) == {"a": pytest.approx(600), "b": pytest.approx(1200)}


def test_a_job_alone_is_not_slowed_by_its_own_load() -> None:
    assert run([job("a", 8, 600, demand=demand(cpu=0.1))], CPU_ONLY) == {"a": pytest.approx(600)}


def test_a_neighbour_without_a_demand_adds_no_load() -> None:
    # b has no demand: a's neighbour load is 0, b's is a's 4 * 0.1 = 0.4, so b runs 1.4 times
    # slower until a ends at 600 (b has done 600 / 1.4), then alone: 600 + 600 - 600 / 1.4
    jobs = [job("a", 4, 600, demand=demand(cpu=0.1)), job("b", 4, 600)]
    assert run(jobs, CPU_ONLY) == {"a": pytest.approx(600), "b": pytest.approx(1200 - 600 / 1.4)}


class Hop:
    """Launches ``a`` on n000, suspends it at its first lease expiry and launches it again
    on n001."""

    name = "hop"

    def __init__(self) -> None:
        self.launches = 0

    def decide(self, s: ClusterSnapshot) -> Decision:
        launch = ()
        if s.queued:
            node = "n000" if self.launches == 0 else "n001"
            self.launches += 1
            launch = (Launch("a", (TaskPlacement(0, node, (0,)),), 300.0),)
        expired = s.expired()
        if expired and self.launches == 1:
            return Decision(suspend=(Suspend("a", "hop"),))
        return Decision(launch=launch, renew=tuple(Renew(v.id, 300.0) for v in expired))


def test_a_resumption_on_other_nodes_counts_as_resumed_elsewhere() -> None:
    # UniSched and the other policies without Migrate orders move jobs this way
    sim = Simulation(
        [job("a", 1, 1200, demand=demand())], Hop(), ClusterShape(2, 8), LinearModel(), SimConfig()
    )
    result = sim.run()
    [record] = result.records
    assert (record.suspensions, record.resumed_elsewhere, record.migrations) == (1, 1, 0)
    assert compute_metrics(result)["resumed_elsewhere_per_job"] == 1.0
