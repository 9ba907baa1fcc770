"""The claims table by regime as a figure: each cell coloured by its verdict, a colour key, one counts column
(or the counts in the cell where they differ), regime headers that name the construction."""

import textwrap

VERDICT_COLOURS = {"reproduced": "#a1d99b", "direction only": "#e5f5e0", "inside noise": "#e0e0e0",
                   "opposite": "#fcbba1", "not tested": "#ffffff",
                   "depends on the drafter's tree gain": "#fff3b0"}  # the robust column's split verdict


def _wrapped(text, width: int) -> str:
    """`text` whole, broken into lines of at most `width` characters (a figure never cuts a claim short)."""
    return "\n".join(textwrap.wrap(str(text), width, break_long_words=False)) or ""


REGIME_HEADERS = {"machine": "this machine", "paper": "paper's A100 costs",
                  "paper+acceptance": "paper's costs + acceptance (construction: own-spine)",
                  "paper+pinned": "paper's costs + acceptance (construction: pinned)",
                  "paper+true-path": "paper's costs + acceptance (construction: true-path)",
                  "paper+acceptance robust": "paper's costs + acceptance, all three constructions"}


def claims_columns(C) -> tuple[list[str], list[str]]:
    """The verdict columns of a claims frame and their headers ("machine wall-clock" -> "this machine, wall
    clock"; the third regime's names the construction)."""
    cols = [c for c in C.columns if c not in ("source", "paper", "tests") and not c.endswith("counts")]
    heads = []
    for c in cols:
        regime, _, figure = c.rpartition(" ")
        heads.append(f"{REGIME_HEADERS.get(regime, regime)}, {figure.replace('-', ' ')}")
    return cols, heads


def claims_counts(C, i) -> str:
    """A claim's counts once where every regime has the same, else each regime's ("this machine: ...; ...")."""
    import pandas as pd

    counts = {c.removesuffix(" counts"): C.at[i, c] for c in C.columns if c.endswith(" counts")}
    counts = {k: str(v) for k, v in counts.items() if v is not None and not (isinstance(v, float) and pd.isna(v))}
    if len(set(counts.values())) <= 1:
        return next(iter(counts.values()), "")
    return "; ".join(f"{REGIME_HEADERS.get(k, k)}: {v}" for k, v in counts.items())


def plot_claims(C, title: str):
    """The paper's claims with a verdict per regime and figure, as a table whose cells hold the full text,
    wrapped, coloured by verdict (`VERDICT_COLOURS`, keyed below the table: reproduced dark green, direction
    only light green, inside noise grey, opposite red, not tested white); each row as tall as its longest
    cell. `C`: `regimes.claims_by_regime` (and `figure_claims`) concatenated; its counts columns are drawn as
    one (`claims_counts`)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    from matplotlib.patches import Patch

    cols, heads = claims_columns(C)
    widths = [34, *(30 for _ in cols), 18]

    def text(i, c):
        v = C.at[i, c]
        return "" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)  # a claim a regime lacks

    cells = [[_wrapped(f"{i} ({C.at[i, 'source']}): {C.at[i, 'paper']}", widths[0]),
              *(_wrapped(text(i, c), w) for c, w in zip(cols, widths[1:])), _wrapped(claims_counts(C, i), widths[-1])]
             for i in C.index]
    colours = [["white", *(VERDICT_COLOURS.get(text(i, c).split(" (")[0], "white") for c in cols), "white"]
               for i in C.index]
    lines = [max(cell.count("\n") + 1 for cell in row) for row in cells]
    labels = [_wrapped(c, w) for c, w in zip(["claim", *heads, "counts"], widths, strict=True)]
    head_lines = max(label.count("\n") + 1 for label in labels)
    line_in = 0.13  # inches a text line takes at font size 6.5
    total = sum(lines) + 2 * len(lines) + head_lines + 2
    fig, ax = plt.subplots(figsize=(0.075 * sum(widths) + 0.6, line_in * (total + 3) + 0.5))
    ax.axis("off")
    table = ax.table(cellText=cells, cellColours=colours, colLabels=labels, cellLoc="left",
                     colWidths=[w / sum(widths) for w in widths], bbox=[0, 0, 1, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(6.5)
    for (r, _), cell in table.get_celld().items():
        cell.set_height((head_lines + 2 if r == 0 else lines[r - 1] + 2) / total)
        cell.get_text().set_va("center")
    ax.set_title(title, fontsize=7)
    fig.legend(handles=[Patch(facecolor=c, edgecolor="#999999", label=v) for v, c in VERDICT_COLOURS.items()],
               loc="lower center", ncol=len(VERDICT_COLOURS), fontsize=6.5, frameon=False, title="verdict",
               title_fontsize=6.5)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig
