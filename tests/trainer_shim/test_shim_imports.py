"""Importing trainer_shim must not drag in the scheduler's own dependencies."""

from __future__ import annotations

import json
import subprocess

from shim_testkit import PYTHON, subprocess_env

FORBIDDEN = ("controller", "nodeagent", "mip", "sqlite3", "yaml", "psutil", "mlsched.cli")

CHECK = f"""
import json, sys
import trainer_shim
import trainer_shim.checkpoint, trainer_shim.distributed, trainer_shim.session
forbidden = {FORBIDDEN!r}
loaded = [m for m in sys.modules if any(m == f or m.startswith(f + ".") for f in forbidden)]
print(json.dumps(loaded))
"""


def test_import_pulls_in_no_scheduler_dependencies() -> None:
    result = subprocess.run(
        [PYTHON, "-c", CHECK],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []
