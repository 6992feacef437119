"""Time per step of examples/ps_classifier.py for several (workers, servers), on CPU.

Each shape runs under torchrun (one process per rank) for --steps steps from scratch; prints
the chief's median step time. Figures depend on the machine and its load: print the load
average with them (issue 16: measurements towards g(w, p) of docs/chic.md).

    .venv/bin/python benchmarks/ps_example_times.py --shapes 1x1,2x1,1x2,2x2 --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ps_classifier.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(workers: int, servers: int, steps: int) -> float:
    torchrun = Path(sys.executable).with_name("torchrun")
    with tempfile.TemporaryDirectory() as checkpoints:
        cmd = [str(torchrun), f"--nproc-per-node={workers + servers}",
               f"--master-port={free_port()}", str(EXAMPLE), f"--workers={workers}",
               f"--max-iterations={steps}", f"--checkpoint-every={steps}",
               f"--eval-every={steps}", f"--checkpoint-dir={checkpoints}"]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    chief = next(json.loads(line) for line in out.splitlines() if '"rank": 0' in line)
    return float(chief["median_step_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="1x1,2x1,1x2,2x2", help="WxP, comma-separated")
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    for shape in args.shapes.split(","):
        w, s = (int(x) for x in shape.split("x"))
        print(f"w={w} p={s}: median step {run(w, s, args.steps) * 1000:.1f} ms", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
