"""The paper's Tables 1-3 beside ours: MAT and speedup bars, GRAFT's ratios over each method (naming the run each
divides by), Table 2's components, Table 3's beta sweep and the edge-score comparison."""

import math
import textwrap

from graftlib.lab.workbook.plots.layout import finish, grouped_bars, legend_below


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
    return finish(fig, axes, title)


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
    return finish(fig, axes, title)


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
    return finish(fig, axes, title)


def _ratio_whiskers(ax, T, tps: str, ref: float, color: str) -> None:
    """Each beta's paired 95% interval of `tps` over beta = `ref`'s (`tables.beta_table`), where it has
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
    return finish(fig, axes, title)


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
