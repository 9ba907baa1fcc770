"""Figure layout shared by every notebook: one caption format, one save path and the checks it makes.

`figure_title` gives every figure its two lines (what is compared; pair, machine, dtype, counts). `save_figure`
writes PNG and PDF after turning crowded x tick labels (`untangle_ticks`), and refuses, in one line, a figure
whose legend covers a label (`layout_problems`), whose tick labels overlap (`tick_overlaps`) or lie inside their
panel (`labels_inside`), all read from the drawn extents, or one of whose panels draws against a y axis nothing names
(`unnamed_axes`). `legend_outside` / `legend_below` place legends off the
data; `grouped_bars` draws the bars with intervals the tables use.
"""

import itertools
from pathlib import Path

from graftlib.core.errors import GraftError


def caption(pair_desc: dict, workbook: str | None = None, **counts) -> str:
    """A figure title's second line in plain words: the pair, the machine and dtype, then the workbook profile
    it was drawn under and `counts` ("quick profile: prompts per task 2, new tokens 64")."""
    drafter = pair_desc["drafter"] + ("" if pair_desc["drafter_trained"] else " (untrained)")
    extra = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
    extra = f"{workbook} profile: {extra}" if workbook else extra
    return (f"{pair_desc['target']} + {drafter} drafter on {pair_desc['hardware']}, {pair_desc['dtype']}"
            + (f"; {extra}" if extra else ""))


# What a figure drawn below the evidence profile's counts says of itself (its counts are in its caption line).
ILLUSTRATION = "an illustration at small counts, in no verdict"


def figure_title(what: str, pair_desc: dict, workbook: str | None = None, **counts) -> str:
    """A figure's two-line title: what it compares, then `caption` (with the workbook profile, e.g. "evidence",
    and the counts). Ids, cost terms and ranking rules stay out of it (figures/manifest.json names the
    artifacts, the notes beside a table's CSV its rules)."""
    return f"{what}\n{caption(pair_desc, workbook, **counts)}"


def _drawn(fig):
    """The renderer of `fig` after a draw, so text extents are where they will be saved."""
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _shown_axes(fig) -> list:
    """The axes of `fig` that are drawn with their axis (colorbars and tables without one are left out)."""
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison]


def finish(fig, axes, title: str):
    """A figure's last steps: `title` above its panels, the layout, one legend under them (`legend_below`)."""
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def _labels(fig) -> list:
    """The texts that name a figure's axes: axis labels, tick labels and panel titles of every visible axes."""
    out = []
    for ax in _shown_axes(fig):
        texts = [ax.xaxis.label, ax.yaxis.label, ax.title, *_drawn_ticklabels(ax, "x"), *_drawn_ticklabels(ax, "y")]
        out += [t for t in texts if t.get_visible() and t.get_text().strip()]
    return out


def _drawn_ticklabels(ax, which: str) -> list:
    """The tick labels of one axis that matplotlib draws: those of ticks inside the view limits (it also returns
    labels for ticks beyond them, placed outside the panel and never drawn)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    low, high = sorted(axis.get_view_interval())
    span = (high - low) * 1e-9
    return [label for label, loc in zip(axis.get_ticklabels(), axis.get_ticklocs(), strict=False)
            if low - span <= loc <= high + span]


def layout_problems(fig) -> list[str]:
    """Where a legend's box overlaps an axis label, tick label or panel title (their drawn extents): one line each."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    problems = []
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for text in _labels(fig):
            if box.overlaps(text.get_window_extent(renderer)):
                problems.append(f"the legend ({', '.join(t.get_text() for t in legend.get_texts())[:60]}) "
                                f"overlaps the label {text.get_text()[:40]!r}")
    return problems


def _overlapping_ticks(fig) -> list[tuple]:
    """(axis, "x" or "y", label a, label b) for each pair of neighbouring tick labels drawn over each other."""
    renderer, found = _drawn(fig), []
    for ax in _shown_axes(fig):
        for which, ticks in (("x", _drawn_ticklabels(ax, "x")), ("y", _drawn_ticklabels(ax, "y"))):
            shown = [(t, t.get_window_extent(renderer)) for t in ticks if t.get_visible() and t.get_text().strip()]
            found += [(ax, which, a, b) for (a, box_a), (b, box_b) in itertools.pairwise(shown)
                      if box_a.overlaps(box_b)]
    return found


def tick_overlaps(fig) -> list[str]:
    """Where two tick labels of one axis overlap each other (their drawn extents): one line each."""
    return [f"the tick labels {a.get_text()[:30]!r} and {b.get_text()[:30]!r} overlap"
            for _, _, a, b in _overlapping_ticks(fig)]


