"""The paper's Figures 1(c), 5 and 6, SABA at T > 0, the three regimes side by side and the strength axis."""

import textwrap

from graftlib.lab.workbook.plots.layout import finish, grouped_bars, legend_below, legend_outside


def plot_budget_curve(curve, title: str, measured: bool = True):
    """Figure 1(c): per group of rounds (hard, medium, easy thirds) against the budget B, the tokens accepted per
    round (MAT), the tokens per second measured (wall clock; left out where `measured` is False, a walked
    replay) and modeled (the rounds priced by the cost profile), each group's best budget starred. Every
    budget of the grid is a labelled tick. `curve`: `tables.budget_curve`."""
    import matplotlib.pyplot as plt

    panels = [("mat", "MAT (tokens accepted a round)"), *([("tps",
                                                            "measured tokens/s (wall clock)")] if measured else []),
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
    return finish(fig, axes, title)


def plot_generalization(F, title: str):
    """Figure 5: per task, TDES's mismatch reduction and tokens/s against DDTree with the scorer trained on
    every task's rounds vs on GSM8K's only (grouped bars, one colour per scorer; the paper gives no numbers for
    this figure), the tokens/s ratios drawn as % change with their paired 95% intervals over prompts. `F`: index
    task, columns (metric, scorer) as in fig5_generalization.csv (`tables.transfer_table`); a metric with
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
    return finish(fig, axes, title)


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
    return finish(fig, axes, title)


def plot_regimes(T, curve, oracle, title: str, paper_mean: float):
    """The paper's items in each cost regime (`graftlib.lab.run.regimes`): (a) per method the best run's speedup
    over AR, this machine's modeled and wall-clock and the paper regimes' modeled, beside the paper's GSM8K
    Table 1 row; (b) Figure 1(c) under the paper's costs (tokens/s against B per group of rounds, best B
    starred); (c) Figure 6 under the paper's costs (the distribution of the per-round retained oracle throughput,
    the paper's mean dashed, 95% dotted). `T`: the notebook's stacked `regime_table` frames, `curve`:
    `tables.budget_curve`, `oracle`: `replay.oracle_rows` as a frame."""
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
    # hundreds of rounds: their distribution (the share of rounds keeping at least x of the oracle), not a line
    kept = sorted(oracle.retained, reverse=True)
    share = [(i + 1) / len(kept) for i in range(len(kept))]
    axes[2].step(kept, share, where="post", color="tab:red",
                 label=f"SABA, paper's costs: mean {oracle.retained.mean():.3f}, {len(kept)} rounds")
    axes[2].axvline(paper_mean, color="tab:green", ls="--", lw=0.8, label=f"paper: mean {paper_mean:.3f}")
    axes[2].axvline(0.95, color="gray", ls=":", lw=0.8,
                    label=f">= 95% of the oracle: {sum(k >= 0.95 for k in kept) / len(kept):.0%} of rounds")
    axes[2].set_xlabel("retained share TPS(B_t) / TPS(B*_t)")
    axes[2].set_ylabel("share of rounds keeping at least x")
    axes[2].set_title("(c) Figure 6, paper's costs", fontsize=8)
    return finish(fig, axes, title)


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
        labels.append(f"{textwrap.fill(n, 24)}\nbest fixed B={f['best_fixed_budget']}\nSABA / fixed "
                      f"{f['ratio']:.3f}x\n{ci.strip()}")
    axes[0].set_xticks(range(len(names)), labels, fontsize=6)
    axes[0].axhline(paper_mean, color="black", ls="--", lw=0.8,
                    label=f"paper's SABA (Qwen3-8B, A100): {paper_mean:.3f}")
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
    return finish(fig, axes, title)


def plot_strength_axis(T, sizes: dict[str, float], paper_mat: dict[str, float], title: str, x: str | None = None,
                       x_label: str = "drafter strength s", marks: dict[str, float] | None = None,
                       band: tuple[str, float, float] | None = None):
    """An axis of the construction (`strength_axis.axis_table` `T`) as small multiples: one panel per claim with its
    modeled ratio and 95% interval over prompts against the axis (`T`'s index, or its column `x`: the measured
    tree gain), 1.0 grey and the paper's size dashed (each panel its own axis, so no claim hides another); then
    acceptance (MATs, the paper's dashed) and SABA's trees beside the best fixed DDTree budget, each in a panel of
    its own. `marks`: labelled dotted vertical lines in every panel (the calibrated strength, the paper's gain);
    `band`: (label, low, high) shaded in every panel (the DDTree paper's range of gains)."""
    import matplotlib.pyplot as plt

    claims = [c for c in sizes if f"{c} ratio" in T]
    cols = 4
    rows = -(-(len(claims) + 2) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    flat = list(axes.ravel())
    T = T.sort_values(x) if x else T
    s = list(T[x] if x else T.index)
    short = x_label.split()[-1]
    for ax, claim in zip(flat, claims, strict=False):
        ax.plot(s, T[f"{claim} ratio"], "o-", color="#08519c", ms=3, lw=1, label="ours (modeled)")
        if f"{claim} CI95 low" in T:
            ax.fill_between(s, T[f"{claim} CI95 low"], T[f"{claim} CI95 high"], color="#08519c", alpha=0.15, lw=0,
                            label="95% interval over prompts")
        ax.axhline(sizes[claim], color="black", ls="--", lw=0.8, label="the paper's")
        ax.axhline(1.0, color="gray", lw=0.6)
        ax.set_title(f"{claim}: ratio vs {short} (paper {sizes[claim]:.2f}x)", fontsize=8)
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
        ax.set_xlabel(x_label, fontsize=7)
        for (label, at), colour in zip((marks or {}).items(), ("#999999", "#d95f02"), strict=False):
            ax.axvline(at, color=colour, lw=0.8, ls=":", label=label)
        if band is not None:
            ax.axvspan(band[1], band[2], color="#fdd0a2", alpha=0.35, lw=0, label=band[0])
    fig.suptitle(title, fontsize=7)
    fig.tight_layout()
    if spare:  # the last two panels' key in the grid's empty cell, over no data
        keyed = {label: h for ax in (acc, nodes) for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
                 if label not in (marks or {}) and (band is None or label != band[0])}
        spare[0].legend(list(keyed.values()), list(keyed), loc="center", fontsize=6.5, frameon=False,
                        title="acceptance; SABA's trees", title_fontsize=7)
    else:
        for ax in (acc, nodes):
            legend_outside(ax, fontsize=6)
    legend_below(fig, flat[:1])
    return fig


def _number(column) -> float:
    """A one-row column's value as a float; NaN where the row is absent or the value undefined (an interval over
    fewer prompts than it needs is None)."""
    value = column.iloc[0] if len(column) else None
    return float("nan") if value is None else float(value)


def plot_budget_policies(T, losses: dict[str, dict], kinds: dict[str, str], title: str):
    """The budget-policy study (`graftlib.lab.report.budget_policy`): (a) per regime each policy's mean retained share
    of the same-prefix oracle's throughput on the held-out prompts over the best fixed budget's (chosen after the
    fact on them, its B by that share and by same-prefix throughput), with its 95% interval over prompts, on an
    axis that shows the differences (replayed figures, said so; decoded ones: `budget_policy.timed_rows`); (b)
    SABA's loss against the oracle split into its causes (points of retained throughput; a negative one gained), a
    group per regime. `T`: `policy_rows` with a
    `regime` column, `losses`: {regime: `decompose`}, `kinds`: `POLICY_KINDS`."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [2, 1]})
    regimes = list(dict.fromkeys(T["regime"]))
    colors = dict(zip(kinds, ("black", "tab:gray", "silver", "tab:blue", "lightsteelblue", "tab:orange", "tab:green"),
                      strict=False))
    shown = [k for k in kinds if (T["kind"] == k).any()]
    width = 0.8 / max(len(shown), 1)
    for i, kind in enumerate(shown):  # points with their intervals: ratios near 1 read only on an axis not from 0
        rows = [T[(T["regime"] == r) & (T["kind"] == kind)] for r in regimes]
        x = np.arange(len(regimes)) + (i - (len(shown) - 1) / 2) * width
        v, lo, hi = (np.array([_number(r[col]) for r in rows]) for col in ("vs_best_fixed", "ci_low", "ci_high"))
        axes[0].errorbar(x, v, yerr=np.vstack([np.nan_to_num(v - lo), np.nan_to_num(hi - v)]), fmt="o", ms=5,
                         capsize=3, color=colors[kind], label=kinds[kind])
    groups = []
    for r in regimes:
        best = T[(T["regime"] == r) & (T["kind"] == "best_fixed")].iloc[0]
        edge = " (grid edge)" if best["best_fixed_at_edge"] else ""
        groups.append(f"{textwrap.fill(r, 26)}\nbest fixed B={best['best_fixed_B']}{edge}; "
                      f"by tok/s B={best['best_fixed_tps_B']}")
    axes[0].set_xticks(range(len(regimes)), groups, fontsize=7)
    axes[0].axhline(1.0, color="gray", lw=0.8, ls="--")
    axes[0].set_ylabel("retained oracle share / the best fixed budget's\n(replayed, held-out rounds; 95% interval)")
    axes[0].set_title("(a) replayed, not decoded: each per-round policy against the best fixed budget", fontsize=8)
    causes = [c for c in next(iter(losses.values())) if c != "total"]
    grouped_bars(axes[1], [textwrap.fill(r, 18) for r in losses],
                 [(f"SABA's loss: {c}", [100 * losses[r][c] for r in losses], color)
                  for c, color in zip(causes, ("tab:purple", "tab:red", "tab:olive", "tab:cyan"), strict=False)])
    axes[1].axhline(0, color="gray", lw=0.6)
    axes[1].set_ylabel("points of retained oracle throughput")
    axes[1].set_title("(b) SABA's loss by cause (one model swapped for the truth at a time)", fontsize=8)
    return finish(fig, axes, title)


def plot_mix(M, title: str):
    """The mixed workload decoded (`budget_policy.mix_rows`): per category and pooled ("all"), each policy's
    throughput (a) over the best single fixed budget for the whole mix and (b) over the category's own best fixed
    budget (both chosen after the fact), points with their 95% intervals over prompts; the goals drawn: 1.05 pooled
    in (a), 0.97 in (b)."""
    import matplotlib.pyplot as plt
    import numpy as np

    cats = list(dict.fromkeys(M["category"]))
    kinds = list(dict.fromkeys(M["kind"]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4), sharey=False)
    width = 0.8 / max(len(kinds), 1)
    for panel, (col, ci) in enumerate((("vs_best_fixed", None), ("vs_category_best", "vs_category_best_ci"))):
        for i, kind in enumerate(kinds):
            rows = [M[(M["category"] == c) & (M["kind"] == kind)] for c in cats]
            v = np.array([_number(r[col]) for r in rows])
            if ci is None:
                lo, hi = (np.array([_number(r[k]) for r in rows]) for k in ("ci_low", "ci_high"))
            else:
                bounds = [r[ci].iloc[0] if len(r) and r[ci].iloc[0] is not None else (np.nan, np.nan) for r in rows]
                lo, hi = np.array([b[0] for b in bounds], float), np.array([b[1] for b in bounds], float)
            x = np.arange(len(cats)) + (i - (len(kinds) - 1) / 2) * width
            axes[panel].errorbar(x, v, yerr=np.vstack([np.nan_to_num(v - lo), np.nan_to_num(hi - v)]), fmt="o",
                                 ms=5, capsize=3, label=kind)
        axes[panel].set_xticks(range(len(cats)), [textwrap.fill(c, 10) for c in cats], fontsize=7)
        axes[panel].axhline(1.0, color="gray", lw=0.8, ls="--")
    best = M["best_fixed"].iloc[0]
    axes[0].axhline(1.05, color="tab:green", lw=0.8, ls=":", label="goal, pooled: 1.05x")
    axes[0].set_ylabel(f"tokens / s over the mix's best single fixed run\n({best}; decoded, 95% interval)")
    axes[0].set_title("(a) decoded: each policy against one fixed budget for the whole mix", fontsize=8)
    axes[1].axhline(0.97, color="tab:green", lw=0.8, ls=":", label="goal, per category: 0.97x")
    axes[1].set_ylabel("tokens / s over the category's own best fixed run\n(decoded, 95% interval)")
    axes[1].set_title("(b) decoded: each policy against each category's own best fixed budget", fontsize=8)
    return finish(fig, axes, title)
