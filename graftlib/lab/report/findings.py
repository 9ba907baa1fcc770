"""What a paper item shows: its claims in the paper's words, our verdicts from the data, and the caveat.

Every paper-item notebook ends with `closing(item, C, regimes)`. `C` is a claims table in the shape of
`regimes.claims_by_regime` and `regimes.figure_claims` (indexed by claim id; columns `source`, `paper`,
`<regime> <figure>` verdict cells and `<regime> counts`); the item keeps the claims it tests
(`ITEM_CLAIMS`). A `Closing` renders as the notebook's last markdown cell (`markdown`) and as rows, one
per claim, regime and figure (`frame`), which `save` writes beside the figure as `<name>_findings.csv`,
so a figure set carries its own text. Every number in it is read from the verdict cells: nothing is
typed. The caveat states the counts, each regime's label and, where a regime drafts with the
drafter-strength construction, that its acceptance is a construction. A claim whose verdict is
`opposite` in some column is said, in words, to contradict the paper there.
"""

from dataclasses import dataclass
from pathlib import Path

from graftlib.core.errors import require

ITEM_CLAIMS = {  # the claims each paper item tests (`graftlib.lab.report.claims.CLAIMS`, `regimes.FIGURE_CLAIMS`)
    "Table 1": ("C1", "C2", "C3", "C8", "C9"),
    "Table 2": ("C4", "C5", "C6", "C7"),
    "Table 3": ("T3",),
    "Figure 1(b)": ("F1b", "F1b-m"),
    "Figure 1(c)": ("F1c",),
    "Figure 5": ("F5",),
    "Figure 6": ("F6", "F6b"),
    "All items": ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "F1b", "F1b-m", "F1c", "F5", "F6", "F6b", "T3"),
}
CONSTRUCTION = ("its DFlash drafter is the drafter-strength construction calibrated per task to the paper's chain "
                "MAT (docs/strength.md): the paper's acceptance stood in for, not measured")


@dataclass(frozen=True)
class Closing:
    item: str
    frame: object  # pandas DataFrame: claim, source, paper, regime, figure, verdict, counts
    caveats: tuple[str, ...]

    def verdicts(self, claim: str) -> dict[str, str]:
        """{"<regime> <figure>": verdict cell} of one claim."""
        rows = self.frame[self.frame.claim == claim]
        return {f"{r.regime} {r.figure}": r.verdict for r in rows.itertuples()}

    def contradictions(self) -> list[str]:
        """ "C9 (the paper's A100 costs: modeled)" for each claim and column whose verdict is `opposite`."""
        rows = self.frame[self.frame.verdict.str.startswith("opposite")]
        return [f"{r.claim} ({r.label}, {r.figure})" for r in rows.itertuples()]

    def markdown(self) -> str:
        """The notebook's closing cell: a table of claims by column, then what contradicts the paper and the caveat."""
        cols = list(dict.fromkeys(f"{r.regime} {r.figure}" for r in self.frame.itertuples()))
        names = {f"{r.regime} {r.figure}": f"{r.label.split(':')[0]}, {r.figure}" for r in self.frame.itertuples()}
        head = ["claim", "the paper says", *(names[c] for c in cols)]
        lines = [f"## What {self.item} shows", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for claim, rows in self.frame.groupby("claim", sort=False):
            cells = self.verdicts(claim)
            first = rows.iloc[0]
            lines.append("| " + " | ".join([f"{claim} ({first.source})", first.paper,
                                             *(cells.get(c, "") for c in cols)]) + " |")
        against = self.contradictions()
        lines += ["", ("Contradicts the paper: " + "; ".join(against) + ".") if against else
                  "No column contradicts the paper (no verdict `opposite`)."]
        lines += ["", "Caveat: " + " ".join(self.caveats)]
        return "\n".join(lines)

    def save(self, folder: str | Path, name: str) -> Path:
        """The rows and the caveat as `<folder>/<name>_findings.csv`."""
        path = Path(folder) / f"{name}_findings.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        self.frame.assign(caveat=" ".join(self.caveats)).to_csv(path, index=False)
        return path


def closing(item: str, C, regimes: dict) -> Closing:
    """The closing of `item` (a key of `ITEM_CLAIMS`) from claims table `C` and the `regimes.Regime`s by name
    whose columns it has (module doc)."""
    import pandas as pd

    require(item in ITEM_CLAIMS, f"unknown paper item {item!r}: choose from {', '.join(ITEM_CLAIMS)}")
    claims = [c for c in ITEM_CLAIMS[item] if c in C.index]
    require(claims, f"{item}: the claims table has none of {', '.join(ITEM_CLAIMS[item])}")
    rows, caveats = [], []
    for name, regime in regimes.items():
        figures = [c[len(name) + 1:] for c in C.columns if c.startswith(f"{name} ") and c != f"{name} counts"
                   and c[len(name) + 1:] in ("wall-clock", "modeled")]
        counts = sorted({str(C.at[k, f"{name} counts"]) for k in claims if f"{name} counts" in C.columns
                         and isinstance(C.at[k, f"{name} counts"], str)})
        if figures:
            caveats.append(f"{regime.label[0].upper()}{regime.label[1:]} ({'; '.join(counts) or 'no counts'}).")
        if figures and regime.strength is not None:
            caveats.append(f"In {regime.name}, {CONSTRUCTION}.")
        for k in claims:
            for figure in figures:
                cell = C.at[k, f"{name} {figure}"]
                if isinstance(cell, str):
                    rows.append({"claim": k, "source": C.at[k, "source"], "paper": C.at[k, "paper"], "regime": name,
                                 "label": regime.label, "figure": figure, "verdict": cell,
                                 "counts": C.at[k, f"{name} counts"] if f"{name} counts" in C.columns else ""})
    require(rows, f"{item}: no verdict of {', '.join(claims)} in the regimes {', '.join(regimes)}")
    caveats.append("Verdicts: reproduced / direction only / inside noise / opposite / not tested (docs/usage.md, "
                   "Verdicts); under 10 prompts a task a claim is not tested.")
    return Closing(item, pd.DataFrame(rows), tuple(caveats))
