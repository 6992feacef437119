"""Named contexts for the client commands: which controller, which credentials, which user.

``~/.config/mlsched/config.yaml`` (or ``$MLSCHED_CONFIG``)::

    current-context: prod
    contexts:
      prod: {controller: "ctl1:50051,ctl2:50051", credentials: ~/.config/mlsched/prod}
      laptop: {controller: "127.0.0.1:50051", insecure: true, user: alice}

``--context NAME`` (or ``$MLSCHED_CONTEXT``) picks one, else ``current-context``. A flag wins
over an environment variable, which wins over the context.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONFIG_ENV = "MLSCHED_CONFIG"
CONTEXT_ENV = "MLSCHED_CONTEXT"
FIELDS = ("controller", "credentials", "insecure", "user")


class ContextError(Exception):
    """The configuration file or the context asked for is unusable."""


@dataclass(frozen=True)
class Context:
    """One named set of client settings; empty fields leave the defaults."""

    name: str = ""
    controller: str = ""
    credentials: Path | None = None
    insecure: bool = False
    user: str = ""


def config_path() -> Path:
    """``$MLSCHED_CONFIG``, else ``$XDG_CONFIG_HOME/mlsched/config.yaml``, else ``~/.config``."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mlsched" / "config.yaml"


def load_contexts(path: Path) -> tuple[dict[str, Context], str]:
    """The contexts of the file and its current context's name (no file: none)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, ""
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ContextError(f"{path}: cannot read: {exc}") from None
    if data is None:
        return {}, ""
    if not isinstance(data, dict) or not isinstance(data.get("contexts", {}), dict):
        raise ContextError(f"{path}: expected a mapping with 'contexts: {{NAME: {{...}}}}'")
    contexts = {
        str(name): _context(path, str(name), body)
        for name, body in data.get("contexts", {}).items()
    }
    current = data.get("current-context") or ""
    if current and current not in contexts:
        raise ContextError(f"{path}: current-context {current!r} is not among {sorted(contexts)}")
    return contexts, str(current)


def _context(path: Path, name: str, body: Any) -> Context:
    if not isinstance(body, dict):
        raise ContextError(f"{path}: context {name!r} must be a mapping of {', '.join(FIELDS)}")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise ContextError(f"{path}: context {name!r}: unknown field(s) {', '.join(unknown)}")
    insecure = body.get("insecure", False)
    if not isinstance(insecure, bool):
        raise ContextError(f"{path}: context {name!r}: insecure must be true or false")
    credentials = body.get("credentials")
    return Context(
        name=name,
        controller=str(body.get("controller") or ""),
        credentials=Path(str(credentials)).expanduser() if credentials else None,
        insecure=insecure,
        user=str(body.get("user") or ""),
    )


def select_context(requested: str | None) -> Context:
    """The context named by ``--context``, ``$MLSCHED_CONTEXT`` or the file's current one."""
    path = config_path()
    contexts, current = load_contexts(path)
    name = requested or os.environ.get(CONTEXT_ENV) or current
    if not name:
        return Context()
    if name not in contexts:
        known = ", ".join(sorted(contexts)) or "none"
        raise ContextError(f"no context {name!r} in {path} (contexts: {known})")
    return contexts[name]
