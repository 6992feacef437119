"""Chic (issue 16): the PS model, the decision phase, rewards, the CEM step, the workload
generator and short runs of each policy. Expectations computed by hand in the comments."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from controller.policy import make_policy
from controller.policy.chic.greedy import GreedyJob, allocate
from controller.policy.chic.network import DEFAULT_MODELS, ArrayNet, build_torch
from controller.policy.chic.phase import P1, P2, Phase, SlotJob, n_actions, state_size
from simulator.chic_env import UNIT_S, Episode, greedy, run_chic, run_optimus
from simulator.chic_workload import ChicJob, generate, read_csv, write_csv
from simulator.chictrain import CemConfig, elite_threshold, fit_elite, smooth, train
from simulator.elastic import ElasticJobModel, load_ones
from simulator.engine import ClusterShape, SimConfig, Simulation
from simulator.metrics import compute_metrics
from simulator.ps import MODELS

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def test_g_is_optimus_form():
    resnet = MODELS[0]
    # 0.9 * 32 / 2 + 1 + 3 * 2 / 1 + 0.3 * 2 + 0.2 * 1 = 14.4 + 1 + 6 + 0.6 + 0.2
    assert resnet.iteration_time(2, 1) == pytest.approx(22.2)
    # 14.4 + 1 + 3 * 2 * (2 - 1) / 2 + 0.6 = 19.0
    assert resnet.allreduce_time(2) == pytest.approx(19.0)
    assert math.isinf(resnet.iteration_time(0, 3)) and math.isinf(resnet.iteration_time(3, 0))
    assert math.isinf(resnet.allreduce_time(0))


def _job(remaining=10.0, time=None):
    time = time or (lambda w, p: math.inf if w == 0 or p == 0 else 10.0 / w + 10.0 / p)
    return SlotJob((1.0, 0.0, 0.0), remaining, (1, 2, 8), (0, 3, 9), time)


def test_actions_rewards_and_condition_1():
    phase = Phase("ps", 2, [_job()], capacity=(2, 10, 100))
    assert n_actions("ps", 2) == 5 and phase.void == 4
    assert phase.apply(0) == -P2  # first task of the job: r3 = -p2
    assert phase.apply(1) == +P2  # now a worker and a PS: r3 = +p2
    assert phase.apply(2) == -P1  # slot 1 is empty: r2 = -p1, nothing changes
    assert (phase.workers, phase.servers) == ([1], [1])
    assert phase.apply(0) == 0.0  # a second worker: GPUs 2/2, CPU 2+2+3 = 7, memory 25
    assert not phase.finished()  # Eq. 4: smallest (0, 2, 8) + (2, 7, 25) fits in (2, 10, 100)
    assert phase.apply(0) == -P1  # no GPU left: refused (ours), no change
    assert phase.workers == [2]
    phase.apply(1)  # CPU 10: (0, 2, 8) + (2, 10, 34) exceeds 10 cores
    assert phase.full() and phase.finished()


def test_condition_2_and_the_void_action():
    flat = _job(time=lambda w, p: math.inf if w == 0 or p == 0 else 10.0)
    phase = Phase("ps", 1, [flat], capacity=(10, 100, 1000))
    assert not phase.no_gain()  # zero allocation: adding the missing role would gain (ours)
    phase.apply(0)
    assert not phase.finished()
    phase.apply(1)
    assert phase.no_gain() and phase.finished()  # g(2,1) = g(1,2) = g(1,1) = 10
    other = Phase("ps", 1, [_job()], capacity=(10, 100, 1000))
    assert other.apply(other.void) == 0.0 and other.finished()
    assert Phase("ps", 1, [], capacity=(1, 1, 1)).finished()  # no job: S'


def test_pair_and_ar_actions():
    pair = Phase("pair", 3, [_job()], capacity=(10, 100, 1000))
    assert pair.void == 3
    assert pair.apply(0) == 0.0  # a worker and a PS at once: no r3 (docs/chic.md)
    assert (pair.workers, pair.servers) == ([1], [1])
    assert pair.apply(1) == -P1  # empty slot: r2 kept
    ar = Phase("ar", 3, [_job()], capacity=(10, 100, 1000), start=[2])
    assert ar.apply(0) == 0.0 and (ar.workers, ar.servers) == ([3], [0])
    assert state_size("ps", 3) == 19 and state_size("pair", 3) == 16 and state_size("ar", 3) == 13
    assert Phase("ps", 3, [_job(150)], (10, 120, 600)).encode(4).tolist()[:6] == pytest.approx(
        [1, 0, 0, 0.75, 0, 0]
    )


def _both_roles_in_order(state, phase):
    """Worker then PS for each job in slot order, then the void action."""
    for i in range(len(phase.jobs)):
        if phase.workers[i] == 0:
            return 2 * i
        if phase.servers[i] == 0:
            return 2 * i + 1
    return phase.void


def test_an_episode_by_hand():
    # resnext110: g(1, 1) = 0.7 * 32 + 0.5 + 1.5 + 0.2 + 0.2 = 24.8 s
    jobs = [ChicJob(0.0, 2, 10), ChicJob(100.0, 2, 5)]
    ep = run_chic(jobs, _both_roles_in_order)
    # [0, 100): A alone, fewer than I jobs, so D = the arrival: A does floor(100/24.8) = 4.
    # [100, 224): A (6 left) and B (5 left): D = 5 * 24.8 = 124, B ends (124 s), A does 5.
    # [224, 248.8): A's last iteration: A ends at 248.8.
    assert sorted(ep.completion_s) == pytest.approx([124.0, 248.8])
    assert ep.act_s == pytest.approx(186.4)
    # r1 (Eq. 8): -(100 + 2 * 124 + 24.8) / 1200; r3 nets to 0 per job
    assert ep.reward == pytest.approx(-(100 + 248 + 24.8) / UNIT_S)
    assert ep.schedules == 3 and len(ep.actions) == 3 + 5 + 3


def test_backlog_and_arrivals_in_eq_8():
    # I = 1: B arrives at 10 while A runs; it waits in the backlog (D_t - A_j = 24.8 - 10)
    jobs = [ChicJob(0.0, 2, 1), ChicJob(10.0, 2, 1)]
    ep = run_chic(jobs, _both_roles_in_order, slots=1)
    assert sorted(ep.completion_s) == pytest.approx([24.8, 24.8 + 24.8 - 10.0])
    # step 1: A's 24.8 + (24.8 - 10); step 2: B's 24.8
    assert ep.reward == pytest.approx(-(24.8 + 14.8 + 24.8) / UNIT_S)


def test_optimus_greedy_by_hand():
    g = lambda w, p: math.inf if w == 0 or p == 0 else 12.0 / w + 1.0  # noqa: E731
    a, b = GreedyJob(10, (1, 0), (0, 1), g), GreedyJob(20, (1, 0), (0, 1), g)
    # both start at (1, 1); the last GPU goes to B: 20 * (13 - 7) > 10 * (13 - 7)
    assert allocate([a, b], (3, 2)) == [(1, 1), (2, 1)]
    # alone with 3 GPUs: gains 10 * 6 * 3 and then 10 * 2 * 3, both positive
    assert allocate([a], (3, 1)) == [(3, 1)]
    assert allocate([a, b], (1, 1)) == [(1, 1), (0, 0)]  # B does not fit


def test_optimus_rounds():
    # one resnext110 job of 10 iterations: it gets every GPU it gains from, ends with no wait
    ep = run_optimus([ChicJob(0.0, 2, 10)])
    w, p = allocate(
        [GreedyJob(10, MODELS[2].worker, MODELS[2].ps, MODELS[2].iteration_time)], (10, 120, 600)
    )[0]
    assert ep.completion_s == pytest.approx([10 * MODELS[2].iteration_time(w, p)])
    # a second job arriving mid-round waits for the next round at 600 s
    ep = run_optimus([ChicJob(0.0, 2, 200), ChicJob(60.0, 2, 1)])
    assert min(ep.completion_s) > 600.0 - 60.0


def test_cem_elite_and_smoothing():
    # N = 3, rho = 0.3: the floor(0.7 * 3) = 2nd smallest of the four returns
    assert elite_threshold([-3.0, -1.0, -2.0, -5.0], 0.3, 3) == -3.0
    assert elite_threshold([-3.0, -1.0, -2.0, -5.0], 0.9, 3) == -5.0  # index 0: the smallest
    assert smooth([np.array([1.0])], [np.array([0.0])], 0.7)[0] == pytest.approx([0.7])


def test_fitting_the_elite_raises_its_actions_likelihood():
    import torch

    torch.manual_seed(0)
    module = build_torch(4, 3).eval()
    state = np.array([[1.0, 0.0, 0.5, 0.2]], dtype=np.float32)
    before = ArrayNet.from_torch(module, "pair", 2).probabilities(state[0])[2]
    elite = [Episode(states=[state[0]] * 4, actions=[2] * 4)]
    fit_elite(module, elite, CemConfig(fit_steps=30), np.random.default_rng(0))
    after = ArrayNet.from_torch(module, "pair", 2).probabilities(state[0])[2]
    assert after > before + 0.1


def test_a_tiny_training_run(tmp_path):
    cfg = CemConfig(
        iterations=2, trajectories=3, jobs=3, train_sequences=2, validation_sequences=1, fit_steps=2
    )
    net, log = train(cfg)
    assert [r["iteration"] for r in log] == [1, 2]
    assert all(r["elite"] >= 3 for r in log)  # at or above the 2nd smallest of 4 returns
    assert "validation_act_s" in log[1] and "validation_act_s" not in log[0]
    net.save(tmp_path / "m.npz")
    again = ArrayNet.load(tmp_path / "m.npz")
    s = np.linspace(0, 1, state_size("ps", 3))
    assert again.probabilities(s) == pytest.approx(net.probabilities(s))


def test_workload_generator(tmp_path):
    a = generate(1.8, 50, np.random.default_rng(7))
    assert a == generate(1.8, 50, np.random.default_rng(7))
    assert a[0].arrival_s == 0.0 and all(100 <= j.iterations <= 200 for j in a)
    assert all(x.arrival_s <= y.arrival_s for x, y in itertools.pairwise(a))
    write_csv(tmp_path / "w.csv", a)
    assert [j.model for j in read_csv(tmp_path / "w.csv")] == [j.model for j in a]
    (tmp_path / "bad.csv").write_text("arrival_s,model,iterations\n0,alexnet,5\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2"):
        read_csv(tmp_path / "bad.csv")
    with pytest.raises(ValueError):
        generate(0.0, 5, np.random.default_rng(0))


@pytest.mark.parametrize("kind", ["ps", "pair"])
def test_the_shipped_models_finish_every_job(kind):
    net = ArrayNet.load(DEFAULT_MODELS[kind])
    jobs = generate(2.7, 8, np.random.default_rng(11))
    ep = run_chic(jobs, greedy(net), kind, net.slots)
    assert len(ep.completion_s) == 8 and ep.schedules < 10 * 8  # none left at the cap


@pytest.mark.skipif(not (DATA / "ones").is_dir(), reason="shared data absent")
def test_chic_ar_runs_a_slice_of_the_ones_trace():
    jobs = load_ones(DATA / "ones" / "trace_1.csv", DATA)[:12]
    sim = Simulation(
        jobs,
        make_policy("chic-ar"),
        ClusterShape(4, 4),
        ElasticJobModel(),
        SimConfig(lease_s=60.0, cycle_s=10.0, check_invariants=True),
    )
    metrics = compute_metrics(sim.run())
    assert metrics["jobs_completed"] == 12
    assert metrics["refused_resizes"] == 0 and metrics["refused_launches"] == 0


def test_the_commands_write_and_read_traces_and_models(tmp_path, capsys):
    from mlsched.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "chic-simulate",
            "--arrival-rate",
            "2.7",
            "--sequences",
            "2",
            "--jobs",
            "3",
            "--policy",
            "optimus,chic-pair",
            "--write-trace",
            str(tmp_path / "t"),
            "--json-out",
            str(tmp_path / "a.json"),
        ]
    )
    assert args.func(args) == 0
    traces = sorted((tmp_path / "t").glob("*.csv"))
    assert len(traces) == 2
    args = parser.parse_args(
        [
            "chic-simulate",
            "--policy",
            "optimus",
            "--trace",
            *map(str, traces),
            "--json-out",
            str(tmp_path / "b.json"),
        ]
    )
    assert args.func(args) == 0

    first, again = (
        json.loads((tmp_path / "a.json").read_text()),
        json.loads((tmp_path / "b.json").read_text()),
    )
    # the same sequences read back give Optimus the same ACT (3-decimal arrival times)
    assert again["trace"]["optimus"] == pytest.approx(first["2.7/h"]["optimus"], rel=1e-3)
    out = tmp_path / "m.npz"
    args = parser.parse_args(
        [
            "chic-train",
            "--kind",
            "pair",
            "--iterations",
            "1",
            "--trajectories",
            "2",
            "--jobs",
            "3",
            "--train-sequences",
            "2",
            "--validation-sequences",
            "1",
            "--fit-steps",
            "1",
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    assert ArrayNet.load(out).kind == "pair"
    assert "iteration 1:" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not a Chic model"):
        ArrayNet.load(tmp_path / "a.json")


def test_chic_simulate_json_prints_what_json_out_writes(tmp_path, capsys):
    from mlsched.cli import main

    tiny = ["chic-simulate", "--sequences", "1", "--jobs", "3", "--policy", "optimus"]
    assert main([*tiny, "--json", "--json-out", str(tmp_path / "a.json")]) == 0
    out, err = capsys.readouterr()
    assert out == (tmp_path / "a.json").read_text()  # stdout is the JSON alone
    assert list(json.loads(out)) == ["1.8/h"] and json.loads(out)["1.8/h"]["optimus"] > 0
    assert err.split()[:3] == ["workload", "optimus", "(ACT,"]  # the rows went to stderr
    with pytest.raises(SystemExit) as stopped:
        main([*tiny, "--json", str(tmp_path / "b.json")])
    assert stopped.value.code == 2
    assert "write a file with --json-out" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()
