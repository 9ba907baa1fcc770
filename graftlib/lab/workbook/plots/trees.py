"""A verified round drawn as a small tree: the accepted path, the last accepted node p* and the target's next
token t* under another parent (the paper's Figure 1(a) idea), and Figure 1(b)'s mismatch bars beside it."""

from graftlib.lab.workbook.plots.layout import grouped_bars, legend_below


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
