"""Figure helpers shared by the notebooks: one caption format, one save path, one tree drawing.

Every figure states its model pair, hardware and prompt counts (`caption`), and is written as PNG
and PDF under `figures/` (`save_figure`). `draw_mismatch` draws a real verified round as a small
tree: the accepted path, the last accepted node p*, and the target's next token t* sitting under
another parent (the paper's Figure 1(a) idea). matplotlib and seaborn are imported lazily.

Rules every figure follows: a paper series is drawn on the same axes as ours and named in the
legend (never on an unlabeled second axis); legends sit outside the plot area (`legend_outside`
under one panel, `legend_below` one legend under a figure of panels), never over data, and
`save_figure` refuses a figure whose legend covers an axis label, tick label or title
(`layout_problems`, from the drawn extents); within a figure a colour has one meaning. seaborn draws
the generalization bars (`plot_generalization`); matplotlib the rest, `grouped_bars` the bars
that carry intervals. The `plot_*` functions take the tables the notebooks also write as CSV
under `figures/`, so a committed figure can be redrawn from its CSV without measuring again.
A figure's title is two lines in plain words (`figure_title`): what is compared, then the pair,
machine, dtype and prompt counts. A figure with modeled throughput (the rounds priced by a cost
profile, `graftlib.lab.report.modeled`) draws it beside the wall-clock series, never instead of it, and its
legend says which is which; the profile's id is in figures/manifest.json and the ranking rule in the
notes beside the table's CSV; wall-clock speedups carry their paired bootstrap 95% interval as whiskers.
"""

import itertools
import math
import textwrap
from pathlib import Path

from graftlib.core.errors import GraftError
from graftlib.training.drafter.lineage import eval_records, stages


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


def _labels(fig) -> list:
    """The texts that name a figure's axes: axis labels, tick labels and panel titles of every visible axes."""
    out = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
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
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
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
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        area = ax.patch.get_window_extent(renderer)
        inner = area.padded(-1.0)  # a label touching the frame is outside it
        found += [f"the tick label {t.get_text()[:30]!r} lies inside its panel" for t in _drawn_ticklabels(ax, "x")
                  if t.get_visible() and t.get_text().strip() and inner.overlaps(t.get_window_extent(renderer))]
    return found


