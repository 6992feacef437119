"""MLF-RL's network: a pointer-style policy over the candidates plus a "hold" option.

Each candidate row (``features.CANDIDATE_FEATURES``) goes through the same MLP to one score;
the *hold* score (leave the remaining jobs in the queue, send the remaining movers back to it)
comes from a second MLP over the context and the mean and max of the candidates' hidden
vectors. A softmax over ``[scores..., hold]`` is the policy ``π(s, a)`` (MLFS §3.4). A third
head on the same pooled vector estimates the state value; only training uses it (the
REINFORCE baseline). The network is small (about 15,500 parameters) and runs on the CPU.

A model file is a ``torch.save`` of a plain dict (``FORMAT``, ``VERSION``, the feature names
it was trained on, the hidden size, the weights and free-form ``meta``: how it was trained),
read back with ``weights_only=True``: loading runs no code from the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import ThreadpoolController
from torch import nn

from controller.policy.mlfs.rl.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

FORMAT = "mlsched/mlf-rl"
VERSION = 1
DEFAULT_HIDDEN = 64
DEFAULT_MODEL_PATH = Path(__file__).with_name("default_model.pt")
# Shipped models for other settings, each run by the simulator where its recorded setting is the
# run's exactly (simulator.cli.with_setting_model; docs/mlfs.md, *Shipped models*)
SETTING_MODEL_PATHS = (
    Path(__file__).with_name("c120_no_features_model.pt"),
    Path(__file__).with_name("c120_features_model.pt"),
    Path(__file__).with_name("c120_no_features_gw0_model.pt"),  # --mlfs-param gamma_w=0
)


class ModelError(ValueError):
    """A model file that is missing, unreadable or not an MLF-RL model for these features."""


class PointerNet(nn.Module):
    """Scores for ``n`` candidates and one hold score (module docstring)."""

    def __init__(self, hidden: int = DEFAULT_HIDDEN) -> None:
        super().__init__()
        self.hidden = hidden
        width = len(CANDIDATE_FEATURES)
        self.encoder = nn.Sequential(
            nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.score = nn.Linear(hidden, 1)
        pooled = len(CONTEXT_FEATURES) + 2 * hidden
        self.hold = nn.Sequential(
            nn.Linear(pooled, hidden // 2), nn.Tanh(), nn.Linear(hidden // 2, 1)
        )
        self.value = nn.Sequential(
            nn.Linear(pooled, hidden // 2), nn.Tanh(), nn.Linear(hidden // 2, 1)
        )

    def forward(
        self, candidates: torch.Tensor, context: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: ``candidates`` (n, F), ``context`` (C,) -> (logits (n + 1,), value ()),
        the hold option last."""
        segments = torch.zeros(candidates.shape[0], dtype=torch.long)
        scores, hold, value = self.packed(candidates, context.unsqueeze(0), segments)
        return torch.cat([scores, hold]), value[0]

    def packed(
        self, candidates: torch.Tensor, context: torch.Tensor, segments: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Many steps at once: ``candidates`` (R, F) are the rows of all steps, ``segments``
        (R,) the step of each row (every step has at least one), ``context`` (S, C) -> (row
        scores (R,), hold logits (S,), values (S,))."""
        steps = context.shape[0]
        h = self.encoder(candidates)
        scores = self.score(h).squeeze(-1)
        index = segments.unsqueeze(-1).expand_as(h)
        total = torch.zeros(steps, h.shape[1], dtype=h.dtype).index_add(0, segments, h)
        count = torch.zeros(steps, dtype=h.dtype).index_add(0, segments, torch.ones_like(scores))
        mean = total / count.clamp(min=1.0).unsqueeze(-1)
        peak = torch.full((steps, h.shape[1]), -1.0, dtype=h.dtype).scatter_reduce(
            0, index, h, reduce="amax", include_self=False
        )
        pooled = torch.cat([context, mean, peak], dim=1)
        return scores, self.hold(pooled).squeeze(-1), self.value(pooled).squeeze(-1)


class FrozenPointer:
    """The network's forward pass in NumPy (float64), for inference: the same result as
    :meth:`PointerNet.forward` up to rounding, without autograd and without a thread pool
    (``einsum`` runs NumPy's own loops, not BLAS: on a busy machine a BLAS or torch thread
    pool made each small product 10-100 times slower)."""

    def __init__(self, net: PointerNet) -> None:
        def weights(layer: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
            w = layer.weight.detach().to(torch.float64).numpy().T.copy()
            return w, layer.bias.detach().to(torch.float64).numpy().copy()

        enc1, enc2 = net.encoder[0], net.encoder[2]
        hold1, hold2 = net.hold[0], net.hold[2]
        assert isinstance(enc1, nn.Linear) and isinstance(enc2, nn.Linear)
        assert isinstance(hold1, nn.Linear) and isinstance(hold2, nn.Linear)
        self._enc = (weights(enc1), weights(enc2))
        self._score = weights(net.score)
        self._hold = (weights(hold1), weights(hold2))
        self._bounds = _Bounds(self._enc, self._score, self._hold, len(CONTEXT_FEATURES))
        # the per-row layers in float32 as well, with the bound for a float32 pass against
        # float64 loops; only where float32 holds the weights exactly (a trained model's are
        # float32), since the bound covers rounding in the sums, not in the weights
        self._enc32 = tuple((w.astype(np.float32), b.astype(np.float32)) for w, b in self._enc)
        self._score32 = tuple(a.astype(np.float32) for a in self._score)
        per_row = [a for pair in (*self._enc, self._score) for a in pair]
        self._float32 = all(np.array_equal(a.astype(np.float32), a) for a in per_row)
        self._bounds32 = _Bounds(
            self._enc, self._score, self._hold, len(CONTEXT_FEATURES), fast=_U32
        )
        self._blas = ThreadpoolController()

    def logits(self, candidates: np.ndarray, context: np.ndarray) -> np.ndarray:
        """``candidates`` (n >= 1, F), ``context`` (C,) -> logits (n + 1,), hold last."""
        (w1, b1), (w2, b2) = self._enc
        x = candidates.astype(np.float64)
        h = np.tanh(np.einsum("nf,fh->nh", np.tanh(np.einsum("nf,fh->nh", x, w1) + b1), w2) + b2)
        ws, bs = self._score
        scores = np.einsum("nh,h->n", h, ws[:, 0]) + bs[0]
        pooled = np.concatenate([context.astype(np.float64), h.mean(axis=0), h.max(axis=0)])
        (v1, c1), (v2, c2) = self._hold
        hold = np.einsum("h,h->", np.tanh(np.einsum("p,ph->h", pooled, v1) + c1), v2[:, 0])
        return np.append(scores, hold + c2[0])

    def argmax(self, candidates: np.ndarray, context: np.ndarray) -> int:
        """``argmax`` of :meth:`logits` (ties: the first), found with BLAS products whose
        rounding differs from :meth:`logits`' loops; the answer is :meth:`logits`' own.

        1. For float32 candidates (as the cycle makes them), the per-row layers in float32
           (two to three times faster here than float64):
           a row or the hold option whose logit, even raised by the float32 pass's rounding
           bound (:class:`_Bounds`), stays below the best row's lowered by it, cannot be the
           answer. When the hold option is out, the few rows left are scored in float64, and
           their best is the answer if it leads the others by more than the float64 bound.
        2. Else all of it in float64, the answer kept on the same condition.
        3. Else :meth:`logits` decides."""
        ctx = context.astype(np.float64)
        with self._blas.limit(limits=1, user_api="blas"):  # small products: one thread
            exact = self._float32 and candidates.dtype == np.float32  # no input rounded
            fast = self.blas_logits(candidates, ctx, fast=True) if exact else None
            if fast is not None and np.isfinite(fast).all():
                slack = self._bounds32.slack(candidates, ctx)
                rows = fast[:-1]
                floor = rows.max() - slack[0]  # the rows' slack is one value
                if fast[-1] + slack[-1] < floor:
                    near = np.flatnonzero(rows + slack[0] >= floor)
                    few = candidates[near]
                    scores, _ = self.blas_scores(few, fast=False)
                    found = _lead(scores, float(self._bounds.slack(few, ctx)[0]))
                    if found is not None:
                        return int(near[found])
            logits = self.blas_logits(candidates, ctx, fast=False)
            if np.isfinite(logits).all():
                slack = self._bounds.slack(candidates, ctx)
                best = int(np.argmax(logits))
                rivals = logits + slack
                rivals[best] = -np.inf
                if logits[best] - slack[best] > rivals.max():
                    return best
        return int(np.argmax(self.logits(candidates, context)))

    def blas_scores(self, candidates: np.ndarray, fast: bool) -> tuple[np.ndarray, np.ndarray]:
        """The rows' scores (float64) and hidden vectors by BLAS products, in float32 if
        ``fast`` (else float64)."""
        if fast:
            (w1, b1), (w2, b2) = self._enc32
            ws, bs = self._score32
            x = candidates.astype(np.float32)
        else:
            (w1, b1), (w2, b2) = self._enc
            ws, bs = self._score
            x = candidates.astype(np.float64)
        h = np.tanh(np.tanh(x @ w1 + b1) @ w2 + b2)
        return (h @ ws[:, 0] + bs[0]).astype(np.float64), h

    def blas_logits(self, candidates: np.ndarray, ctx: np.ndarray, fast: bool) -> np.ndarray:
        """:meth:`logits` by BLAS products, the per-row layers in float32 if ``fast`` (else
        float64), the pooling (mean summed in float64, max exact) and hold in float64."""
        scores, h = self.blas_scores(candidates, fast)
        (v1, c1), (v2, c2) = self._hold
        peak = h.max(axis=0).astype(np.float64)
        pooled = np.concatenate([ctx, h.mean(axis=0, dtype=np.float64), peak])
        hold = np.tanh(pooled @ v1 + c1) @ v2[:, 0] + c2[0]
        return np.append(scores, hold)


def _lead(scores: np.ndarray, slack: float) -> int | None:
    """The index of the best of float64 row scores if it leads every other by more than
    ``slack`` (each row's rounding bound) both ways, else None (a tie or too close)."""
    if not np.isfinite(scores).all():
        return None
    best = int(np.argmax(scores))
    rivals = scores + slack
    rivals[best] = -np.inf
    return best if scores[best] - slack > rivals.max() else None


_U = 2.0**-53  # float64 unit roundoff
_U32 = 2.0**-24  # float32 unit roundoff
_TANH = 8 * _U  # allowance for np.tanh's error (a few ulps of a value in [-1, 1])


def _gamma(n: int, unit: float = _U) -> float:
    """The rounding bound of a sum of ``n`` products in a precision of unit roundoff ``unit``
    (float64 by default), in any order, with or without fused multiply-add:
    |computed - exact| <= gamma(n) * sum |terms| (Higham, Thm 3.1)."""
    return n * unit / (1 - n * unit)


class _Bounds:
    """How far two computations of :class:`FrozenPointer`'s logits, in any summation order,
    can be apart, per logit: each layer's difference is what its input's difference can cause
    (tanh is 1-Lipschitz) plus both computations' own rounding (:func:`_gamma`, ``_TANH``),
    with the weights' absolute column sums, the inputs bounded by their largest magnitude
    and the hidden values by 1 (``|tanh| <= 1``).
    One computation is float64 loops (:meth:`FrozenPointer.logits`); the other does its
    per-row layers (encoder, score) in the precision of unit roundoff ``fast`` (float64 or
    float32, from the same float32 inputs and weights) and the pooling and hold in float64.
    Doubled for the bound's own rounding."""

    def __init__(
        self,
        enc: tuple[tuple[np.ndarray, np.ndarray], ...],
        score: tuple[np.ndarray, np.ndarray],
        hold: tuple[tuple[np.ndarray, np.ndarray], ...],
        context_width: int,
        fast: float = _U,
    ) -> None:
        def col(w: np.ndarray) -> float:
            return float(np.abs(w).sum(axis=0).max())

        (w1, b1), (w2, b2) = enc
        (v1, c1), (v2, c2) = hold
        self.fast = fast
        self.features = w1.shape[0]
        self.hidden = w2.shape[0]
        self.w1, self.b1 = col(w1), float(np.abs(b1).max())
        self.w2, self.b2 = col(w2), float(np.abs(b2).max())
        self.ws, self.bs = col(score[0]), float(np.abs(score[1]).max())
        self.v1_h, self.v1 = col(v1[context_width:]), col(v1)
        self.c1, self.pooled = float(np.abs(c1).max()), v1.shape[0]
        self.v2, self.c2, self.half = col(v2), float(np.abs(c2).max()), v2.shape[0]

    def slack(self, x: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Per logit (the rows', then hold's): the most it can differ between the two."""
        n, g, fast = x.shape[0], _gamma, self.fast

        def both(terms: int) -> float:  # a per-row layer's rounding, both computations
            return g(terms, fast) + g(terms)

        tanh = 8 * fast + _TANH  # both computations' tanh
        top_x = max(float(x.max(initial=0.0)), -float(x.min(initial=0.0)))  # every row's
        d1 = both(self.features + 2) * (top_x * self.w1 + self.b1) + tanh
        d2 = d1 * self.w2 + both(self.hidden + 2) * (self.w2 + self.b2) + tanh
        rows = np.full(n, d2 * self.ws + both(self.hidden + 2) * (self.ws + self.bs))
        pooled = d2 + 2 * g(n + 2)  # mean (and max) of the hidden rows
        top = max(1.0, float(np.abs(context).max(initial=0.0)))
        z = pooled * self.v1_h + 2 * g(self.pooled + 2) * (top * self.v1 + self.c1)
        hold = (z + 2 * _TANH) * self.v2 + 2 * g(self.half + 2) * (self.v2 + self.c2)
        return 2 * np.append(rows, hold)


def step_log_probs(
    scores: torch.Tensor, hold: torch.Tensor, segments: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-softmax within each step over its rows and its hold option: (row log-probs (R,),
    hold log-probs (S,))."""
    peak = (
        hold.detach()
        .clone()
        .scatter_reduce(0, segments, scores.detach(), reduce="amax", include_self=True)
    )
    summed = torch.exp(hold - peak).index_add(0, segments, torch.exp(scores - peak[segments]))
    lse = peak + torch.log(summed)
    return scores - lse[segments], hold - lse


def save_model(path: str | Path, net: PointerNet, meta: Mapping[str, Any] | None = None) -> None:
    """Write ``net`` (and ``meta``: plain str / int / float / list / dict values) to ``path``."""
    state = {
        "format": FORMAT,
        "version": VERSION,
        "features": list(CANDIDATE_FEATURES),
        "context": list(CONTEXT_FEATURES),
        "hidden": net.hidden,
        "weights": {k: v.detach().clone() for k, v in net.state_dict().items()},
        "meta": dict(meta or {}),
    }
    torch.save(state, Path(path))


def load_model(path: str | Path | None = None) -> tuple[PointerNet, dict[str, Any]]:
    """The network stored at ``path`` (default: the shipped model) in eval mode, and its
    ``meta``; :class:`ModelError` when the file is missing, unreadable or incompatible."""
    path = Path(DEFAULT_MODEL_PATH if path is None else path)
    if not path.is_file():
        raise ModelError(f"MLF-RL model file not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a damaged file
        raise ModelError(f"cannot read MLF-RL model {path}: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ModelError(f"{path} is not an MLF-RL model (format {FORMAT!r} expected)")
    if state.get("version") != VERSION:
        raise ModelError(f"{path}: model version {state.get('version')!r}, expected {VERSION}")
    if state.get("features") != list(CANDIDATE_FEATURES) or state.get("context") != list(
        CONTEXT_FEATURES
    ):
        raise ModelError(f"{path} was trained on other features; retrain it (mlsched mlfs-train)")
    hidden = state.get("hidden")
    if not isinstance(hidden, int) or hidden < 2:
        raise ModelError(f"{path}: bad hidden size {hidden!r}")
    net = PointerNet(hidden)
    try:
        net.load_state_dict(state["weights"])
    except (KeyError, RuntimeError, TypeError) as exc:
        raise ModelError(f"{path}: weights do not fit the network: {exc}") from None
    if not all(torch.isfinite(p).all() for p in net.parameters()):
        raise ModelError(f"{path}: weights are not all finite")
    net.eval()
    meta = state.get("meta")
    return net, dict(meta) if isinstance(meta, dict) else {}
