"""The baseline policies on tiny hand-written traces, run through the simulator.

Each scenario shows what distinguishes one policy; every start, end, JCT and suspension count
below is worked out by hand in the comments, from the engine's rules (``simulator/engine.py``):

* Cycles run at every lease boundary (multiples of ``lease_s``) and, when GPUs were freed or a
  job arrived while a GPU is free, at ``max(event time, previous cycle + cycle_s)``. An arrival
  on a full cluster triggers nothing: it waits for the next boundary.
* A lease granted at ``t`` expires at ``t + lease_s``; an expired lease is seen by the first
  cycle at or after its expiry (so a job launched off the grid, e.g. at 360, is only up for
  preemption at 900, not 600).
* A suspension keeps progress and holds the GPUs ``suspend_s`` more; a resumed job starts
  progressing ``resume_s`` after its launch. The first launch has no overhead.

Every scenario uses ``SUSPEND_S = 5`` and ``RESUME_S = 10``, ``lease_s = 300``, ``cycle_s = 60``.
"""

from __future__ import annotations

import pytest

from controller.policy import make_policy
from mlsched.model import Deadline, JobClass
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics
from simulator.types import SimResult, TraceJob


class FlatModel:
    """Speed 1 on one node, ``spread_speed`` across nodes; fixed overheads."""

    def __init__(
        self, spread_speed: float = 0.5, suspend_s: float = 0.0, resume_s: float = 0.0
    ) -> None:
        self.spread_speed = spread_speed
        self._suspend_s = suspend_s
        self._resume_s = resume_s

    def work_s(self, job: TraceJob) -> float:
        return job.duration_s

    def iteration_time(self, job: TraceJob, gpus: int, nodes: int) -> tuple[float, float]:
        return (1.0, 1.0)

    def speed(self, job: TraceJob, gpus: int, nodes: int) -> float:
        return 1.0 if nodes == 1 else self.spread_speed

    def suspend_s(self, job: TraceJob, gpus: int) -> float:
        return self._suspend_s

    def resume_s(self, job: TraceJob, gpus: int) -> float:
        return self._resume_s

    def metric_at(self, job: TraceJob, fraction: float) -> float | None:
        return None


SUSPEND_S = 5.0
RESUME_S = 10.0
CONFIG = SimConfig(lease_s=300.0, cycle_s=60.0, check_invariants=True)
ONE_NODE = ClusterShape(1, 8)
TWO_NODES = ClusterShape(2, 4)

STRICT = JobClass.STRICT_SLO
SOFT = JobClass.SOFT_SLO


def simulate(jobs: list[TraceJob], policy: str, shape: ClusterShape = ONE_NODE) -> SimResult:
    model = FlatModel(suspend_s=SUSPEND_S, resume_s=RESUME_S)
    return Simulation(jobs, make_policy(policy), shape, model, CONFIG).run()


def outcome(result: SimResult) -> dict[str, tuple[float | None, float | None, float | None, int]]:
    """job id -> (first start, end, JCT, suspensions)."""
    return {r.job.id: (r.first_start_s, r.end_s, r.jct_s, r.suspensions) for r in result.records}


def first_at(result: SimResult, t: float) -> list[str]:
    return [r.job.id for r in result.records if r.first_start_s == t]


# --- SRTF ------------------------------------------------------------------------------------

# A long job holds the whole node; a short one arrives while it runs.
LONG_THEN_SHORT = [
    TraceJob("long", "u", 0, 1000, 8),
    TraceJob("short", "u", 100, 200, 8),
]


def test_srtf_preempts_a_long_job_at_the_lease_boundary_for_a_shorter_arrival():
    result = simulate(LONG_THEN_SHORT, "srtf")
    # 0    long launches (lease to 300), would end at 1000.
    # 100  short arrives; every GPU is busy, so no cycle: it waits for the boundary.
    # 300  boundary: long's lease expired, remaining 1000 - 300 = 700 > short's 200: long is
    #      suspended (remaining 700 kept); its GPUs come back at 300 + 5 = 305.
    # 305  release -> a cycle is owed at max(305, 300 + 60) = 360.
    # 360  short (200) ranks before long (700): short launches, ends 360 + 200 = 560.
    # 560  short ends -> cycle at max(560, 360 + 60) = 560: long resumes, 10 s restore, then
    #      700 s: ends 560 + 10 + 700 = 1270 (its leases are renewed at 900 and 1200).
    assert outcome(result) == {
        "long": (0, 1270, 1270, 1),
        "short": (360, 560, 460, 0),
    }