def save_figure(fig, name: str, figures_dir: str | Path) -> list[Path]:
    """`fig` as `<figures_dir>/<name>.png` and `.pdf`, overlapping x tick labels turned first (`untangle_ticks`);
    refused, in one line, where a legend covers a label, tick labels still overlap or one lies inside its panel."""
    untangle_ticks(fig)
    problems = layout_problems(fig) + tick_overlaps(fig) + labels_inside(fig)
    if problems:
        raise GraftError(f"figure {name}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
    out = Path(figures_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.{ext}" for ext in ("png", "pdf")]
    for p in paths:
        fig.savefig(p, dpi=150, bbox_inches="tight")
    return paths


def mismatch_view(record, max_extra_depth: int = 1) -> dict:
    """The nodes worth drawing for a recorded mismatch round (`RoundRecord` with `record_trees`):
    the accepted path, every node at depth <= d* + 1 on it or next to it, and where t* sits."""
    tree, acc = record.tree, record.accepted_nodes
    last = acc[-1]
    d_star, t_star = tree["depths"][last], record.target_next[last]
    keep = set(acc)
    for n in range(1, len(tree["tokens"])):
        d = tree["depths"][n]
        if d <= d_star + max_extra_depth and (tree["parents"][n] in keep or d == d_star + 1):
            keep.add(n)
    for n in sorted(keep):  # parents of the kept nodes (so every drawn node hangs somewhere)
        while n > 0 and tree["parents"][n] not in keep:
            n = tree["parents"][n]
            keep.add(n)
    hits = [n for n in keep if tree["depths"][n] == d_star + 1 and tree["tokens"][n] == t_star]
    return {"nodes": sorted(keep), "last": last, "t_star": t_star, "hits": hits, "accepted": acc}


WHITESPACE = {" ": "\u2423", "\n": "\u23ce", "\t": "\u21e5"}  # open box, return symbol, tab arrow


def visible(token: str) -> str:
    """A token's text as a tree node shows it: whitespace as a visible mark (a space is "\u2423"), other
    control characters escaped, the empty string as "\u2205"."""
    text = "".join(WHITESPACE.get(ch, ch if ch.isprintable() else repr(ch)[1:-1]) for ch in token)
    return text or "\u2205"


def draw_mismatch(ax, record, decode_token, max_children: int = 4) -> None:
    """Draw a mismatch round: accepted path (green), p* (bold), t* under the wrong parent (red)."""
    view = mismatch_view(record)
    tree = record.tree
    nodes = set(view["nodes"])
    # keep the picture small: per parent, the accepted child, the t* hits and the best others
    by_parent: dict[int, list[int]] = {}
    for n in sorted(nodes - {0}):
        by_parent.setdefault(tree["parents"][n], []).append(n)
    shown = {0}
    for kids in by_parent.values():
        must = [k for k in kids if k in view["accepted"] or k in view["hits"]]
        shown.update(must + [k for k in kids if k not in must][:max(0, max_children - len(must))])
    shown = {n for n in shown if all(a in shown for a in _ancestors(tree["parents"], n))}
    depth_rows: dict[int, list[int]] = {}
    for n in sorted(shown, key=lambda n: (tree["depths"][n], _ancestors(tree["parents"], n)[::-1], n)):
        depth_rows.setdefault(tree["depths"][n], []).append(n)
    pos = {}
    for d, row in depth_rows.items():
        for i, n in enumerate(row):
            pos[n] = (i - (len(row) - 1) / 2, -d)
    for n in shown - {0}:
        p = tree["parents"][n]
        on_path = n in view["accepted"] and p in view["accepted"]
        ax.plot([pos[p][0], pos[n][0]], [pos[p][1], pos[n][1]], color="tab:green" if on_path else "0.7",
                lw=2 if on_path else 1, zorder=1)
    for n in shown:
        color = "tab:red" if n in view["hits"] else "tab:green" if n in view["accepted"] else "white"
        ax.text(*pos[n], visible(decode_token(tree["tokens"][n])), ha="center", va="center",
                fontsize=8, fontweight="bold" if n == view["last"] else "normal",
                bbox=dict(boxstyle="round", fc=color, ec="black" if n == view["last"] else "0.5", alpha=0.9))
    x_last, y_last = pos[view["last"]]
    ax.annotate(f"target wants {visible(decode_token(view['t_star']))} here", (x_last, y_last - 1),
                xytext=(x_last, y_last - 1.35), ha="center", fontsize=7, color="tab:red")
    ax.set_axis_off()


def _ancestors(parents: list[int], n: int) -> list[int]:
    out = []
    while parents[n] >= 0:
        n = parents[n]
        out.append(n)
    return out


def plot_mismatch(M, regimes: dict, claim: str, example=None, decode_token=None, title: str = ""):
    """Figure 1(b): per regime a panel of the parent-child mismatch rate per task of DDTree and +TDES at the
    regime's fixed budget and GRAFT at its cap, and one of GRAFT's reduction against DDTree, the paper's claim above
    them (Figure 1(b) prints no numbers, so no reference line: the paper's nearest, Table 3's 54.7%, is GRAFT at
    beta 0.2 against beta 0, both with SABA, another pair); then, if given, a real mismatch round
    (`draw_mismatch`). `M`: `regimes.mismatch_table` per regime, stacked with a `regime` level."""
    import matplotlib.pyplot as plt

    methods = {"DDTree": "#9ecae1", "+TDES": "#4292c6", "GRAFT": "#08519c"}
    n = len(regimes)
    fig, axes = plt.subplots(2, n + (example is not None), figsize=(4.2 * n + 4 * (example is not None), 6.4),
                             squeeze=False)
    for j, (name, r) in enumerate(regimes.items()):
        R = M.loc[name]
        tasks = list(R.index)
        grouped_bars(axes[0, j], tasks, [(m, R[m], c) for m, c in methods.items()])
        axes[0, j].set_title(f"mismatch rate (DDTree, +TDES @{r.budget}; GRAFT cap {r.cap})\n{r.label}", fontsize=8)
        axes[0, j].set_ylim(bottom=0)
        grouped_bars(axes[1, j], tasks, [("GRAFT", R["GRAFT reduction %"], methods["GRAFT"])])
        axes[1, j].axhline(0, color="gray", lw=0.5)
        axes[1, j].set_title("GRAFT's mismatch reduction vs DDTree (%; the paper prints no number)", fontsize=8)
        axes[1, j].set_ylabel("reduction (%)", fontsize=8)
    if example is not None:
        draw_mismatch(axes[0, n], example, decode_token)
        axes[0, n].set_title("a real DDTree round: t* is in the tree under another parent", fontsize=8)
        axes[1, n].set_axis_off()
    fig.suptitle(f"{title}\nthe paper: {claim}", fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes.ravel())
    return fig


def plot_training_run(metrics, summary: dict, name: str):
    """Drafter training curves from `metrics.jsonl` (train/eval lines) and its `training.json`:
    losses, in-loop and offline chain tau, and the last evaluation's per-depth top-1/4/16 hit rates."""
    import matplotlib.pyplot as plt

    from graftlib.core.records import read_records

    recs = read_records(metrics)
    tr = [r for r in recs if r.get("kind") == "train"]
    ev = [r for r in recs if r.get("kind") == "eval"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    if tr:
        axes[0].plot([r["step"] for r in tr], [r["loss"] for r in tr], lw=0.5, alpha=0.6, label="train loss")
    steps = [r["step"] for r in ev]
    axes[0].plot(steps, [r["heldout_loss"] for r in ev], "o-", label="held-out loss")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("loss (cross-entropy vs the target, nats)")
    legend_outside(axes[0])
    axes[1].plot(steps, [r.get("tau", float("nan")) for r in ev], "o-", label="in-loop chain tau (held-out prompts)")
    axes[1].plot(steps, [r["offline_tau"] for r in ev], "s--", label="offline tau (held-out blocks)")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("chain tau (tokens accepted per round)")
    legend_outside(axes[1])
    for key, label in (("acc_by_depth", "top-1"), ("top4_by_depth", "top-4"), ("top16_by_depth", "top-16")):
        if ev and key in ev[-1]:
            axes[2].plot(range(1, len(ev[-1][key]) + 1), ev[-1][key], "o-", ms=3, label=label)
    axes[2].set_xlabel("depth")
    axes[2].set_ylabel("hit rate vs the target (held-out)")
    legend_outside(axes[2])
    d = summary["data"]
    fig.suptitle(f"{name} | target {summary['target']} | {summary['hardware']} | {len(ev)} evaluations | {d['sequences']} sequences, "
                 f"{d['response_tokens']} response tokens | {summary['train_s'] / 60:.0f} min, {summary['steps']} steps",
                 fontsize=8)
    fig.tight_layout()
    return fig


def curve_points(metrics) -> list[dict]:
    """The evaluations of a training run's `metrics.jsonl` (or a lineage), each with `tokens_seen` (the
    labels predicted with a loss so far: `lineage.eval_records`' `labels_seen`, estimated for records written
    before it was counted, then marked `tokens_estimated`)."""
    from graftlib.core.records import read_records

    return [{**r, "tokens_seen": r.get("labels_seen", 0),
             "tokens_estimated": "labels_seen" not in r or r.get("labels_estimated", False)}
            for r in eval_records(read_records(metrics))]


def plot_learning_curve(runs: dict, title: str, depths: tuple = (1, 2, 4, 8)):
    """Learning curves of one or more drafter runs (`{name: metrics.jsonl or lineage.jsonl}`) against the
    tokens seen (labels with a loss): held-out loss (and, where recorded, the hard CE on seen training text:
    the memorization gap), top-1 hit rate vs the target at `depths`, in-loop (solid) and offline (dashed) chain tau; the top axis of the first panel reads steps (first run's labels per
    step). A lineage (`graftlib.training.drafter.lineage`) gets a dotted line and its stage's name where each
    later stage begins (each stage scores its own held-out split)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    styles = ["-", "--", ":", "-."]
    first = None
    for i, (name, metrics) in enumerate(runs.items()):
        pts = curve_points(metrics)
        if not pts:
            continue
        color = f"C{i}"
        x = [p["tokens_seen"] / 1e6 for p in pts]
        est = " (tokens estimated)" if any(p["tokens_estimated"] for p in pts) else ""
        first = first or (pts[-1]["step"] / max(x[-1], 1e-12))
        axes[0].plot(x, [p["heldout_loss"] for p in pts], "o-", ms=3, color=color, label=f"{name}{est}")
        if any("seen_ce" in p for p in pts):  # the same evaluation on training text (`LoopTrainer.seen_batches`)
            axes[0].plot(x, [p.get("seen_ce", float("nan")) for p in pts], "x:", ms=3, color=color,
                         label=f"{name}: hard CE on seen (training) text")
        for j, d in enumerate(depths):
            ys = [p["acc_by_depth"][d - 1] if len(p.get("acc_by_depth", [])) >= d else float("nan") for p in pts]
            axes[1].plot(x, ys, styles[j % len(styles)], marker="o", ms=2, color=color, label=f"{name}: depth {d}")
        axes[2].plot(x, [p.get("tau", float("nan")) for p in pts], "o-", ms=3, color=color,
                     label=f"{name}: in-loop chain tau")
        axes[2].plot(x, [p.get("offline_tau", float("nan")) for p in pts], "s--", ms=3, color=color,
                     label=f"{name}: offline tau")
        for stage, first_index in stages(pts)[1:]:
            for ax in axes:
                ax.axvline(x[first_index], color=color, ls=":", lw=0.8)
                ax.annotate(stage, (x[first_index], 1.0), xycoords=("data", "axes fraction"), rotation=90,
                            va="top", ha="right", fontsize=6, color=color)
    for ax, ylabel in zip(axes, ("held-out loss", "top-1 hit rate vs the target (held-out)", "tau (tokens / round)")):
        ax.set_xlabel("tokens seen (M labels)")
        ax.set_ylabel(ylabel, fontsize=8)
        legend_outside(ax)
    if first:
        top = axes[0].secondary_xaxis("top", functions=(lambda m: m * first, lambda s: s / first))
        top.set_xlabel("steps", fontsize=8)
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    return fig


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
    drawn as whiskers where it exists; a nan value draws no bar (a series without that group), a zero a "0" on the axis. The colour is the
    caller's, so a series keeps it across panels and one legend serves them all."""
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


def plot_paper_bars(T, title: str, ours_label: str, paper_label: str):
    """Table 1: MAT and speedup per task and method, ours beside the paper's; the speedup panel has
    ours wall-clock (with its interval) and modeled. `T`: the notebook's table1.csv (`tables.table1`)."""
    import matplotlib.pyplot as plt

    rows = T[T.method.isin(["DFlash", "DDTree", "GRAFT"])]
    runs = list(rows.task + "\n" + rows.method)
    ours = f"{ours_label}: MAT, wall-clock speedup (95% CI)"  # one legend entry for both panels
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    grouped_bars(axes[0], runs, [(ours, rows.MAT, "tab:blue"), (paper_label, rows["paper MAT"], "tab:green")])
    grouped_bars(axes[1], runs, [(ours, rows.speedup, "tab:blue", (rows["speedup lo"], rows["speedup hi"])),
                                 (f"{ours_label}: modeled speedup", rows["m-speedup"], "tab:orange"),
                                 (paper_label, rows["paper speedup"], "tab:green")])
    for ax, name in zip(axes, ("MAT", "speedup vs AR"), strict=True):
        ax.axhline(1.0, color="gray", lw=0.5)
        ax.set_title(name)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_ratios(R, title: str, ours_label: str, paper_label: str):
    """Table 1 as ratios (`tables.table1_ratios`): one column of panels per comparison GRAFT / X, each on its own
    scale and naming the run X is (DDTree: its best fixed budget per task, the one Table 1's CSV and the claims
    use); the top row the TPS ratio per task and pooled (ours wall clock and modeled, each with its 95% interval
    where it exists, beside the paper's), the bottom row the MAT ratio (ours, per task, beside the paper's). A
    walked regime has no wall clock: its series is left out. Colours: blue ours by wall clock, orange ours
    modeled, brown our MAT, green the paper's."""
    import matplotlib.pyplot as plt

    versus = list(dict.fromkeys(R.versus))
    fig, axes = plt.subplots(2, len(versus), figsize=(2.6 * len(versus) + 1, 5.2), squeeze=False)
    wall = R["TPS ratio"].notna().any()
    for j, label in enumerate(versus):
        V = R[R.versus == label]
        tasks = list(V.task)
        series = ([(f"{ours_label}, wall clock (95% CI)", V["TPS ratio"], "tab:blue", (V.lo, V.hi))] if wall else [])
        grouped_bars(axes[0, j], tasks, [*series, (f"{ours_label}, modeled (95% CI)", V["m-TPS ratio"], "tab:orange",
                                                   (V["m-lo"], V["m-hi"])),
                                         (paper_label, V["paper TPS ratio"], "tab:green")])
        grouped_bars(axes[1, j], tasks, [(f"{ours_label}, MAT", V["MAT ratio"], "tab:brown"),
                                         (paper_label, V["paper MAT ratio"], "tab:green")])
        runs = textwrap.fill(f"vs {V.runs.iloc[-1].split(' vs ')[-1]}", 40)  # the run divided by (pooled: per task)
        axes[0, j].set_title(f"GRAFT / {label}: TPS\n{runs}", fontsize=7)
        axes[1, j].set_title(f"GRAFT / {label}: MAT\n{runs}", fontsize=7)
        for ax in axes[:, j]:
            ax.axhline(1.0, color="gray", lw=0.6)
            ax.tick_params(axis="x", labelsize=6, rotation=30)
    axes[0, 0].set_ylabel("ratio (1 = equal)")
    axes[1, 0].set_ylabel("ratio (1 = equal)")
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes.ravel())
    return fig


def plot_modeled_bars(T, title: str, ours_label: str, paper_label: str):
    """Table 1 in a regime that is modeled only (`regimes.regime_table` per task, stacked with a `task` level):
    MAT and the modeled speedup per task and method, beside the paper's; each method's best run by the
    modeled speedup."""
    import matplotlib.pyplot as plt

    best = T.reset_index().sort_values("speedup modeled").groupby(["task", "method"], sort=False).tail(1)
    best = best[best.method != "AR"].sort_values(["task", "method"])
    runs = list(best.task + "\n" + best.run)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    grouped_bars(axes[0], runs, [(ours_label, best.MAT, "tab:red"), (paper_label, best["paper MAT"], "tab:green")])
    grouped_bars(axes[1], runs, [(ours_label, best["speedup modeled"], "tab:red"),
                                 (paper_label, best["paper speedup"], "tab:green")])
    for ax, name in zip(axes, ("MAT", "modeled speedup vs AR"), strict=True):
        ax.axhline(1.0, color="gray", lw=0.5)
        ax.set_title(name)
        ax.tick_params(axis="x", labelsize=6)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_components(T, labels: list[str], title: str, ours_label: str, paper_label: str):
    """Table 2 in four panels, one per point of the paper's: tokens/s against DDTree per component (ours by wall
    clock with its interval, and modeled, beside the paper's), verified nodes per round (ours beside the paper's:
    +SABA and GRAFT at about 49 against DDTree's 110), tokens accepted per round (MAT, claim C7's quantity, beside
    the paper's) and the share of rounds SABA's AR gate ran as plain AR steps (the paper's methods have none).
    `T`: the averaged frame of `tables.table2` (index: the labels), or a modeled-only one without the wall-clock
    columns (`regimes.regime_components`). Colours: blue ours by wall clock, orange ours modeled, brown our round
    shape, green the paper's."""
    import matplotlib.pyplot as plt

    T = T.loc[labels]
    nodes = T["nodes"] if "nodes" in T else T["nodes/round"]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.0), gridspec_kw={"width_ratios": [1.6, 1, 1, 1]})
    wall = ([(f"{ours_label}, wall clock (95% CI)", T["dTPS %"], "tab:blue", (T["dTPS lo %"], T["dTPS hi %"]))]
            if "dTPS lo %" in T else [])  # a modeled-only table has no wall clock
    grouped_bars(axes[0], labels, [*wall, (f"{ours_label}, modeled", T["m-dTPS %"], "tab:orange"),
                                   (paper_label, T["paper dTPS %"], "tab:green")])
    axes[0].axhline(0, color="gray", lw=0.5)
    axes[0].set_ylabel("tokens/s vs DDTree (%)")
    grouped_bars(axes[1], labels, [(f"{ours_label}, round shape", nodes, "tab:brown"),
                                   (paper_label, T["paper nodes"], "tab:green")])
    axes[1].set_ylabel("verified nodes per round")
    grouped_bars(axes[2], labels, [(f"{ours_label}, round shape", T["MAT"], "tab:brown"),
                                   (paper_label, T["paper MAT"], "tab:green")])
    axes[2].set_ylabel("tokens accepted per round (MAT)")
    grouped_bars(axes[3], labels, [(f"{ours_label}, round shape", T["AR steps %"], "tab:brown")])
    axes[3].set_ylabel("rounds run as AR steps (%)")
    for ax, name in zip(axes, ("tokens/s against DDTree", "tree size", "acceptance", "SABA's AR gate"), strict=True):
        ax.set_title(name, fontsize=8)
        ax.tick_params(axis="x", labelsize=7, rotation=20)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_budget_curve(curve, title: str, measured: bool = True):
    """Figure 1(c): per group of rounds (hard, medium, easy thirds) against the budget B, the tokens accepted per
    round (MAT), the tokens per second measured (wall clock; left out where `measured` is False, a walked
    replay) and modeled (the rounds priced by the cost profile), each group's best budget starred. Every
    budget of the grid is a labelled tick. `curve`: `tables.budget_curve`."""
    import matplotlib.pyplot as plt

    panels = [("mat", "MAT (tokens accepted a round)"), *([("tps", "measured tokens/s (wall clock)")] if measured else []),
              ("m_tps", "modeled tokens/s (cost profile)")]
    grid = sorted(set(curve.index.get_level_values("B")))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharex=True)
    for group, c in curve.groupby(level=0, observed=True):
        c = c.droplevel(0).assign(mat=lambda x: x.a / x.rounds)
        for ax, (col, _) in zip(axes, panels, strict=True):
            line, = ax.plot(c.index, c[col], "o-", label=f"{group} rounds ({c.rounds.max()})")
            if col != "mat":
                ax.plot(c[col].idxmax(), c[col].max(), "*", color=line.get_color(), mec="black", ms=13)
    for ax, (_, name) in zip(axes, panels, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(grid, [str(b) for b in grid], fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("budget B (nodes)")
        ax.set_title(name + ("" if name.startswith("MAT") else "; star: best B"), fontsize=8)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def _ratio_whiskers(ax, T, tps: str, ref: float, color: str) -> None:
    """Each beta's paired 95% interval of `tps` over beta = `ref`'s (`regime_tables.beta_table`), where it has
    one (not on the reference itself)."""
    low, high = f"{tps} / beta {ref:g} CI95 low", f"{tps} / beta {ref:g} CI95 high"
    if low not in T:
        return
    ratio = T[f"{tps} / beta {ref:g}"].astype(float)
    has = T[low].notna() & (T[high] > T[low])
    ax.errorbar(T.index[has], ratio[has], yerr=[(ratio - T[low])[has], (T[high] - ratio)[has]], fmt="none",
                ecolor=color, capsize=2, lw=0.8)


def plot_beta_sweep(T, title: str, ours_label: str, paper_label: str, tps: str = "TPS"):
    """Table 3: GRAFT's MAT, tokens/s and mismatch reduction against beta, ours and the paper's on
    the same axes. The two pairs run at throughputs 10x apart, so MAT and tokens/s are drawn
    relative to the smallest beta of the sweep (beta's effect is the point); the mismatch reduction
    is already relative. `T`: index beta, columns as in the notebook's table3.csv (`regimes.regime_betas`);
    `tps`: ours tokens/s column ("modeled TPS" for a regime that is modeled only); where it is the wall-clock
    "TPS", the modeled series is drawn beside it; our tokens/s carry their paired 95% intervals over prompts.
    Colours: blue ours by wall clock, orange ours modeled, brown our round shape (MAT, mismatch reduction: no
    clock), green the paper's."""
    import matplotlib.pyplot as plt

    ref = T.index.min()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    panels = (("MAT", "paper MAT", f"MAT / MAT at beta = {ref:g}"),
              (tps, "paper TPS", f"tokens/s / tokens/s at beta = {ref:g}"),
              ("mismatch reduction %", "paper reduction %", "mismatch reduction (%)"))
    for ax, (col, pcol, ylabel) in zip(axes, panels, strict=True):
        ours, paper = T[col].astype(float), T[pcol].astype(float)
        if not col.startswith("mismatch"):
            ours, paper = ours / ours.loc[ref], paper / paper.loc[ref]
        wall = col == "TPS"
        color = "tab:blue" if wall else "tab:orange" if col.startswith("modeled") else "tab:brown"
        ax.plot(T.index, ours, "o-", color=color, label=f"{ours_label}, wall clock" if wall else
                f"{ours_label}, modeled" if col.startswith("modeled") else f"{ours_label}, round shape")
        _ratio_whiskers(ax, T, col, ref, color)
        if wall and "modeled TPS" in T:  # the modeled series beside the measured one: no timing noise
            modeled = T["modeled TPS"].astype(float)
            ax.plot(T.index, modeled / modeled.loc[ref], "^-", color="tab:orange", label=f"{ours_label}, modeled")
            _ratio_whiskers(ax, T, "modeled TPS", ref, "tab:orange")
        ax.plot(T.index, paper, "s--", color="tab:green", label=paper_label)
        ax.set_xlabel("beta")
        ax.set_ylabel(ylabel, fontsize=8)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_generalization(F, title: str):
    """Figure 5: per task, TDES's mismatch reduction and tokens/s against DDTree with the scorer trained on
    every task's rounds vs on GSM8K's only (grouped bars, one colour per scorer; the paper gives no numbers for
    this figure), the tokens/s ratios drawn as % change with their paired 95% intervals over prompts. `F`: index
    task, columns (metric, scorer) as in fig5_generalization.csv (`regime_tables.transfer_table`); a metric with
    no value (wall clock in a walked regime) gets no panel."""
    import matplotlib.pyplot as plt

    names = {"full": "TDES scorer trained on every task", "gsm8k-only": "TDES scorer trained on GSM8K only"}
    scorers = list(dict.fromkeys(F.columns.get_level_values(1)))
    colors = dict(zip(scorers, plt.get_cmap("tab10").colors, strict=False))
    panels = [("mismatch reduction %", "mismatch reduction vs DDTree (%)"),
              ("TPS / DDTree", "tokens/s vs DDTree, wall clock (% change)"),
              ("modeled TPS / DDTree", "modeled tokens/s vs DDTree (% change)")]
    panels = [p for p in panels if p[0] in F.columns.get_level_values(0) and F[p[0]].notna().any().any()]
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.4), squeeze=False)
    axes = axes[0]
    tasks = list(F.index)
    for ax, (col, name) in zip(axes, panels, strict=True):
        series = []
        for scorer in scorers:
            if col == "mismatch reduction %":
                series.append((names.get(scorer, scorer), list(F[(col, scorer)]), colors[scorer]))
                continue
            # a ratio as % change over DDTree, so a few percent read by eye (a bar from 0 to ~1.0 hides them)
            pct = [100 * (F.at[t, (c, scorer)] - 1) for c in (col, f"{col} CI95 low", f"{col} CI95 high")
                   for t in tasks]
            n = len(tasks)
            series.append((names.get(scorer, scorer), pct[:n], colors[scorer], (pct[n:2 * n], pct[2 * n:])))
        grouped_bars(ax, tasks, series)
        ax.axhline(0, color="gray", lw=0.5)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_edge_scores(tables: dict, title: str, paper_tdes: float | None = None):
    """Per regime (a row of panels): the mismatch rate, MAT and modeled tokens/s against DDTree per task and
    pooled, one bar per edge score (its colour kept across panels), with the paper's +TDES / DDTree (`paper_tdes`,
    Table 2) drawn on the ratio panel. `tables`: {regime label: `graftlib.lab.run.edge_scores.edge_score_table`}."""
    import matplotlib.pyplot as plt

    scores = list(dict.fromkeys(s for T in tables.values() for s in T.index.get_level_values("edge score")))
    colors = dict(zip(scores, plt.get_cmap("tab10").colors, strict=False))
    panels = (("mismatch rate", "parent-child mismatch rate", None), ("MAT", "MAT (tokens a round)", None),
              ("modeled TPS / DDTree", "modeled tokens/s / DDTree", 1.0))
    fig, axes = plt.subplots(len(tables), len(panels), figsize=(4.2 * len(panels), 3.0 * len(tables)), squeeze=False)
    for row, (label, T) in zip(axes, tables.items(), strict=True):
        tasks = list(dict.fromkeys(T.index.get_level_values("task")))
        for ax, (col, name, line) in zip(row, panels, strict=True):
            series = [(score, [T[col].get((t, score), float("nan")) for t in tasks], colors[score])
                      for score in scores]
            grouped_bars(ax, tasks, series)
            note = ""
            if line is not None:  # a ratio: the axis from just under its lowest bar, so a few percent show
                ax.axhline(line, color="gray", lw=0.5)
                if paper_tdes is not None:
                    ax.axhline(paper_tdes, color="black", ls="--", lw=0.8,
                               label=f"paper: +TDES / DDTree {paper_tdes:.3f}x (Table 2, Qwen3-8B, A100)")
                low = min((v for _, values, _ in series for v in values if not math.isnan(v)), default=line)
                bottom = min(line, low) - 0.05
                ax.set_ylim(bottom=bottom, top=max(ax.get_ylim()[1], (paper_tdes or line) + 0.02))
                note = f" (axis from {bottom:.2f}: the differences are a few percent)"
            ax.set_title(f"{name}{note}\n{label.split(':')[0]}", fontsize=8)  # the regime, not its figures
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes.ravel())
    return fig


