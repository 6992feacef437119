"""Sharded checkpoints (issue 18 #4): two ranks of an FSDP2 model on CPU each write their shards
(one save in the background, one at once), and a fresh pair of processes restores exactly the
saved parameters from them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shim_testkit import subprocess_env

WORKER = Path(__file__).with_name("sharded_worker.py")
TIMEOUT_S = 240  # bounds a broken run (pytest's own limit is 300 s)


def run(checkpoint_dir: Path, out: Path, *args: str) -> list[dict]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        str(WORKER), "--checkpoint-dir", str(checkpoint_dir), "--out", str(out), *args,
    ]  # fmt: skip
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env=subprocess_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(Path(f"{out}-rank{rank}.json").read_text()) for rank in (0, 1)]


def test_every_rank_writes_its_shards_and_a_fresh_run_restores_them(tmp_path: Path):
    saved = run(tmp_path, tmp_path / "saved")
    assert [(s["step"], s["checkpoint_step"]) for s in saved] == [(5, 5), (5, 5)]
    assert saved[0]["digest"] == saved[1]["digest"]
    shards = sorted(p.name for p in (tmp_path / "step-5.dcp").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # both ranks wrote
    assert not (tmp_path / "step-3.dcp").exists()  # keep_checkpoints=1: step 3 pruned
    assert (tmp_path / "LATEST").read_text().strip() == "step-5.pt"

    # a fresh pair of processes with other initial weights
    restored = run(tmp_path, tmp_path / "restored", "--resume", "--seed", "7")
    assert [s["step"] for s in restored] == [5, 5]
    assert {s["restored_digest"] for s in restored} == {saved[0]["digest"]}
