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
from torch import nn

from controller.policy.mlfs.rl.features import CANDIDATE_FEATURES, CONTEXT_FEATURES

FORMAT = "mlsched/mlf-rl"
VERSION = 1
DEFAULT_HIDDEN = 64
DEFAULT_MODEL_PATH = Path(__file__).with_name("default_model.pt")


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