def untangle_ticks(fig) -> None:
    """Turn the x tick labels of each axis whose labels overlap, 30 degrees and then upright, until they part;
    where any turned, the panels are laid out again (`tight_layout`) so the taller labels stay above a legend
    placed under the figure (`legend_below`)."""
    turned = False
    for angle in (30, 90):
        crowded = {ax for ax, which, _, _ in _overlapping_ticks(fig) if which == "x"}
        for ax in crowded:
            for t in ax.get_xticklabels():  # anchored at the label's end, so it hangs below the axis, never into it
                t.set(rotation=angle, ha="right", va="top" if angle < 90 else "center", rotation_mode="anchor")
        turned = turned or bool(crowded)
    if turned:
        fig.tight_layout()


def labels_inside(fig) -> list[str]:
    """Where an x tick label is drawn inside its own panel's plot area (over its bars or lines): one line each."""
    renderer, found = _drawn(fig), []
    for ax in _shown_axes(fig):
        area = ax.patch.get_window_extent(renderer)
        inner = area.padded(-1.0)  # a label touching the frame is outside it
        found += [f"the tick label {t.get_text()[:30]!r} lies inside its panel" for t in _drawn_ticklabels(ax, "x")
                  if t.get_visible() and t.get_text().strip() and inner.overlaps(t.get_window_extent(renderer))]
    return found


def unnamed_axes(fig) -> list[str]:
    """Where a panel draws data against a y axis that nothing names: no y label, no panel title, and no y label
    on another panel of its row (a row may share one). One line each."""
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison and _drawn_ticklabels(ax, "y")
              and (ax.lines or ax.patches or ax.collections or ax.images)]
    named_rows = {round(ax.get_position().y0, 3) for ax in panels if ax.get_ylabel().strip()}
    return [f"a panel at ({ax.get_position().x0:.2f}, {ax.get_position().y0:.2f}) has no y label or title"
            for ax in panels if not (ax.get_ylabel().strip() or ax.get_title().strip()
                                     or round(ax.get_position().y0, 3) in named_rows)]


def save_figure(fig, name: str, figures_dir: str | Path) -> list[Path]:
    """`fig` as `<figures_dir>/<name>.png` and `.pdf`, overlapping x tick labels turned first (`untangle_ticks`);
    refused, in one line, where a legend covers a label, tick labels still overlap or one lies inside its panel, or a
    panel's y axis is named nowhere (`unnamed_axes`)."""
    untangle_ticks(fig)
    problems = layout_problems(fig) + tick_overlaps(fig) + labels_inside(fig) + unnamed_axes(fig)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise GraftError(f"figure {name}: {problems[0]}{more}")
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.{ext}" for ext in ("png", "pdf")]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    return paths


def legend_outside(ax, **kw):
    """The axes' legend under its plot area, below its tick labels and x label (measured from their drawn
    extent, in points, so a later layout keeps the gap): it covers no data, no label and, in a row of
    panels, not the next panel. Call it after the axes' labels are set."""
    from matplotlib.transforms import ScaledTranslation

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    below = (ax.get_window_extent(renderer).y0 - ax.get_tightbbox(renderer).y0) / fig.dpi + 4 / 72  # inches
    shift = ax.transAxes + ScaledTranslation(0, -below, fig.dpi_scale_trans)
    return ax.legend(**dict(dict(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=shift, fontsize=7,
                                 frameon=False), **kw))


def legend_below(fig, axes) -> None:
    """One legend for the whole figure, under its panels (never over data): every labeled series
    of `axes`, each label once; the panels' own legends (seaborn draws some) are removed."""
    seen: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    long = sum(len(label) for label in seen) > 110  # one row would be wider than the panels: rows of three
    fig.legend(list(seen.values()), list(seen), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(seen), 3) if long else max(1, len(seen)), fontsize=8, frameon=False)


def grouped_bars(ax, groups: list[str], series: list[tuple]) -> None:
    """Bars per group, one per series `(label, values, color[, (lows, highs)])`, the optional interval
    drawn as whiskers where it exists; a nan value draws no bar (a series without that group), a zero a "0" on the axis.
    The colour is the caller's, so a series keeps it across panels and one legend serves them all."""
    import numpy as np

    width = 0.8 / len(series)
    for i, (label, values, color, *interval) in enumerate(series):
        x = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        v = np.asarray(values, dtype=float)
        ax.bar(x, v, width, label=label, color=color)
        if interval:  # whiskers only where an interval exists (not nan, not a single point)
            lo, hi = (np.asarray(b, dtype=float) for b in interval[0])
            has = np.isfinite(lo) & np.isfinite(hi) & (hi > lo)
            if has.any():
                ax.errorbar(x[has], v[has], yerr=np.vstack([v - lo, hi - v])[:, has], fmt="none", ecolor="black",
                            capsize=2, lw=0.8)
        for xi in x[v == 0]:  # a zero is a measured value, not a missing bar: say so
            ax.text(xi, 0, "0", ha="center", va="bottom", fontsize=6, color=color)
    ax.set_xticks(range(len(groups)), groups, fontsize=7)
