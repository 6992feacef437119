"""Checkpoint files: atomic writes, the LATEST pointer, pruning and RNG state.

Layout (docs/task-environment.md): `<dir>/step-<N>.pt` is written as `step-<N>.pt.tmp`,
fsynced and renamed; then `LATEST`, holding the file name of the newest complete checkpoint,
is replaced the same way. A crash at any point leaves LATEST naming a complete file (or no
LATEST at all); leftover `.tmp` files are never read and are removed by the next save.

Every value in a checkpoint, RNG state included, is a tensor or a plain container, so files
load with `torch.load(..., weights_only=True)`.
"""

from __future__ import annotations

import io
import logging
import os
import random
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import torch

__all__ = [
    "LATEST",
    "CheckpointStore",
    "capture_rng",
    "checkpoint_name",
    "ensure_weights_only_loadable",
    "restore_rng",
]

log = logging.getLogger(__name__)

LATEST = "LATEST"
_NAME_RE = re.compile(r"^step-(\d+)\.pt$")
_TMP_RE = re.compile(r"^(step-\d+\.pt|LATEST)\.tmp$")


def checkpoint_name(step: int) -> str:
    """File name of the checkpoint of `step`."""
    if step < 0:
        raise ValueError(f"checkpoint step must be >= 0, got {step}")
    return f"step-{step}.pt"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. platforms that cannot open directories
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write via `write(file)` to `<path>.tmp`, fsync, rename onto `path`, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class CheckpointStore:
    """The checkpoints of one job in one directory; keeps the newest `keep` of them."""

    def __init__(self, directory: str | os.PathLike[str], keep: int = 2) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        self.directory = Path(directory)
        self.keep = keep

    def steps(self) -> list[int]:
        """Steps of the complete checkpoint files present, ascending."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME_RE.match(n)))

    def latest_path(self) -> Path | None:
        """The checkpoint LATEST names, or None when LATEST is absent, malformed or dangling."""
        try:
            name = (self.directory / LATEST).read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _NAME_RE.match(name):
            log.warning("ignoring malformed %s in %s: %r", LATEST, self.directory, name)
            return None
        path = self.directory / name
        return path if path.is_file() else None

    def save(self, step: int, payload: Mapping[str, Any]) -> Path:
        """Write `payload` as the checkpoint of `step`, point LATEST at it and prune.

        Pruning keeps this checkpoint and the `keep - 1` newest older ones; checkpoints with a
        higher step belong to an abandoned timeline (a fresh start over an old directory) and
        are removed, since LATEST no longer leads to them.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        name = checkpoint_name(step)
        path = self.directory / name
        _atomic_write(path, lambda f: torch.save(dict(payload), f))
        _atomic_write(self.directory / LATEST, lambda f: f.write(f"{name}\n".encode()))
        self._prune(step)
        return path

    def _prune(self, current: int) -> None:
        steps = self.steps()
        older = [s for s in steps if s < current]
        doomed = [s for s in steps if s > current] + older[: max(0, len(older) - self.keep + 1)]
        for step in doomed:
            (self.directory / checkpoint_name(step)).unlink(missing_ok=True)
        for name in os.listdir(self.directory):
            if _TMP_RE.match(name):
                (self.directory / name).unlink(missing_ok=True)

    def load_latest(self) -> tuple[Path, dict[str, Any]] | None:
        """Load the newest loadable checkpoint: LATEST's file first, then others newest first.

        Returns None when the directory holds no checkpoint. `.tmp` files are never read.
        """
        latest = self.latest_path()
        candidates = [latest] if latest is not None else []
        candidates += [
            self.directory / checkpoint_name(s)
            for s in reversed(self.steps())
            if latest is None or checkpoint_name(s) != latest.name
        ]
        for path in candidates:
            try:
                payload = torch.load(path, map_location="cpu", weights_only=True)
            except FileNotFoundError:
                continue
            except Exception as exc:
                log.warning("cannot load checkpoint %s (%r); trying an older one", path, exc)
                continue
            if path != latest:
                log.warning("%s does not name a loadable checkpoint; using %s", LATEST, path)
            return path, payload
        return None


def ensure_weights_only_loadable(value: Any, what: str) -> None:
    """Raise TypeError unless `value` survives `torch.load(weights_only=True)`.

    Checked when saving so that a bad `extra` fails at the save, not hours later at resume.
    """
    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise TypeError(
            f"{what} must hold only tensors, numbers, strings, None and lists/tuples/dicts of "
            f"them (it must load with torch.load(weights_only=True)): {exc}"
        ) from exc


def capture_rng() -> dict[str, Any]:
    """The state of every RNG a training script typically uses, as tensors and plain values.

    Covers torch's CPU generator, the CUDA generators when CUDA is already initialised
    (never initialising it here), Python's `random`, and numpy's global generator when numpy
    has been imported.
    """
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": {
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    np = sys.modules.get("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "name": str(name),
            "keys": torch.tensor([int(k) for k in keys], dtype=torch.int64),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Restore what `capture_rng` captured; generators absent here or in `state` are skipped."""
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    py = state.get("python")
    if py is not None:
        internal = tuple(int(x) for x in py["state"].tolist())
        random.setstate((py["version"], internal, py["gauss_next"]))
    cuda_states = state.get("cuda")
    if cuda_states and torch.cuda.is_available():
        for index in range(min(len(cuda_states), torch.cuda.device_count())):
            torch.cuda.set_rng_state(cuda_states[index], device=index)
    np_state = state.get("numpy")
    if np_state is not None:
        try:
            import numpy as np
        except ImportError:
            log.warning("checkpoint holds numpy RNG state but numpy is not importable")
            return
        keys = np.array(np_state["keys"].tolist(), dtype=np.uint32)
        np.random.set_state(
            (
                np_state["name"],
                keys,
                np_state["pos"],
                np_state["has_gauss"],
                np_state["cached_gaussian"],
            )
        )
