"""Placing a parameter-server job's two roles (issue 16): hand-worked cases."""

from __future__ import annotations

from controller.placement import TaskPlacement as T
from controller.ps_placement import (
    demand,
    headroom,
    place_ps_job,
    placement_problem,
    ps_workers,
    role_counts,
)
from controller.scheduler import placement_problem as scheduler_problem
from mlsched.model import IterationStop, JobSpec, PsSpec, RoleResources

PS = PsSpec(1, 3, 1, 2, RoleResources(1, 1.0, 2.0), RoleResources(0, 2.0, 4.0))
SPEC = JobSpec("ps", ("x",), 1, IterationStop(10), ps=PS)
DDP = JobSpec("ddp", ("x",), 2, IterationStop(10))


def test_workers_are_the_entries_with_gpus_and_come_first():
    placement = (T(0, "a", (1,)), T(1, "b", (0,)), T(2, "a", ()))
    assert ps_workers(SPEC, placement) == 2 and role_counts(SPEC, placement) == (2, 1)
    assert ps_workers(DDP, placement) == 0
    assert placement_problem(SPEC, placement) is None
    assert scheduler_problem(SPEC, placement) is None  # the scheduler asks ps_placement


def test_a_placement_outside_the_roles_is_refused_with_its_reason():
    assert placement_problem(SPEC, (T(0, "a", ()), T(1, "a", (0,)))) == (
        "workers (with GPUs) must come before the parameter servers (without)"
    )
    assert placement_problem(SPEC, (T(0, "a", (0,)),)) == (
        "0 parameter servers; the job runs 1 to 2"
    )
    four = (*(T(r, "a", (r,)) for r in range(4)), T(4, "a", ()))
    assert placement_problem(SPEC, four) == "4 workers; the job runs 1 to 3"
    twice = (T(0, "a", (0,)), T(1, "a", (0,)), T(2, "a", ()))
    assert placement_problem(SPEC, twice) == "GPU 0 of a given twice"
    assert placement_problem(SPEC, (T(1, "a", (0,)), T(0, "a", ()))) == (
        "ranks must be 0..k-1 in order"
    )


def test_servers_go_next_to_the_workers_within_each_nodes_cpu_and_memory():
    # a: 3 cores, 8 GB; b: 8 cores, 32 GB. Two workers (1 core, 2 GB each) fit on a (best fit
    # of 2 free GPUs), leaving 1 core: no server (2 cores) fits there, so both go to b.
    free = {"a": (0, 1), "b": (0, 1, 2, 3)}
    room = {"a": (3.0, 8.0), "b": (8.0, 32.0)}
    placed = place_ps_job(free, room, SPEC, 2, 2)
    assert placed == (T(0, "a", (0,)), T(1, "a", (1,)), T(2, "b", ()), T(3, "b", ()))
    # with 4 cores on a, the first server stays next to its workers
    placed = place_ps_job(free, {"a": (4.0, 8.0), "b": (8.0, 32.0)}, SPEC, 2, 2)
    assert placed == (T(0, "a", (0,)), T(1, "a", (1,)), T(2, "a", ()), T(3, "b", ()))


def test_a_node_without_cpu_room_hosts_no_worker_and_too_little_room_is_none():
    free = {"a": (0, 1), "b": (0,)}
    # a holds one worker's cores only (1.5 cores): one worker each (tie: a first); the server
    # (2 cores) fits only in b's 2 cores left
    placed = place_ps_job(free, {"a": (1.5, 8.0), "b": (3.0, 8.0)}, SPEC, 2, 1)
    assert placed == (T(0, "a", (0,)), T(1, "b", (0,)), T(2, "b", ()))
    assert place_ps_job(free, {"a": (1.0, 8.0), "b": (1.0, 8.0)}, SPEC, 2, 1) is None
    assert place_ps_job(free, {"a": (8.0, 8.0), "b": (8.0, 8.0)}, SPEC, 4, 1) is None


def test_headroom_takes_each_roles_vector_and_demand_sums_them():
    held = [(SPEC, (T(0, "a", (0,)), T(1, "b", ()))), (DDP, (T(0, "a", (1,)),))]
    assert headroom({"a": (4, 16), "b": (4, 16)}, held) == {"a": (3.0, 14.0), "b": (2.0, 12.0)}
    assert demand(PS, 2, 1) == (2.0, 4.0, 8.0)
