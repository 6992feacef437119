"""Issue 9's ablation grid as one table: R^slo and best-effort JCT of every UniSched variant and
the oracle, per trace, at C120 and C96 and densities 1.0 and 1.6 (docs/unisched.md, *The whole
grid in one table*).

    python benchmarks/ablation_grid.py [RESULTS_DIR]

Reads the cell records `mlsched sweep` wrote into the four sweep folders under RESULTS_DIR
(default: benchmarks/results) and prints a markdown table; a missing cell shows as "-".
"""

from __future__ import annotations

import sys
from pathlib import Path

from simulator.cli import UNISCHED_ABLATIONS
from simulator.sweep import read_record

SETTINGS = {  # column label -> the sweep's --out folder
    "C120 d1.0": "sweep_c120_ablations",
    "C96 d1.0": "sweep_c96_ablations",
    "C120 d1.6": "sweep_c120_d16",
    "C96 d1.6": "sweep_c96_d16",
}
VARIANTS = ("unisched", *UNISCHED_ABLATIONS)


def read_cells(root: Path) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(trace, policy, setting) -> (R^slo in %, best-effort JCT average in minutes)."""
    cells = {}
    for label, folder in SETTINGS.items():
        for path in sorted((root / folder).glob("*.json")):
            record = read_record(path)
            if not record or record.get("status") != "ok":
                continue
            metrics = record["metrics"]
            trace = record["trace_name"].rsplit("_", 1)[-1]
            key = (trace, record["policy"], label)
            if key in cells:
                raise SystemExit(f"{path}: a second record for {key}")
            cells[key] = (100 * metrics["r_slo"], metrics["jct_s"]["best_effort"]["avg"] / 60)
    return cells


def table(cells: dict[tuple[str, str, str], tuple[float, float]]) -> str:
    """The markdown table, a row per trace and variant, a column per setting."""
    lines = [
        "| trace | variant | " + " | ".join(SETTINGS) + " |",
        "|---|---|" + "---|" * len(SETTINGS),
    ]
    for trace in sorted({key[0] for key in cells}):
        for policy in VARIANTS:
            row = []
            for label in SETTINGS:
                cell = cells.get((trace, policy, label))
                row.append("-" if cell is None else f"{cell[0]:.2f} % / {cell[1]:,.1f}")
            name = policy.removeprefix("unisched-")
            lines.append(f"| {trace} | {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("benchmarks/results")
    print(table(read_cells(root)))


if __name__ == "__main__":
    main()
