"""Deterministic synthetic classification data for the examples (no downloads).

Every generator takes a seed and uses its own `torch.Generator`, so the data never depends on
(or disturbs) the global RNG that the training loop draws batches from.
"""

from __future__ import annotations

import math

import torch

__all__ = ["PATTERN_CLASSES", "patterns", "spirals"]


def spirals(
    n: int, classes: int = 5, *, seed: int = 0, noise: float = 0.25, turns: float = 1.25
) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` points on `classes` interleaved 2-D spiral arms, with angular noise.

    Returns float32 inputs of shape (n, 2) and int64 labels in [0, classes).
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(classes, (n,), generator=g)
    t = torch.rand(n, generator=g)  # position along the arm, centre to rim
    angle = (
        labels.float() * (2 * math.pi / classes)
        + t * (2 * math.pi * turns)
        + noise * torch.randn(n, generator=g)
    )
    radius = 0.1 + t
    inputs = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return inputs, labels


PATTERN_CLASSES = ("horizontal", "vertical", "diagonal", "anti-diagonal", "checker", "ring")


def patterns(
    n: int, *, size: int = 8, seed: int = 0, noise: float = 0.8
) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` noisy `size`x`size` images of stripe/checker/ring patterns with random phase,
    period and contrast (see PATTERN_CLASSES).

    Returns float32 images of shape (n, 1, size, size) and int64 labels.
    """
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(len(PATTERN_CLASSES), (n,), generator=g)
    rows = torch.arange(size, dtype=torch.float32).view(1, size, 1)
    cols = torch.arange(size, dtype=torch.float32).view(1, 1, size)
    period = (3 + torch.randint(3, (n, 1, 1), generator=g)).float()  # 3, 4 or 5 pixels
    phase = torch.rand(n, 1, 1, generator=g) * period
    centre = (size - 1) / 2 + torch.randn(n, 2, 1, 1, generator=g) * 0.7
    coordinate = torch.stack(
        [
            rows.expand(n, size, size),
            cols.expand(n, size, size),
            (rows + cols).expand(n, size, size),
            (rows - cols).expand(n, size, size),
            (rows + cols).expand(n, size, size),  # checker: parity of cells, below
            torch.sqrt((rows - centre[:, 0]) ** 2 + (cols - centre[:, 1]) ** 2),
        ],
        dim=1,
    )[torch.arange(n), labels]
    wave = torch.cos(2 * math.pi * (coordinate + phase) / period)
    checker = labels == PATTERN_CLASSES.index("checker")
    if checker.any():
        cell = torch.where(period[checker] > 3, 2.0, 1.0)  # cells of 1 or 2 pixels
        r = torch.floor((rows + phase[checker]) / cell)
        c = torch.floor((cols + phase[checker]) / cell)
        wave[checker] = 1 - 2 * ((r + c) % 2)
    contrast = 0.5 + torch.rand(n, 1, 1, generator=g)
    images = contrast * wave + noise * torch.randn(n, size, size, generator=g)
    return images.unsqueeze(1), labels
