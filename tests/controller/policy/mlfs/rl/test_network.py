"""MLF-RL's network (controller/policy/mlfs/rl/network.py): shapes, the packed and NumPy
forward passes against the plain one, and the model file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from controller.policy.mlfs.rl.features import CANDIDATE_FEATURES, CONTEXT_FEATURES
from controller.policy.mlfs.rl.network import (
    DEFAULT_MODEL_PATH,
    FORMAT,
    FrozenPointer,
    ModelError,
    PointerNet,
    load_model,
    save_model,
    step_log_probs,
)

F, C = len(CANDIDATE_FEATURES), len(CONTEXT_FEATURES)


@pytest.fixture
def net() -> PointerNet:
    torch.manual_seed(7)
    return PointerNet(hidden=16)


def test_forward_shapes_and_determinism(net: PointerNet) -> None:
    x, c = torch.randn(5, F), torch.randn(C)
    logits, value = net(x, c)
    assert logits.shape == (6,)  # five candidates and the hold option
    assert value.shape == ()
    again, _ = net(x, c)
    assert torch.equal(logits, again)
    # a candidate's score depends on its row and the context only, not on its neighbours
    alone, _ = net(x[2:3], c)
    assert alone[0].item() == pytest.approx(logits[2].item(), abs=1e-6)


def test_packed_matches_single_steps(net: PointerNet) -> None:
    a, b = torch.randn(3, F), torch.randn(1, F)
    ca, cb = torch.randn(C), torch.randn(C)
    segments = torch.tensor([0, 0, 0, 1])
    scores, hold, values = net.packed(torch.cat([a, b]), torch.stack([ca, cb]), segments)
    row_lp, hold_lp = step_log_probs(scores, hold, segments)
    for rows, ctx, lp, h, v in ((a, ca, row_lp[:3], hold_lp[0], values[0]),):
        logits, value = net(rows, ctx)
        expected = torch.log_softmax(logits, dim=0)
        assert torch.allclose(lp, expected[:-1], atol=1e-6)
        assert h.item() == pytest.approx(expected[-1].item(), abs=1e-6)
        assert v.item() == pytest.approx(value.item(), abs=1e-6)
    expected_b = torch.log_softmax(net(b, cb)[0], dim=0)
    assert row_lp[3].item() == pytest.approx(expected_b[0].item(), abs=1e-6)
    assert hold_lp[1].item() == pytest.approx(expected_b[1].item(), abs=1e-6)
    # probabilities of each step sum to one
    total = torch.zeros(2).index_add(0, segments, row_lp.exp()) + hold_lp.exp()
    assert torch.allclose(total, torch.ones(2), atol=1e-6)


def test_frozen_numpy_forward_matches(net: PointerNet) -> None:
    x, c = torch.randn(9, F), torch.randn(C)
    expected = net(x, c)[0].detach().numpy()
    got = FrozenPointer(net).logits(x.numpy(), c.numpy())
    assert got.shape == (10,)
    assert np.allclose(got, expected, atol=1e-5)


def test_frozen_argmax_is_the_reference_argmax() -> None:
    """``FrozenPointer.argmax`` answers ``np.argmax(logits)`` (ties: the first) on random
    steps, on steps of identical rows (exact ties: it falls back to ``logits``) and with the
    shipped model, whose inputs are the features' [0, 1] ranges."""
    shipped, _ = load_model()
    rng = np.random.default_rng(11)
    for model in (PointerNet(hidden=16), shipped):
        frozen = FrozenPointer(model)
        fallbacks = 0
        for trial in range(300):
            n = int(rng.integers(1, 400))
            x = rng.random((n, F)).astype(np.float32)
            if trial % 3 == 0:
                x[rng.integers(0, n, size=n)] = x[0]  # many copies of one row: exact ties
            c = rng.random(C).astype(np.float32)
            expected = int(np.argmax(frozen.logits(x, c)))
            assert frozen.argmax(x, c) == expected
            logits = frozen.logits(x, c)
            fallbacks += int(np.sum(logits == logits[expected]) > 1)
        assert fallbacks > 0  # the tie path was taken


