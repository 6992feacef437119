"""Garbage-collector settings for the long-running scheduling processes.

A decision cycle allocates many short-lived containers (job views, candidates, task loads);
with CPython's default thresholds (700, 10, 10) the collector runs every few hundred of them
and, every hundred young collections or so, walks every tracked object of the process: a full
collection inside an MLF-H cycle added 16-25 ms to it (``benchmarks/bench_mlfh.py``,
``docs/mlfs.md``). Once their modules and configuration are loaded (the simulator: its trace
too), the controller and the simulator freeze what they hold (never garbage, so never worth
walking again) and collect the young generation less often. Reference cycles are still
collected; only their timing changes. A process-wide setting, so only entry points call it,
never a policy.
"""

from __future__ import annotations

import gc

# Container allocations between young collections (CPython's default: 700). A cycle of MLF-H
# at 1,000 queued tasks allocates about this many; the memory it can hold back is a few MB.
YOUNG_THRESHOLD = 10_000


def tune_for_cycles() -> None:
    """Collect once, freeze everything alive now, and raise the young generation's
    threshold (the older generations keep theirs)."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