def test_srtf_victim_is_the_expired_job_with_the_most_remaining_time():
    jobs = [
        TraceJob("p", "u", 0, 2000, 4),
        TraceJob("q", "u", 0, 1000, 4),
        TraceJob("s", "u", 100, 300, 4),
    ]
    result = simulate(jobs, "srtf", TWO_NODES)
    # 0    q (1000) ranks before p (2000): q takes n000 (best fit, ties by id), p takes n001.
    # 100  s arrives on a full cluster: waits for the boundary.
    # 300  both leases expired; remaining p 1700, q 700, s 300. Victims are tried lowest
    #      priority first: p's node alone fits s, so only p is suspended (GPUs back at 305);
    #      q (700 > 300 too, but not needed) is renewed until 600.
    # 360  (305 + cycle gap from 300) s launches on n001, ends 360 + 300 = 660.
    # 600  boundary: q's lease expired, remaining 400 < p's 1700: renewed, no preemption.
    # 660  s ends -> cycle at max(660, 600 + 60) = 660: p resumes, ends 660 + 10 + 1700 = 2370.
    # q runs undisturbed 0-1000.
    assert outcome(result) == {
        "p": (0, 2370, 2370, 1),
        "q": (0, 1000, 1000, 0),
        "s": (360, 660, 560, 0),
    }


def test_srtf_does_not_preempt_for_a_job_with_more_remaining_time():
    jobs = [
        TraceJob("a", "u", 0, 500, 8),
        TraceJob("b", "u", 100, 400, 8),
    ]
    result = simulate(jobs, "srtf")
    # 300  a's lease expired with 200 left < b's 400: a is renewed (to 600), b waits.
    # 500  a ends -> cycle at max(500, 300 + 60) = 500: b runs 500-900.
    assert outcome(result) == {"a": (0, 500, 500, 0), "b": (500, 900, 800, 0)}


# --- Tiresias --------------------------------------------------------------------------------


def test_tiresias_demotes_a_job_past_3200_gpu_seconds_so_a_newer_job_preempts_it():
    result = simulate(LONG_THEN_SHORT, "tiresias")
    # Same trace as the SRTF test; Tiresias ignores remaining times and ranks by attained
    # service: queue 0 below 3200 GPU-s, queue 1 from there on; only a strictly higher queue
    # preempts.
    # 0    long launches (8 GPUs: 3200 GPU-s after 400 s).
    # 100  short arrives on a full cluster: waits.
    # 300  long has 300 x 8 = 2400 GPU-s: still queue 0, same as short (0 GPU-s). A job never
    #      preempts one of its own queue: long is renewed (to 600). (SRTF preempted here.)
    # 600  long has 600 x 8 = 4800 >= 3200 GPU-s: demoted to queue 1, short (queue 0) preempts
    #      it; remaining 1000 - 600 = 400, GPUs back at 605 (long's service: 605 x 8 = 4840).
    # 660  (605 + gap from 600) short launches, ends 660 + 200 = 860. long waits in queue 1
    #      (promotion needs a wait of 8 x 605 s).
    # 860  short ends -> cycle at 860: long resumes, ends 860 + 10 + 400 = 1270.
    assert outcome(result) == {
        "long": (0, 1270, 1270, 1),
        "short": (660, 860, 760, 0),
    }
    gpu_s = {r.job.id: r.gpu_s for r in result.records}
    # long held 8 GPUs 0-605 and 860-1270: (605 + 410) x 8; short 200 x 8.
    assert gpu_s == {"long": 8120, "short": 1600}


def test_tiresias_promotes_a_starved_job_after_waiting_8x_its_executed_time():
    jobs = [TraceJob("a", "u", 0, 10000, 8), TraceJob("b", "u", 100, 20000, 8)]
    result = simulate(jobs, "tiresias")
    # 0-600  as above: a is renewed at 300, demoted (4800 GPU-s) and preempted by b at 600,
    #        with 10000 - 600 = 9400 left; GPUs back at 605; a's service 605 x 8, executed 605 s.
    # 660    b launches. From 1200 on b (>= 3200 GPU-s) is in queue 1 too: no preemption either
    #        way, b's leases are renewed at every boundary.
    # 5445   a has waited 5445 - 605 = 4840 = 8 x 605 s: promoted to queue 0.
    # 5700   first boundary after that: a (queue 0) preempts b (queue 1), b keeps
    #        20000 - (5700 - 660) = 14960 s; GPUs back at 5705.
    # 5760   a resumes: 5760 + 10 + 9400 = 15170. Its counter restarted on promotion, and even
    #        once this attempt's service passes 3200 GPU-s it only ties with b (queue 1), so it
    #        runs to its end.
    # 15170  a ends -> cycle at 15170: b resumes, 15170 + 10 + 14960 = 30140.
    assert outcome(result) == {
        "a": (0, 15170, 15170, 1),
        "b": (660, 30140, 30040, 1),
    }


