"""Which extra of pyproject.toml each role's packages come from, and the CLI's check for them.

The base install is the client and the wire; the controller, the agent, the simulator and the
shim each need their extra (docs/architecture.md, "Installs and extras"). A command that needs
a package this environment lacks stops with a message naming the extra to install instead of a
traceback. This module imports nothing outside the standard library.
"""

from __future__ import annotations

import importlib.util

# The modules each extra's code imports (the import names, not the distributions').
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "shim": ("torch",),
    "agent": ("pynvml", "psutil", "prometheus_client", "grpc_health"),
    "controller": (
        "mip",
        "highsbox",
        "scipy",
        "numpy",
        "sklearn",
        "threadpoolctl",
        "psutil",
        "prometheus_client",
        "grpc_health",
    ),
}
EXTRA_MODULES["sim"] = (*EXTRA_MODULES["controller"], "tqdm")  # matplotlib: `simulate --plot`
EXTRA_MODULES["all"] = tuple(
    dict.fromkeys(
        m for extra in ("shim", "agent", "controller", "sim") for m in EXTRA_MODULES[extra]
    )
)

# The extras each command needs; a command not listed runs on the base install.
COMMAND_EXTRAS: dict[str, tuple[str, ...]] = {
    "controller": ("controller",),
    "admin": ("controller",),
    "agent": ("agent",),
    "simulate": ("sim",),
    "sweep": ("sim",),
    "mlfs-train": ("sim", "shim"),
    "chic-train": ("sim", "shim"),
    "chic-simulate": ("sim",),
    "demo": ("all",),
}

# Distribution names where they differ from the import names (for the messages).
_DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "pynvml": "nvidia-ml-py",
    "grpc_health": "grpcio-health-checking",
    "psycopg": "psycopg[binary]",
}
# Packages that only some features of a role load, and the extra that brings each.
_OPTIONAL = {"matplotlib": "sim", "ray": "sweep", "psycopg": "postgres"}
# The project's own packages: a missing one of these is a broken install, not a missing extra.
_OWN = frozenset({"mlsched", "controller", "nodeagent", "trainer_shim", "simulator"})


class MissingExtra(Exception):
    """A command needs packages that are not installed; the message names the extra."""


def _message(command: str, modules: list[str], extras: tuple[str, ...]) -> str:
    names = ",".join(extras)
    return (
        f"{command} needs {', '.join(_DISTRIBUTIONS.get(m, m) for m in modules)}, not installed"
        f" here: install mlsched[{names}] (pip install 'mlsched[{names}]'; in a checkout:"
        f" bash scripts/install.sh {names})"
    )


def missing_modules(extras: tuple[str, ...]) -> list[str]:
    """The modules of ``extras`` that this environment cannot import (found without importing)."""
    wanted = dict.fromkeys(m for extra in extras for m in EXTRA_MODULES[extra])
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def require(command: str) -> None:
    """Raise MissingExtra if ``command`` needs packages this environment lacks."""
    extras = COMMAND_EXTRAS.get(command, ())
    missing = missing_modules(extras)
    if missing:
        raise MissingExtra(_message(command, missing, extras))


def extra_for(module: str) -> str | None:
    """The extra that brings the top-level ``module``, or None where no extra does."""
    top = module.partition(".")[0]
    if top in _OWN:
        return None
    if top in _OPTIONAL:
        return _OPTIONAL[top]
    for extra in ("shim", "agent", "controller", "sim"):
        if top in EXTRA_MODULES[extra]:
            return extra
    return None


def explain(command: str, error: ModuleNotFoundError) -> MissingExtra | None:
    """A MissingExtra for ``error`` raised while running ``command``, or None when the missing
    module is not one an extra brings (a bug or a broken install: let it propagate)."""
    extra = extra_for(error.name or "")
    if extra is None:
        return None
    extras = tuple(dict.fromkeys((*COMMAND_EXTRAS.get(command, ()), extra)))
    top = (error.name or "").partition(".")[0]
    return MissingExtra(_message(command, [top], extras))
