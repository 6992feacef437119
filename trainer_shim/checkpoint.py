"""Checkpoint files: atomic writes, the LATEST pointer, pruning, generation fencing, RNG state.

Layout (docs/task-environment.md): `<dir>/step-<N>.pt` is written to a temporary name unique to
the writer (`step-<N>.pt.g<generation>.<pid>.<random>.tmp`), fsynced and renamed; then
`LATEST`, holding the file name of the newest complete checkpoint, is replaced the same way.
A crash at any point leaves LATEST naming a complete file (or no LATEST at all); leftover
`.tmp` files are never read.

Two attempts of one job may write the same directory (a stale attempt cut off from the
controller still running while its successor trains). Every store has a *generation* (the
attempt number in the cluster); `FENCE` records the newest generation that has claimed the
directory and the (generation, step) LATEST names. Publishing (rename, LATEST, FENCE,
pruning) happens under an exclusive `flock` on `<dir>/LOCK`, and:

- a save from a generation older than the recorded one is refused (`StaleCheckpointWrite`):
  its file is not published, nothing is deleted, LATEST does not move;
- LATEST moves only forward in (generation, step): a newer generation always takes it (it
  resumed from whatever it loaded), the same generation only to a step at least as high;
- pruning removes only steps below the one just saved (keeping `keep - 1` of them) and never
  the file LATEST names: a step newer than the one just saved is never deleted;
- temporary files are removed only when a fenced-out generation (or the old fixed-name
  format) left them.

Every value in a checkpoint, RNG state included, is a tensor or a plain container, so files
load with `torch.load(..., weights_only=True)`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import random
import re
import secrets
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import torch

__all__ = [
    "LATEST",
    "CheckpointStore",
    "StaleCheckpointWrite",
    "capture_rng",
    "checkpoint_name",
    "ensure_weights_only_loadable",
    "restore_rng",
]

log = logging.getLogger(__name__)

LATEST = "LATEST"
FENCE = "FENCE"
LOCK = "LOCK"
_NAME_RE = re.compile(r"^step-(\d+)\.pt$")
# Current temporary names carry the writer's generation; the old fixed names carry none.
_TMP_RE = re.compile(r"^(?:step-\d+\.pt|LATEST|FENCE)(?:\.g(\d+)\.\d+\.[0-9a-f]+)?\.tmp$")


class StaleCheckpointWrite(RuntimeError):
    """A save from an attempt older than the newest one that has claimed the directory."""

    def __init__(self, directory: Path, step: int | None, generation: int, newest: int) -> None:
        self.generation = generation
        self.newest = newest
        what = "to claim" if step is None else f"to save step {step}"
        super().__init__(
            f"refusing {what} for generation (attempt) {generation} in {directory}:"
            f" generation {newest} has taken over this checkpoint directory"
        )


@dataclass(frozen=True)
class Fence:
    """What `FENCE` records: the newest generation seen and the (generation, step) of LATEST."""

    generation: int = 0
    latest: tuple[int, int] | None = None


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


def _temp_name(path: Path, generation: int) -> Path:
    """A temporary name no other writer uses: generation, pid and random bits."""
    return path.with_name(f"{path.name}.g{generation}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_temp(path: Path, generation: int, write: Callable[[BinaryIO], object]) -> Path:
    """Write via `write(file)` to a fresh temporary name next to `path`, fsynced; returns it."""
    tmp = _temp_name(path, generation)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _atomic_write(path: Path, generation: int, write: Callable[[BinaryIO], object]) -> None:
    """Write to a unique temporary name, fsync, rename onto `path`, fsync the directory."""
    tmp = _write_temp(path, generation, write)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


class CheckpointStore:
    """The checkpoints of one job in one directory; keeps the newest `keep` of them.

    `generation` fences writers (the attempt number in the cluster; see the module docstring).
    """

    def __init__(
        self, directory: str | os.PathLike[str], keep: int = 2, generation: int = 0
    ) -> None:
        if keep < 1:
            raise ValueError("keep must be >= 1")
        if generation < 0:
            raise ValueError("generation must be >= 0")
        self.directory = Path(directory)
        self.keep = keep
        self.generation = generation

    def steps(self) -> list[int]:
        """Steps of the complete checkpoint files present, ascending."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME_RE.match(n)))

    def latest_path(self) -> Path | None:
        """The checkpoint LATEST names, or None when LATEST is absent, malformed or dangling."""
        name = self._latest_name()
        if name is None:
            return None
        path = self.directory / name
        return path if path.is_file() else None

    def _latest_name(self) -> str | None:
        try:
            name = (self.directory / LATEST).read_text(encoding="utf-8").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not _NAME_RE.match(name):
            log.warning("ignoring malformed %s in %s: %r", LATEST, self.directory, name)
            return None
        return name

    def fence(self) -> Fence:
        """The recorded fence; a directory without `FENCE` counts as generation 0, with LATEST's
        step (if any) as generation 0's."""
        try:
            raw = json.loads((self.directory / FENCE).read_text(encoding="utf-8"))
            latest = raw.get("latest")
            return Fence(
                generation=int(raw["generation"]),
                latest=None if latest is None else (int(latest[0]), int(latest[1])),
            )
        except (FileNotFoundError, NotADirectoryError):
            pass
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            log.warning("ignoring malformed %s in %s: %r", FENCE, self.directory, exc)
        name = self._latest_name()
        match = None if name is None else _NAME_RE.match(name)
        return Fence(latest=None if match is None else (0, int(match.group(1))))

    def claim(self) -> None:
        """Record this store's generation as the newest, so older writers are refused from now
        on (called when an attempt starts, before it has saved anything).

        Raises StaleCheckpointWrite when a newer generation has already claimed the directory.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._locked():
            fence = self._check_fence(None)
            if fence.generation < self.generation:
                self._write_fence(Fence(self.generation, fence.latest))

    def save(self, step: int, payload: Mapping[str, Any]) -> Path:
        """Write `payload` as the checkpoint of `step`, point LATEST at it and prune.

        The file is written outside the lock; renaming it into place, LATEST, FENCE and pruning
        happen under it. Raises StaleCheckpointWrite (having published and deleted nothing)
        when a newer generation has claimed the directory.
        """
        name = checkpoint_name(step)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / name
        tmp = _write_temp(path, self.generation, lambda f: torch.save(dict(payload), f))
        try:
            with self._locked():
                fence = self._check_fence(step)
                os.replace(tmp, path)
                _fsync_dir(self.directory)
                latest = fence.latest
                if latest is None or (self.generation, step) >= latest:
                    _atomic_write(
                        self.directory / LATEST,
                        self.generation,
                        lambda f: f.write(f"{name}\n".encode()),
                    )
                    latest = (self.generation, step)
                else:
                    log.warning(
                        "saved %s but %s stays at step %d of generation %d (not older than step"
                        " %d of generation %d)",
                        name,
                        LATEST,
                        latest[1],
                        latest[0],
                        step,
                        self.generation,
                    )
                self._write_fence(Fence(max(fence.generation, self.generation), latest))
                self._prune(step)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.directory / LOCK, "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            yield  # closing the file releases the lock

    def _check_fence(self, step: int | None) -> Fence:
        fence = self.fence()
        if fence.generation > self.generation:
            error = StaleCheckpointWrite(self.directory, step, self.generation, fence.generation)
            log.error("%s", error)
            raise error
        return fence

    def _write_fence(self, fence: Fence) -> None:
        data = {"generation": fence.generation, "latest": fence.latest}
        _atomic_write(
            self.directory / FENCE, self.generation, lambda f: f.write(json.dumps(data).encode())
        )

    def _prune(self, current: int) -> None:
        """Under the lock: older steps beyond `keep`, never LATEST's file nor a newer step; temp
        files of fenced-out generations and of the old fixed-name format."""
        keep_name = self._latest_name()
        older = [s for s in self.steps() if s < current and checkpoint_name(s) != keep_name]
        for step in older[: max(0, len(older) - self.keep + 1)]:
            (self.directory / checkpoint_name(step)).unlink(missing_ok=True)
        for name in os.listdir(self.directory):
            m = _TMP_RE.match(name)
            if m is not None and (m.group(1) is None or int(m.group(1)) < self.generation):
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