def plot_temperature_tracking(R, title: str, paper_mean: float | None = None):
    """SABA at T > 0 (`graftlib.training.graft.temperature_tracking`): per temperature and fit, the
    retained oracle throughput on held-out rounds and the chosen budgets' speedup over AR steps on
    the same rounds (grouped bars, seaborn; a fit keeps its colour in both panels). `R`: its rows
    (the notebook's sampling_saba_tracking.csv); `paper_mean`: the paper's Figure 6 mean (T = 0)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    order = list(dict.fromkeys(R.fit))
    colours = dict(zip(order, sns.color_palette(n_colors=len(order)), strict=True))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    panels = (("mean_retained", "retained oracle throughput (held-out rounds)", None),
              ("speedup_vs_ar", "speedup vs AR steps (same rounds)", 1.0))
    for ax, (col, name, line) in zip(axes, panels, strict=True):
        rows = R.dropna(subset=[col])
        sns.barplot(rows, x="temperature", y=col, hue="fit", hue_order=[f for f in order if f in set(rows.fit)],
                    palette=colours, ax=ax, errorbar=None)
        if line is not None:
            ax.axhline(line, color="gray", lw=0.5)
        ax.set(title=name, xlabel="temperature", ylabel="")
    if paper_mean is not None:
        axes[0].axhline(paper_mean, color="black", ls="--", lw=0.8, label="paper Figure 6 mean (Qwen3-8B, A100, T = 0)")
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_regimes(T, curve, oracle, title: str, paper_mean: float):
    """The paper's items in both cost regimes (`graftlib.lab.run.regimes`): (a) per method the best run's speedup
    over AR, this machine's modeled and wall-clock and the paper regime's modeled, beside the paper's GSM8K
    Table 1 row; (b) Figure 1(c) under the paper's costs (tokens/s against B per group of rounds, best B
    starred); (c) Figure 6 under the paper's costs (retained oracle throughput per round, the paper's mean
    dashed). `T`: the notebook's stacked `regime_table` frames, `curve`: `tables.budget_curve`, `oracle`:
    `replay.oracle_rows` as a frame."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), gridspec_kw={"width_ratios": [2.2, 1, 1]})
    best = T.sort_values("speedup modeled").groupby(["regime", "method"], sort=False).tail(1)
    methods = [m for m in ("DFlash", "DDTree", "+TDES", "+SABA", "GRAFT", "CaDDTree", "EAGLE-3", "OPT-Tree")
               if m in set(best.method)]

    def col(regime, name):
        b = best[best.regime == regime].set_index("method")
        return [b[name].get(m, float("nan")) for m in methods]

    grouped_bars(axes[0], methods, [("this machine, wall clock", col("machine", "speedup wall"), "tab:blue"),
                                    ("this machine, modeled", col("machine", "speedup modeled"), "tab:orange"),
                                    ("paper's costs, modeled", col("paper", "speedup modeled"), "tab:red"),
                                    *([("paper's costs and acceptance (a construction), modeled",
                                        col("paper+acceptance", "speedup modeled"), "tab:purple")]
                                      if "paper+acceptance" in set(best.regime) else []),
                                    ("paper (Qwen3-8B, A100), GSM8K", col("paper", "paper speedup"), "tab:green")])
    axes[0].axhline(1.0, color="gray", lw=0.5)
    axes[0].set_ylabel("speedup vs AR (best run)")
    axes[0].set_title("(a) Tables 1-2: each method's best run", fontsize=8)
    for group, c in curve.groupby(level=0, observed=True):
        c = c.droplevel(0)
        line, = axes[1].plot(c.index, c.m_tps, "o-", label=f"{group} rounds")
        axes[1].plot(c.m_tps.idxmax(), c.m_tps.max(), "*", color=line.get_color(), mec="black", ms=12)
    axes[1].set_xscale("log", base=2)
    axes[1].set_xlabel("budget B (nodes)")
    axes[1].set_ylabel("modeled tokens / s")
    axes[1].set_title("(b) Figure 1(c), paper's costs; star: best B", fontsize=8)
    axes[2].plot(oracle["round"], oracle.retained, ".-", lw=0.6, color="tab:red",
                 label=f"SABA, paper's costs: mean {oracle.retained.mean():.3f}")
    axes[2].axhline(paper_mean, color="tab:green", ls="--", lw=0.8, label=f"paper: mean {paper_mean:.3f}")
    axes[2].set_xlabel("round")
    axes[2].set_ylabel("TPS(B_t) / TPS(B*_t)")
    axes[2].set_title("(c) Figure 6, paper's costs", fontsize=8)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_oracle_tracking(fixed: dict[str, dict], rows: dict, paper_mean: float, title: str):
    """Figure 6: (a) per budget set, SABA's mean retained share of the same-prefix oracle's throughput beside
    the best fixed budget's (chosen after the fact, its B under the bar) with SABA / best fixed and its
    interval over prompts, the paper's mean dashed; (b) the distribution of SABA's per-round share, a colour per
    budget set (none of (a)'s), as the share of its rounds that keep at least a given share of the oracle (one
    line per set, so no set hides another). `fixed`: {set name: `regimes.against_fixed`}, `rows`: {set name: its
    oracle rows as a frame}."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [1.5, 1]})
    names = list(fixed)
    grouped_bars(axes[0], names, [("SABA (per-round budget)", [fixed[n]["saba"] for n in names], "tab:blue"),
                                  ("best fixed budget, after the fact", [fixed[n]["best_fixed"] for n in names],
                                   "tab:gray")])
    labels = []
    for n in names:
        f = fixed[n]
        ci = f" [{f['ci'][0]:.3f}, {f['ci'][1]:.3f}]" if f["ci"] else " (no interval)"
        labels.append(f"{textwrap.fill(n, 24)}\nbest fixed B={f['best_fixed_budget']}\nSABA / fixed {f['ratio']:.3f}x\n{ci.strip()}")
    axes[0].set_xticks(range(len(names)), labels, fontsize=6)
    axes[0].axhline(paper_mean, color="black", ls="--", lw=0.8, label=f"paper's SABA (Qwen3-8B, A100): {paper_mean:.3f}")
    axes[0].set_ylim(0, 1.05)
    axes[0].set_ylabel("mean retained oracle throughput")
    axes[0].set_title("(a) SABA against one budget every round", fontsize=8)
    for n, color, style in zip(names, ("tab:purple", "tab:olive", "tab:cyan", "tab:pink", "tab:brown"),
                               ("-", "--", "-.", ":", "-"), strict=False):
        axes[1].ecdf(rows[n]["retained"], complementary=True, color=color, ls=style, lw=1.4,
                     label=f"SABA's rounds, {n}")
    axes[1].axvline(paper_mean, color="black", ls="--", lw=0.8)
    axes[1].set_xlim(0, 1.02)
    axes[1].set_ylim(0, 1.02)
    axes[1].set_xlabel("retained oracle throughput per round, x")
    axes[1].set_ylabel("share of SABA's rounds retaining >= x")
    axes[1].set_title("(b) SABA's rounds", fontsize=8)
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    legend_below(fig, axes)
    return fig


def plot_strength_axis(T, sizes: dict[str, float], calibrated: float | None, paper_mat: dict[str, float], title: str):
    """The strength axis (`strength_axis.axis_table` `T`) as small multiples: one panel per claim with its modeled
    ratio against s, 1.0 grey and the paper's size dashed (each panel its own axis, so no claim hides another);
    then acceptance (MATs against s, the paper's dashed) and SABA's trees beside the best fixed DDTree budget,
    each in a panel of its own with its own legend. The task's calibrated strength is a dotted vertical line in
    every panel, s = 0 the embedded drafter."""
    import matplotlib.pyplot as plt

    claims = [c for c in sizes if f"{c} ratio" in T]
    cols = 4
    rows = -(-(len(claims) + 2) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    flat = list(axes.ravel())
    s = list(T.index)
    for ax, claim in zip(flat, claims, strict=False):
        ax.plot(s, T[f"{claim} ratio"], "o-", color="#08519c", ms=3, lw=1, label="ours (modeled)")
        ax.axhline(sizes[claim], color="black", ls="--", lw=0.8, label="the paper's")
        ax.axhline(1.0, color="gray", lw=0.6)
        top = max(float(T[f"{claim} ratio"].max()), sizes[claim]) * 1.08
        ax.set_ylim(0, top)
        ax.set_title(f"{claim}: ratio vs s (paper {sizes[claim]:.2f}x)", fontsize=8)
        ax.set_ylabel("modeled TPS ratio", fontsize=7)
    acc, nodes = flat[len(claims)], flat[len(claims) + 1]
    for i, (name, col) in enumerate((("chain", "chain MAT"), ("DDTree", next(c for c in T if c.startswith("DDTree@"))),
                                     ("GRAFT", "GRAFT MAT"))):
        colour = ("#1b9e77", "#7570b3", "#000000")[i]
        acc.plot(s, T[col], "s-", color=colour, ms=3, label=f"{name} ({col})")
        if name in paper_mat:
            acc.axhline(paper_mat[name], color=colour, ls="--", lw=0.8, label=f"paper's {name} MAT")
    acc.set_ylim(bottom=0)
    acc.set_ylabel("MAT (tokens per round)", fontsize=7)
    acc.set_title("acceptance", fontsize=8)
    for col, colour in (("+SABA nodes", "#a6761d"), ("GRAFT nodes", "#e7298a"), ("best fixed budget", "#666666")):
        nodes.plot(s, T[col], "D-" if col != "best fixed budget" else "s--", color=colour, ms=3, label=col)
    nodes.set_ylim(0, 1.1 * max(T[c].max() for c in ("+SABA nodes", "GRAFT nodes", "best fixed budget")))
    nodes.set_ylabel("nodes per round", fontsize=7)
    nodes.set_title("SABA's trees, the best fixed budget", fontsize=8)
    spare = flat[len(claims) + 2:]
    for ax in spare:
        ax.set_axis_off()
    for ax in flat[:len(claims) + 2]:
        ax.set_xlabel("drafter strength s", fontsize=7)
        if calibrated is not None:
            ax.axvline(calibrated, color="#999999", lw=0.8, ls=":", label="calibrated strength")
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    if spare:  # the last two panels' key in the grid's empty cell, over no data
        keyed = {label: h for ax in (acc, nodes) for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
                 if label != "calibrated strength"}
        spare[0].legend(list(keyed.values()), list(keyed), loc="center", fontsize=6.5, frameon=False,
                        title="acceptance; SABA's trees", title_fontsize=7)
    else:
        for ax in (acc, nodes):
            legend_outside(ax, fontsize=6)
    legend_below(fig, flat[:1])
    return fig


VERDICT_COLOURS = {"reproduced": "#a1d99b", "direction only": "#e5f5e0", "inside noise": "#e0e0e0",
                   "opposite": "#fcbba1", "not tested": "#ffffff"}


def _wrapped(text, width: int) -> str:
    """`text` whole, broken into lines of at most `width` characters (a figure never cuts a claim short)."""
    import textwrap

    return "\n".join(textwrap.wrap(str(text), width, break_long_words=False)) or ""


REGIME_HEADERS = {"machine": "this machine", "paper": "paper's A100 costs",
                  "paper+acceptance": "paper's costs + acceptance (drafter-strength construction)"}


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