# --- FIFO with leases ------------------------------------------------------------------------


def test_fifo_lease_time_slices_two_long_jobs_round_robin():
    jobs = [TraceJob("a", "u", 0, 1000, 8), TraceJob("b", "u", 10, 1000, 8)]
    result = simulate(jobs, "fifo-lease")
    # 0     a launches (lease to 300).
    # 10    b arrives on a full cluster: waits.
    # 300   a's lease expired and the queue head b does not fit: a yields (700 left), GPUs
    #       back at 305, a rejoins the queue's tail (queued since 305).
    # 360   b launches (lease to 660), would end 1360.
    # 600   boundary: b's lease has not expired (660): nothing happens.
    # 900   b expired: yields with 1000 - 540 = 460 left; GPUs back at 905.
    # 960   (905 + gap from 900) a (queued since 305) resumes: progresses from 970, would end
    #       970 + 700 = 1670; lease to 1260.
    # 1200  a not expired yet.
    # 1500  a expired: yields with 700 - (1500 - 970) = 170 left; GPUs back at 1505.
    # 1560  b resumes: 1570 + 460 = 2030; lease to 1860 (not expired at the 1800 boundary).
    # 2030  b ends -> cycle at max(2030, 1800 + 60) = 2030: a resumes, 2040 + 170 = 2210.
    assert outcome(result) == {
        "a": (0, 2210, 2210, 2),
        "b": (360, 2030, 2020, 1),
    }
    # Plain FIFO on the same trace never preempts: a 0-1000, b 1000-2000.
    assert outcome(simulate(jobs, "fifo")) == {
        "a": (0, 1000, 1000, 0),
        "b": (1000, 2000, 1990, 0),
    }


# --- EDF ---------------------------------------------------------------------------------------

# A best-effort job runs; a strict job with a late deadline and then a soft job with an early one
# arrive. Deadlines are seconds after submission.
EDF_TRACE = [
    TraceJob("be", "u", 0, 600, 8),
    TraceJob("late", "u", 50, 300, 8, job_class=STRICT, deadlines=(Deadline(900, 100),)),
    TraceJob(
        "early",
        "u",
        100,
        200,
        8,
        job_class=SOFT,
        deadlines=(Deadline(400, 100), Deadline(500, 80), Deadline(800, 50)),
    ),
]


def test_edf_runs_the_earliest_deadline_first_and_best_effort_last():
    result = simulate(EDF_TRACE, "edf")
    # Absolute (first) deadlines: late 50 + 900 = 950, early 100 + 400 = 500.
    # 0    be launches (lease to 300), would end 600.
    # 50, 100  late and early arrive on a full cluster: they wait for the boundary.
    # 300  be's lease expired; early (deadline 500) ranks first and preempts be (best effort
    #      ranks after every SLO job): be keeps 300 s of work, GPUs back at 305.
    # 360  early launches although late was submitted first, ends 360 + 200 = 560.
    # 560  early ends -> cycle at max(560, 360 + 60) = 560: late (SLO) goes before be: ends 860.
    # 600  late's lease (to 860) has not expired: nothing happens.
    # 860  late ends -> cycle at max(860, 600 + 60) = 860: be resumes, 860 + 10 + 300 = 1170.
    assert outcome(result) == {
        "be": (0, 1170, 1170, 1),
        "late": (560, 860, 810, 0),
        "early": (360, 560, 460, 0),
    }


