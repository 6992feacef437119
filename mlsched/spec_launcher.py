"""The ``launcher`` field of a job spec (issue 18): who starts the job's training processes.

Example::

    command: torchrun examples/torchrun_classifier.py
    gpus: 2
    launcher: torchrun      # agent (default) | torchrun

With ``torchrun`` each task of the job is one torchrun launcher holding ``gpus_per_process``
GPUs, which starts one training process per GPU; the node agent hands it the rendezvous, the
node rank and the node count (docs/frameworks.md). ``gpus_per_process`` then defaults to
``gpus``: one launcher on one node. Elastic and parameter-server jobs keep the agent's launcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlsched.model import Launcher

__all__ = ["launcher_problems", "parse_launcher"]

_NAMES = {launcher.value: launcher for launcher in Launcher}


def parse_launcher(value: Any, problems: list[str]) -> Launcher:
    """The launcher named by ``value`` (``Launcher.AGENT`` when absent or wrong, reported)."""
    if value is None:
        return Launcher.AGENT
    launcher = _NAMES.get(value) if isinstance(value, str) else None
    if launcher is None:
        problems.append(f"launcher: {value!r} is not one of {', '.join(sorted(_NAMES))}")
        return Launcher.AGENT
    return launcher


def launcher_problems(launcher: Launcher, data: Mapping[str, Any]) -> list[str]:
    """The sections a torchrun job cannot have (the agent must own their processes)."""
    if launcher is not Launcher.TORCHRUN:
        return []
    return [
        f"launcher: torchrun does not apply to a job with an {section!r} section"
        for section in ("elastic", "ps")
        if data.get(section) is not None
    ]
