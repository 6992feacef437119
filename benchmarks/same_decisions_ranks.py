"""``same_decisions.py`` with ``controller/policy/ranks.py`` on the old side too.

The agents' Eq. 6 priorities (``Decision.priorities``, ``ranks.Eq6Priorities``) live outside
``controller/policy/mlfs``, so ``same_decisions.py`` runs both sides with the working tree's
``ranks.py``. This runs it with the old package's imports of ``controller.policy.ranks``
pointed at ``ranks.py`` as it is at ``--base`` (copied into the old package as
``ranks_old.py``); the arguments are ``same_decisions.py``'s.

    .venv/bin/python benchmarks/same_decisions_ranks.py --base HEAD --old rl/cycle.py \
        --trace MIX2.csv --policy mlf-rl --limit 2000 --cluster 10x8 --mlfs-features
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import same_decisions as sd

_copy_package = sd.copy_old


def copy_old(base: str, files: list[str], into: Path) -> None:
    """``same_decisions.copy_old``, then ``ranks.py`` at ``base`` into the old package."""
    _copy_package(base, files, into)
    show = ["git", "-C", str(sd.ROOT), "show", f"{base}:controller/policy/ranks.py"]
    text = subprocess.run(show, check=True, capture_output=True, text=True).stdout
    target = into / sd.OLD
    (target / "ranks_old.py").write_text(text.replace("controller.policy.mlfs", sd.OLD))
    for path in target.rglob("*.py"):
        old = path.read_text()
        new = old.replace("controller.policy.ranks", f"{sd.OLD}.ranks_old")
        if new != old:
            path.write_text(new)


if __name__ == "__main__":
    sd.copy_old = copy_old
    raise SystemExit(sd.main())
