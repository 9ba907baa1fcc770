"""Every best budget a figure reports lies strictly inside the grid it was chosen from.

A "best fixed budget" chosen after the fact at the smallest or largest budget of its grid is no best: the grid
does not bracket it, and a comparison against it is `not tested` (`graftlib.lab.report.modeled.EDGE`). The CSVs
beside the figures say which budgets they searched in one of two forms, and `grid_edges` reads both:
  - a `grid` column ("4,8,16") beside the best budget (`best fixed budget`, else `budget`, else the `run` key's
    "@B"): Table 1's and Table 2's DDTree, Figure 6's best fixed budget, the strength axis;
  - a sweep, one row per budget (`regime, group, B, tps, m_tps`: Figure 1(c)): each (regime, group)'s best B by
    each throughput column it has.
One line per best at an edge; `tests/test_figures_manifest.py` wants none in the committed figures.
"""

import math
from pathlib import Path

from graftlib.lab.report.modeled import at_edge

SWEEP_METRICS = ("tps", "m_tps")  # a sweep's throughput columns, each of which picks a best B


def _budgets(text) -> list[int]:
    return [int(float(x)) for x in str(text).split(",") if x.strip()]


def grid_edges(folder: str | Path) -> list[str]:
    """Every best budget at the edge of its grid in the CSVs under `folder` (module doc)."""
    import pandas as pd

    out = []
    for path in sorted(Path(folder).glob("*.csv")):
        df = pd.read_csv(path)
        if "grid" in df.columns:
            best_col = "best fixed budget" if "best fixed budget" in df.columns else "budget"
            for i, row in df.iterrows():
                grid, best = row.get("grid"), row.get(best_col)
                if best is None and "@" in str(row.get("run", "")):  # no budget column: the run's key names it
                    best = float(str(row["run"]).rsplit("@", 1)[1])
                known = isinstance(grid, str) and grid.strip() and not (isinstance(best, float) and math.isnan(best))
                if known and at_edge(int(best), _budgets(grid)):
                    label = next((str(row[c]) for c in ("method", "task", "run") if c in df.columns), str(i))
                    out.append(f"{path.name}: {label}'s best budget {int(best)} lies at the edge of its grid {grid}")
        elif {"B", "group"} <= set(df.columns):
            keys = [c for c in ("regime", "group") if c in df.columns]
            for key, part in df.groupby(keys, sort=False):
                for metric in (m for m in SWEEP_METRICS if m in part.columns and part[m].notna().any()):
                    best = int(part.loc[part[metric].idxmax(), "B"])
                    if at_edge(best, part["B"].astype(int).tolist()):
                        out.append(f"{path.name}: {'/'.join(map(str, key))} best B={best} by {metric} lies at the "
                                   f"edge of its grid {','.join(map(str, sorted(part['B'].astype(int))))}")
    return out
