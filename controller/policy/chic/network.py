"""Chic's policy network π'(a|s; θ) (§5): three hidden ReLU layers of 64, 32 and 4 units, dropout
0.5 after the first, a softmax over the actions. Trained with torch (``simulator.chictrain``);
shipped and run as plain arrays (``.npz``) so scheduling needs no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

HIDDEN = (64, 32, 4)
DROPOUT = 0.5
MODEL_DIR = Path(__file__).parent
DEFAULT_MODELS = {kind: MODEL_DIR / f"{kind}_model.npz" for kind in ("ps", "pair", "ar")}


def build_torch(inputs: int, actions: int):
    """The torch module (imports torch: training only)."""
    from torch import nn

    a, b, c = HIDDEN
    return nn.Sequential(
        nn.Linear(inputs, a),
        nn.ReLU(),
        nn.Dropout(DROPOUT),
        nn.Linear(a, b),
        nn.ReLU(),
        nn.Linear(b, c),
        nn.ReLU(),
        nn.Linear(c, actions),
    )


@dataclass(frozen=True)
class ArrayNet:
    """The network's weights as arrays: inference without dropout (evaluation mode)."""

    kind: str
    slots: int
    weights: tuple[np.ndarray, ...]  # W1, b1, W2, b2, W3, b3, W4, b4 (torch's layout)

    @classmethod
    def from_torch(cls, module, kind: str, slots: int) -> ArrayNet:
        linear = [m for m in module if hasattr(m, "weight")]
        arrays = []
        for layer in linear:
            arrays += [layer.weight.detach().numpy().copy(), layer.bias.detach().numpy().copy()]
        return cls(kind, slots, tuple(arrays))

    def logits(self, state: np.ndarray) -> np.ndarray:
        h = np.asarray(state, dtype=np.float64)
        w = self.weights
        for k in range(0, len(w) - 2, 2):
            h = np.maximum(h @ w[k].T + w[k + 1], 0.0)
        return h @ w[-2].T + w[-1]

    def probabilities(self, state: np.ndarray) -> np.ndarray:
        z = self.logits(state)
        z = np.exp(z - z.max())
        return z / z.sum()

    def save(self, path: Path, **meta: str) -> None:
        arrays = {f"w{i}": a for i, a in enumerate(self.weights)}
        np.savez(path, kind=self.kind, slots=self.slots, **arrays, **meta)

    @classmethod
    def load(cls, path: str | Path) -> ArrayNet:
        """A file written by :meth:`save`; ValueError naming the file when it is not one."""
        try:
            with np.load(path) as data:
                count = len([k for k in data.files if k.startswith("w")])
                weights = tuple(data[f"w{i}"] for i in range(count))
                kind, slots = str(data["kind"]), int(data["slots"])
        except (OSError, KeyError, ValueError) as e:
            raise ValueError(f"{path}: not a Chic model ({e})") from None
        return cls(kind, slots, weights)

    def to_torch(self):
        """A torch module holding these weights (training resumes from a saved model)."""
        import torch

        module = build_torch(self.weights[0].shape[1], self.weights[-1].shape[0])
        linear = [m for m in module if hasattr(m, "weight")]
        with torch.no_grad():
            for k, layer in enumerate(linear):
                layer.weight.copy_(torch.from_numpy(self.weights[2 * k]))
                layer.bias.copy_(torch.from_numpy(self.weights[2 * k + 1]))
        return module