def test_frozen_argmax_bound_covers_rounding() -> None:
    """The slack per logit is above what reordering the sums actually changes (float32 inputs
    to float64, einsum against BLAS), and far below the logits' spread."""
    shipped, _ = load_model()
    frozen = FrozenPointer(shipped)
    rng = np.random.default_rng(5)
    x = rng.random((500, F)).astype(np.float32)
    c = rng.random(C).astype(np.float32)
    reference = frozen.logits(x, c)
    slack = frozen._bounds.slack(x.astype(np.float64), c.astype(np.float64))
    torch.set_default_dtype(torch.float64)
    try:
        net = shipped.double()
        other = torch.cat(
            list(net(torch.from_numpy(x).double(), torch.from_numpy(c).double())[0:1])
        )
    finally:
        torch.set_default_dtype(torch.float32)
        shipped.float()
    gap = np.abs(other.detach().numpy() - reference)
    assert (gap <= slack).all()
    assert slack.max() < 1e-9


def test_frozen_argmax_float32_bound_covers_rounding() -> None:
    """The float32 pass's slack is above its actual distance from the float64 loops, and
    small enough that the float32 pass decides most steps of the shipped model."""
    shipped, _ = load_model()
    frozen = FrozenPointer(shipped)
    rng = np.random.default_rng(6)
    decided = 0
    for n in (1, 2, 7, 50, 500, 3000):
        x = rng.random((n, F)).astype(np.float32)
        c = rng.random(C).astype(np.float32)
        reference = frozen.logits(x, c)
        fast = frozen.blas_logits(x, c.astype(np.float64), fast=True)
        slack = frozen._bounds32.slack(x, c.astype(np.float64))
        assert (np.abs(fast - reference) <= slack).all()
        assert (slack > frozen._bounds.slack(x, c.astype(np.float64))).all()
        best = int(np.argmax(fast))
        rivals = fast + slack
        rivals[best] = -np.inf
        decided += int(fast[best] - slack[best] > rivals.max())
    assert decided >= 4


def test_save_and_load_round_trip(net: PointerNet, tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    save_model(path, net, {"seed": 3, "history": [{"epoch": 0, "validation_reward": -0.5}]})
    loaded, meta = load_model(path)
    assert meta["seed"] == 3 and meta["history"][0]["epoch"] == 0
    assert loaded.hidden == 16 and not loaded.training
    x, c = torch.randn(4, F), torch.randn(C)
    assert torch.equal(loaded(x, c)[0], net(x, c)[0])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not found"):
        load_model(tmp_path / "nope.pt")


def test_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.pt"
    path.write_bytes(b"\x00not a torch file" * 10)
    with pytest.raises(ModelError, match="cannot read"):
        load_model(path)


def test_wrong_contents(net: PointerNet, tmp_path: Path) -> None:
    other = tmp_path / "other.pt"
    torch.save({"weights": {}}, other)
    with pytest.raises(ModelError, match="not an MLF-RL model"):
        load_model(other)
    stale = tmp_path / "stale.pt"
    save_model(stale, net)
    state = torch.load(stale, weights_only=True)
    torch.save({**state, "features": ["something", "else"]}, stale)
    with pytest.raises(ModelError, match="other features"):
        load_model(stale)
    broken = tmp_path / "broken.pt"
    torch.save({**state, "weights": {"score.weight": torch.zeros(1)}}, broken)
    with pytest.raises(ModelError, match="weights do not fit"):
        load_model(broken)
    assert state["format"] == FORMAT


def test_shipped_model_loads() -> None:
    assert DEFAULT_MODEL_PATH.stat().st_size < 1_000_000
    net, meta = load_model()
    assert meta["trained_with"] == "mlsched mlfs-train"
    assert meta["history"], "the training curve is recorded in the model"
    logits, _ = net(torch.zeros(2, F), torch.zeros(C))
    assert torch.isfinite(logits).all()


def test_frozen_argmax_float32_pass_only_where_nothing_is_rounded() -> None:
    """The float32 pass is skipped for weights float32 cannot hold (a float64 network) and for
    float64 inputs; the answer is still the loops' own."""
    torch.manual_seed(3)
    wide = PointerNet(hidden=16).double()
    with torch.no_grad():
        for param in wide.parameters():
            param.add_(1e-12)  # not a float32 number any more
    frozen = FrozenPointer(wide)
    assert not frozen._float32
    rng = np.random.default_rng(4)
    x = rng.random((40, F))  # float64, most values not float32 numbers
    c = rng.random(C)
    assert frozen.argmax(x, c) == int(np.argmax(frozen.logits(x, c)))
    shipped = FrozenPointer(load_model()[0])
    assert shipped._float32
    assert shipped.argmax(x, c) == int(np.argmax(shipped.logits(x, c)))