def test_edf_deadline_miss_rate_and_r_slo():
    metrics = compute_metrics(simulate(EDF_TRACE, "edf"))
    # SLO jobs: late and early (be is not scored).
    # late:  JCT 810 <= 900: reward 100 of 100, lost 0; first deadline met.
    # early: JCT 460 > 400 (first deadline missed) but <= 500: reward 80 of 100, lost 0.2.
    # miss rate = 1 / 2; R^slo = (0 + 0.2) / 2 = 0.1.
    assert metrics["slo_jobs"] == 2
    assert metrics["deadline_miss_rate"] == pytest.approx(0.5)
    assert metrics["r_slo"] == pytest.approx(0.1)
    # JCTs 1170 (be), 810 (late), 460 (early): mean 2440 / 3; median 810; p95 at rank
    # 0.95 x 2 = 1.9 of [460, 810, 1170]: 810 + 0.9 x 360 = 1134.
    jct = metrics["jct_s"]
    assert jct["all"]["avg"] == pytest.approx(2440 / 3)
    assert jct["all"]["median"] == pytest.approx(810)
    assert jct["all"]["p95"] == pytest.approx(1134)
    assert (jct["best_effort"]["avg"], jct["strict"]["avg"], jct["soft"]["avg"]) == (
        pytest.approx(1170),
        pytest.approx(810),
        pytest.approx(460),
    )
    # Queue times (submission to first start): be 0, late 510, early 260.
    assert metrics["queue_s"]["all"]["avg"] == pytest.approx(770 / 3)
    # One suspension over three jobs; every GPU busy except 305-360: 1115 of 1170 s.
    assert metrics["preemptions_per_job"] == pytest.approx(1 / 3)
    assert metrics["makespan_s"] == pytest.approx(1170)
    assert metrics["gpu_utilization"] == pytest.approx(1115 / 1170)
    assert (metrics["jobs_completed"], metrics["jobs_total"]) == (3, 3)


def test_fifo_loses_more_slo_reward_than_edf_on_the_same_trace():
    metrics = compute_metrics(simulate(EDF_TRACE, "fifo"))
    # FIFO: be 0-600 (its lease is renewed), late 600-900 (JCT 850 <= 900: full reward),
    # early 900-1100 (JCT 1000 > 800: no reward, lost 1). R^slo = (0 + 1) / 2 = 0.5 (EDF: 0.1).
    assert metrics["r_slo"] == pytest.approx(0.5)
    assert metrics["deadline_miss_rate"] == pytest.approx(0.5)


# --- Themis ------------------------------------------------------------------------------------

# One job holds the node until 300; three 8-GPU jobs wait for it:
#   x: oldest and longest, y: in between, z: newest and shortest.
THEMIS_TRACE = [
    TraceJob("r", "u", 0, 300, 8),
    TraceJob("x", "u", 10, 3000, 8),
    TraceJob("y", "u", 100, 400, 8),
    TraceJob("z", "u", 280, 100, 8),
]


def test_themis_favours_the_job_with_the_worst_finish_time_fairness():
    result = simulate(THEMIS_TRACE, "themis")
    # rho = T_shared / T_ideal with T_shared = (now - submit) + remaining,
    # T_ideal = (executed + remaining) x max(1, gpus x N / 8), N = queued + active jobs.
    # 300  r ends (cycle at 300, a boundary). N = 3, slowdown 8 x 3 / 8 = 3:
    #        x: (290 + 3000) / (3000 x 3) = 0.366
    #        y: (200 + 400) / (400 x 3)   = 0.5     <- worst treated: launches, lease to 600
    #        z: (20 + 100) / (100 x 3)    = 0.4
    #      (FIFO would pick x, SRTF z.)
    # 600  y's lease expired. N = 3; y: executed 300, remaining 100:
    #        y: (500 + 100) / ((300 + 100) x 3) = 0.5
    #        z: (320 + 100) / (100 x 3)         = 1.4   <- strictly larger: preempts y
    #        x: (590 + 3000) / 9000             = 0.399
    #      y is suspended with 100 left; GPUs back at 605 (y's service 605 x 8 GPU-s).
    # 660  (605 + gap from 600) N = 3: z (380 + 100) / 300 = 1.6 > y (560 + 100) / ((305 +
    #      100) x 3) = 0.543 > x 0.406: z launches, ends 760.
    # 760  z ends -> cycle at max(760, 660 + 60) = 760. N = 2, slowdown 2:
    #        y: (660 + 100) / ((305 + 100) x 2) = 0.938  <- resumes, ends 760 + 10 + 100 = 870
    #        x: (750 + 3000) / (3000 x 2)       = 0.625
    # 870  y ends -> cycle at max(870, 760 + 60) = 870: x runs alone, ends 870 + 3000 = 3870.
    assert outcome(result) == {
        "r": (0, 300, 300, 0),
        "x": (870, 3870, 3860, 0),
        "y": (300, 870, 770, 1),
        "z": (660, 760, 480, 0),
    }


@pytest.mark.parametrize(
    ("policy", "starts_at_300"),
    [("fifo", "x"), ("srtf", "z"), ("themis", "y")],
)
def test_who_gets_the_node_first_fifo_vs_srtf_vs_themis(policy, starts_at_300):
    # At 300 the queue holds x (oldest), y and z (shortest); see the Themis test for rho.
    assert first_at(simulate(THEMIS_TRACE, policy), 300) == [starts_at_300]
