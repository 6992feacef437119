"""q, the migration degradation in MLF-H's host choice (MLFS §3.3.2; euclid.degradation,
hosts.move_cost_s), with hand-computed choices where q changes the answer."""

from __future__ import annotations

import math

import pytest

from controller.placement import TaskPlacement
from controller.policy.base import JobView, NodeView
from controller.policy.mlfs.config import MlfsConfig
from controller.policy.mlfs.euclid import Server, TaskLoad, choose_host, degradation
from controller.policy.mlfs.hosts import HostPool, move_cost_s
from mlsched.model import IterationStop, JobSpec, JobState

TYPES = ("gpu", "cpu", "memory", "bandwidth")
# U_V over B and C = (0.2, 0.2, 0.2, 0.0 | traffic 0, q 0).
# B: (0.2, 0.2, 0.2, 0.5): 0.5 from U_V without q.  C: (0.5, 0.5, 0.5, 0.0): sqrt(0.27) = 0.520.
B = Server("b", (0.2, 0.2, 0.2, 0.5), {0: 0.0})
C = Server("c", (0.5, 0.5, 0.5, 0.0), {0: 0.0})
DEMAND = (0.1, 0.1, 0.1, 0.0)


def task(move_s: float, remaining_s: float | None) -> TaskLoad:
    return TaskLoad("j", 0, DEMAND, 0.1, 0, move_s=move_s, remaining_s=remaining_s)


def test_q_is_the_share_of_the_remaining_time_a_move_costs():
    # move 30 s, 30 s left. On B the link is half busy: c = 30 / 0.5 = 60, q = 60 / 90.
    assert degradation(task(30.0, 30.0), 0.5) == pytest.approx(2 / 3)
    # on an idle link c = 30: q = 30 / 60
    assert degradation(task(30.0, 30.0), 0.0) == pytest.approx(0.5)
    # a link above 90 % busy counts as 90 %: c = 30 / 0.1 = 300, q = 300 / 330
    assert degradation(task(30.0, 30.0), 0.99) == pytest.approx(300 / 330)
    # unknown remaining time: an hour. c = 30, q = 30 / 3630
    assert degradation(task(30.0, None), 0.0) == pytest.approx(30 / 3630)
    assert degradation(task(0.0, 30.0), 0.9) == 0.0  # nothing to restore


def test_q_changes_the_host():
    # Without q (a fresh job: nothing to restore) B is closer: 0.5 < 0.520.
    assert choose_host(task(0.0, 30.0), [B, C], resources=TYPES).server_id == "b"
    # Moving costs 30 s with 30 s left: q_B = 2/3, q_C = 1/2.
    #   B: sqrt(0.25 + 0.4444) = 0.833;  C: sqrt(0.27 + 0.25) = 0.721  ->  C.
    choice = choose_host(task(30.0, 30.0), [B, C], resources=TYPES)
    assert choice.server_id == "c"
    assert choice.distance == pytest.approx(math.sqrt(0.27 + 0.25))
    # With an hour left the move is cheap: q_B = 60/3660, q_C = 30/3630 -> B (0.5003 < 0.5197)
    assert choose_host(task(30.0, 3600.0), [B, C], resources=TYPES).server_id == "b"


def test_the_pool_chooses_as_choose_host_with_q():
    nodes = [
        NodeView("b", (0,), (0,), dict(zip(TYPES, B.utilisation, strict=True)), {}),
        NodeView("c", (0,), (0,), dict(zip(TYPES, C.utilisation, strict=True)), {}),
    ]
    pool = HostPool(nodes, TYPES, MlfsConfig())
    for move_s, remaining_s, want in ((0.0, 30.0, "b"), (30.0, 30.0, "c"), (30.0, 3600.0, "b")):
        got = pool.choose(task(move_s, remaining_s), 1, {})
        assert got == choose_host(task(move_s, remaining_s), [B, C], resources=TYPES)
        assert got.server_id == want


def view(attempt: int, sr: float | None, gpus: int = 2) -> JobView:
    return JobView(
        id="j",
        user="u",
        spec=JobSpec("j", ("train",), gpus, IterationStop(10)),
        state=JobState.RUNNING if attempt else JobState.PENDING,
        submit_time=0.0,
        queued_since=0.0,
        attempt=attempt,
        suspensions=0,
        placement=(TaskPlacement(0, "n", tuple(range(gpus))),) if attempt else (),
        sr_overhead_s=sr,
    )


def test_move_cost_is_measured_where_known_else_modelled():
    assert move_cost_s(view(0, None)) == 0.0  # never ran: nothing to restore
    assert move_cost_s(view(1, 12.5)) == 12.5  # the controller's measured t_sr
    # modelled (UniSched Fig. 3, as the simulator): 4 + 20 + 5/14 * 2 GPUs
    assert move_cost_s(view(1, None)) == pytest.approx(24.0 + 10 / 14)
